"""The watch caches the Offering and Subscription reconcilers read, and their indexes.

Stores are the watch sources' own dicts keyed by (namespace, name). Indexes are kept in step
with every watch event (`Index.update(old, new)`) instead of being rebuilt per reconcile, so
a family of a 2,000-object cluster is one dict lookup:

- `roots`: `status.compatibilityRoot` -> Subscriptions (the family index);
- `parents`: `spec.parent.subscriptionRef` -> Subscriptions (children not stamped yet);
- `bound`: `spec.offeringRef` -> Subscriptions (an Offering's readiness wakes them);
- `requirers`: `spec.compatibility.requiredOfferings` -> Offerings (a requirement's
  readiness wakes them).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

from finops.hierarchy import family, offerings, refs

Store = dict[tuple[str, str], dict[str, Any]]


class Index:
    """value -> keys of the objects whose `values(obj)` include it."""

    def __init__(self, values: Callable[[Mapping[str, Any]], Iterable[Hashable]]) -> None:
        self.values = values
        self._keys: dict[Hashable, set[refs.Key]] = collections.defaultdict(set)

    def update(self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        """Move one object from the values it had to the values it has."""
        if old is not None:
            key = refs.key_of(old)
            for value in set(self.values(old)):
                bucket = self._keys.get(value)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del self._keys[value]
        if new is not None:
            key = refs.key_of(new)
            for value in set(self.values(new)):
                self._keys[value].add(key)

    def keys(self, value: Hashable) -> set[refs.Key]:
        return set(self._keys.get(value, ()))


def _root(obj: Mapping[str, Any]) -> list[str]:
    root = family.root_of(obj)
    return [root] if root else []


def _parent(obj: Mapping[str, Any]) -> list[refs.Key]:
    up = family.parent_key(obj)
    return [up] if up is not None else []


def _offering(obj: Mapping[str, Any]) -> list[refs.Key]:
    key = family.offering_key(obj)
    return [key] if key is not None else []


class Caches:
    """What both reconcilers read: three stores and four indexes."""

    def __init__(
        self,
        offerings_store: Store,
        subscriptions_store: Store,
        books: Mapping[Any, dict[str, Any]],
        namespaces: Store | None = None,
    ) -> None:
        self.offerings = offerings_store
        self.subscriptions = subscriptions_store
        self.books = books
        self.namespaces = namespaces
        self.roots = Index(_root)
        self.parents = Index(_parent)
        self.bound = Index(_offering)
        self.requirers = Index(offerings.requirements)

    def subscription_changed(
        self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> None:
        for index in (self.roots, self.parents, self.bound):
            index.update(old, new)

    def offering_changed(
        self, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None
    ) -> None:
        self.requirers.update(old, new)

    def _subs(self, keys: Iterable[refs.Key]) -> list[dict[str, Any]]:
        found = (self.subscriptions.get(k) for k in sorted(keys))
        return [s for s in found if s is not None]

    def members(self, root: str) -> list[dict[str, Any]]:
        """The family index as `family.Members`."""
        return self._subs(self.roots.keys(root))

    def children(self, parent: refs.Key) -> list[dict[str, Any]]:
        """The parent index as `family.Children`."""
        return self._subs(self.parents.keys(parent))

    def offering(self, key: refs.Key) -> dict[str, Any] | None:
        return self.offerings.get(key)

    def subscription(self, key: refs.Key) -> dict[str, Any] | None:
        return self.subscriptions.get(key)

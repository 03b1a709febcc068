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
from typing import Any, Generic, TypeVar

from finops.api import bodies, views
from finops.hierarchy import family, offerings, refs

B = TypeVar("B", bodies.OfferingBody, bodies.SubscriptionBody)
OfferingStore = dict[tuple[str, str], bodies.OfferingBody]
SubscriptionStore = dict[tuple[str, str], bodies.SubscriptionBody]
NamespaceStore = dict[tuple[str, str], dict[str, Any]]


class Index(Generic[B]):
    """value -> keys of the objects whose `values(obj)` include it."""

    def __init__(self, values: Callable[[B], Iterable[Hashable]]) -> None:
        self.values: Callable[[B], Iterable[Hashable]] = values
        self._keys: dict[Hashable, set[views.Key]] = collections.defaultdict(set)

    def update(self, old: B | None, new: B | None) -> None:
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

    def keys(self, value: Hashable) -> set[views.Key]:
        return set(self._keys.get(value, ()))


def _root(obj: bodies.SubscriptionBody) -> list[str]:
    root = family.root_of(obj)
    return [root] if root else []


def _parent(obj: bodies.SubscriptionBody) -> list[views.Key]:
    up = family.parent_key(obj)
    return [up] if up is not None else []


def _offering(obj: bodies.SubscriptionBody) -> list[views.Key]:
    key = family.offering_key(obj)
    return [key] if key is not None else []


class Caches:
    """What both reconcilers read: three stores and four indexes."""

    def __init__(
        self,
        offerings_store: OfferingStore,
        subscriptions_store: SubscriptionStore,
        books: Mapping[tuple[str, str], bodies.PriceBookBody],
        namespaces: NamespaceStore | None = None,
    ) -> None:
        self.offerings = offerings_store
        self.subscriptions = subscriptions_store
        self.books = books
        self.namespaces = namespaces
        self.roots: Index[bodies.SubscriptionBody] = Index(_root)
        self.parents: Index[bodies.SubscriptionBody] = Index(_parent)
        self.bound: Index[bodies.SubscriptionBody] = Index(_offering)
        self.requirers: Index[bodies.OfferingBody] = Index(offerings.requirements)

    def subscription_changed(
        self, old: bodies.SubscriptionBody | None, new: bodies.SubscriptionBody | None
    ) -> None:
        for index in (self.roots, self.parents, self.bound):
            index.update(old, new)

    def offering_changed(
        self, old: bodies.OfferingBody | None, new: bodies.OfferingBody | None
    ) -> None:
        self.requirers.update(old, new)

    def _subs(self, keys: Iterable[views.Key]) -> list[bodies.SubscriptionBody]:
        found = (self.subscriptions.get(k) for k in sorted(keys))
        return [s for s in found if s is not None]

    def members(self, root: str) -> list[bodies.SubscriptionBody]:
        """The family index as `family.Members`."""
        return self._subs(self.roots.keys(root))

    def children(self, parent: views.Key) -> list[bodies.SubscriptionBody]:
        """The parent index as `family.Children`."""
        return self._subs(self.parents.keys(parent))

    def offering(self, key: views.Key) -> bodies.OfferingBody | None:
        return self.offerings.get(key)

    def subscription(self, key: views.Key) -> bodies.SubscriptionBody | None:
        return self.subscriptions.get(key)

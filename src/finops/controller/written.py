"""Read-your-writes over the watch cache: the objects this controller just wrote.

A status or finalizer write returns the object at its new `resourceVersion`, but the watch
delivers that version a little later. Until it does, the cache holds the version the write
replaced, and a reconcile reading it (the object itself, or a child reading its parent)
decides from a state that is already gone: a redundant write that loses with a 409, or a
child held for a parent that is in fact Ready. The overlay answers with the written object
exactly while the cache still shows a version that write superseded; once the cache shows
anything else it is dropped and the cache answers again. Writes stay guarded by
`resourceVersion`, so a wrong answer here could only cost a 409, never a lost update.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from finops.api import bodies, views
from finops.hierarchy import refs


def version_of(obj: bodies.Object) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclasses.dataclass
class _Entry:
    obj: bodies.SubscriptionBody
    superseded: set[str]
    """The versions our writes replaced on the way to `obj` (the cache may still show one)."""


class Written:
    """key -> the Subscription as last written, while the cache lags behind it."""

    def __init__(
        self,
        project: Callable[[Mapping[str, object]], bodies.SubscriptionBody] = bodies.as_subscription,
    ) -> None:
        """`project` is the watch store's projection, so an answer has the cache's shape."""
        self._entries: dict[views.Key, _Entry] = {}
        self.project = project

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, before: bodies.SubscriptionBody, after: bodies.SubscriptionBody) -> None:
        """`before` (as read) was replaced by our write, which returned `after`."""
        old, new = version_of(before), version_of(after)
        if not old or not new or old == new:
            return
        key = refs.key_of(after)
        entry = self._entries.get(key)
        superseded = {old}
        if entry is not None and version_of(entry.obj) == old:
            superseded |= entry.superseded  # a chain of our own writes (finalizer, status)
        self._entries[key] = _Entry(self.project(after), superseded)

    def latest(self, cached: bodies.SubscriptionBody | None) -> bodies.SubscriptionBody | None:
        """The freshest version known of the cached object (None stays None: it is gone)."""
        if cached is None:
            return None
        entry = self._entries.get(refs.key_of(cached))
        if entry is None:
            return cached
        if version_of(cached) in entry.superseded:
            return entry.obj
        return cached

    def seen(
        self, old: bodies.SubscriptionBody | None, new: bodies.SubscriptionBody | None
    ) -> None:
        """A watch event: forget the entry once the cache shows a version we did not replace."""
        either = new if new is not None else old
        if either is None:
            return
        key = refs.key_of(either)
        entry = self._entries.get(key)
        if entry is not None and (new is None or version_of(new) not in entry.superseded):
            del self._entries[key]

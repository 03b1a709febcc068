"""One keyed work queue for every reconciler, in the shape of client-go's.

- a key queued twice is queued once (dedupe);
- a key is never handed to two workers at once: adding it while it is being processed
  marks it dirty, and it is queued again when the worker calls `done`;
- failures back off per key exponentially (`add_rate_limited`), success `forget`s them;
- `add_after` schedules a key (requeue after / periodic resync).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class ShutDownError(Exception):
    """The queue was shut down; workers should exit."""


class WorkQueue(Generic[K]):
    """Dedupe, no concurrent processing of one key, per-key exponential backoff."""

    def __init__(self, base_delay: float = 0.5, max_delay: float = 300.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._queue: collections.deque[K] = collections.deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._cond = asyncio.Condition()
        self._shutdown = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: K) -> None:
        """Queue `key` unless it is already waiting; defer it if it is being processed."""
        if self._shutdown:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.append(key)
        asyncio.get_running_loop().create_task(self._notify())

    def pending(self, key: K) -> bool:
        """Whether `key` is waiting or being processed (it will be reconciled soon)."""
        return key in self._queued or key in self._processing

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` after `delay` seconds; an earlier pending timer for it wins."""
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        existing = self._timers.get(key)
        due = loop.time() + delay
        if existing is not None and existing.when() <= due:
            return
        if existing is not None:
            existing.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            self.add(key)

        self._timers[key] = loop.call_at(due, fire)

    def backoff(self, key: K) -> float:
        """The delay the next failure of `key` will wait."""
        failures = self._failures.get(key, 0)
        return float(min(self.base_delay * (2**failures), self.max_delay))

    def add_rate_limited(self, key: K) -> float:
        """Requeue after a failure with exponential backoff; returns the delay."""
        delay = self.backoff(key)
        self._failures[key] = self._failures.get(key, 0) + 1
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Success: the next failure starts from the base delay again."""
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    async def get(self) -> K:
        """Wait for a key and mark it as being processed."""
        async with self._cond:
            while not self._queue:
                if self._shutdown:
                    raise ShutDownError
                await self._cond.wait()
            if self._shutdown:
                raise ShutDownError
            key = self._queue.popleft()
            self._queued.discard(key)
            self._processing.add(key)
            return key

    def done(self, key: K) -> None:
        """The worker finished `key`; requeue it if it was added meanwhile."""
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    async def shutdown(self) -> None:
        """Wake every waiting worker with `ShutDownError` and drop timers."""
        self._shutdown = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        async with self._cond:
            self._cond.notify_all()

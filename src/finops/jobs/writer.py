"""Ledger writes in order, in one worker thread, while the event loop fetches the next rows.

Why: an allocation run alternates between work in this process (reading and decoding
OpenCost's answers) and work in PostgreSQL's (parsing a `COPY`, merging an hour). Run one
after the other, each waits for the other; queued here, PostgreSQL merges hour N while the
run decodes hour N+1. What waits in the queue is bounded (`limit` bytes of `COPY` text), so
a slow ledger holds the run back instead of letting batches pile up in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Iterator

Job = Callable[[], None]
# While the event loop decodes (pure Python, holding the GIL) the writer thread needs the GIL
# back after every socket wait of a `COPY`; at Python's default 5 ms switch interval a batch
# then waits longer for the GIL than for PostgreSQL.
SWITCH_INTERVAL = 0.0005


@contextlib.contextmanager
def responsive_threads() -> Iterator[None]:
    """A short GIL switch interval for the block (the previous one is restored)."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, SWITCH_INTERVAL))
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


class Writer:
    """Runs submitted calls one at a time, in submission order, off the event loop."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._waiting = 0  # bytes queued or running
        self._queue: asyncio.Queue[tuple[Job, int] | None] = asyncio.Queue()
        self._freed = asyncio.Event()
        self._task = asyncio.create_task(self._work())

    async def _work(self) -> None:
        while (item := await self._queue.get()) is not None:
            job, size = item
            await asyncio.to_thread(job)
            self._waiting -= size
            self._freed.set()

    async def submit(self, job: Job, size: int = 0) -> None:
        """Queue `job` holding `size` bytes; waits while the queue is full (unless it is
        empty: one job larger than `limit` still runs); raises a failed job's error."""
        while self._waiting and self._waiting + size > self._limit:
            self._freed.clear()
            freed = asyncio.ensure_future(self._freed.wait())
            await asyncio.wait({freed, self._task}, return_when=asyncio.FIRST_COMPLETED)
            freed.cancel()
            self._raise_if_stopped()
        self._raise_if_stopped()
        self._waiting += size
        self._queue.put_nowait((job, size))

    def _raise_if_stopped(self) -> None:
        if self._task.done():
            self._task.result()  # a job failed: its error, here
            raise RuntimeError("the ledger writer has stopped")

    async def close(self) -> None:
        """Wait until every queued job ran; raises a failed job's error."""
        self._raise_if_stopped()
        self._queue.put_nowait(None)
        await self._task

    async def abort(self) -> None:
        """Stop taking jobs; the one running (if any) finishes in its thread."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task

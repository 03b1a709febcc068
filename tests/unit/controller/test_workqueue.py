"""The work queue dedupes, never hands one key to two workers, and backs off per key."""

from __future__ import annotations

import asyncio

import pytest

from finops.controller import workqueue


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_key_added_twice_is_processed_once() -> None:
    async def scenario() -> list[str]:
        q: workqueue.WorkQueue[str] = workqueue.WorkQueue()
        q.add("a")
        q.add("a")
        q.add("b")
        got = [await q.get(), await q.get()]
        assert len(q) == 0
        return got

    assert run(scenario()) == ["a", "b"]


def test_a_key_added_while_processing_waits_until_done() -> None:
    async def scenario() -> None:
        q: workqueue.WorkQueue[str] = workqueue.WorkQueue()
        q.add("a")
        key = await q.get()
        q.add("a")
        assert len(q) == 0  # not handed out again while a worker holds it
        q.done(key)
        assert len(q) == 1
        assert await q.get() == "a"

    run(scenario())


def test_failures_back_off_exponentially_and_success_resets() -> None:
    async def scenario() -> None:
        q: workqueue.WorkQueue[str] = workqueue.WorkQueue(base_delay=0.01, max_delay=0.04)
        delays = [q.add_rate_limited("a") for _ in range(4)]
        assert delays == [0.01, 0.02, 0.04, 0.04]
        assert q.failures("a") == 4
        q.forget("a")
        assert q.backoff("a") == 0.01
        assert await asyncio.wait_for(q.get(), timeout=1) == "a"

    run(scenario())


def test_add_after_delivers_later_and_the_earlier_timer_wins() -> None:
    async def scenario() -> None:
        q: workqueue.WorkQueue[str] = workqueue.WorkQueue()
        q.add_after("a", 0.05)
        q.add_after("a", 10)
        assert len(q) == 0
        assert await asyncio.wait_for(q.get(), timeout=1) == "a"

    run(scenario())


def test_shutdown_wakes_waiting_workers() -> None:
    async def scenario() -> None:
        q: workqueue.WorkQueue[str] = workqueue.WorkQueue()
        waiter = asyncio.create_task(q.get())
        await asyncio.sleep(0)
        await q.shutdown()
        with pytest.raises(workqueue.ShutDownError):
            await asyncio.wait_for(waiter, timeout=1)

    run(scenario())


def test_a_key_is_pending_while_waiting_or_processing() -> None:
    async def scenario() -> None:
        q: workqueue.WorkQueue[str] = workqueue.WorkQueue()
        assert not q.pending("a")
        q.add("a")
        assert q.pending("a")
        key = await q.get()
        assert q.pending("a")
        q.done(key)
        assert not q.pending("a")

    run(scenario())

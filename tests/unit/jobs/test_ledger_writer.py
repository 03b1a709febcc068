"""The allocation run's ledger writer: jobs run in order, a failure stops the run, and what
waits is bounded."""

from __future__ import annotations

import asyncio
import threading

import pytest

from finops.jobs import writer


def test_jobs_run_in_submission_order_off_the_event_loop() -> None:
    done: list[tuple[int, bool]] = []
    loop_thread = threading.get_ident()

    async def go() -> None:
        w = writer.Writer(limit=10)
        for i in range(20):
            await w.submit(lambda i=i: done.append((i, threading.get_ident() != loop_thread)), 3)
        await w.close()

    asyncio.run(go())
    assert done == [(i, True) for i in range(20)]


def test_a_failed_job_raises_at_the_next_submit_or_close_and_later_jobs_never_run() -> None:
    ran: list[int] = []

    def boom() -> None:
        raise ValueError("ledger down")

    async def go() -> None:
        w = writer.Writer(limit=1)
        await w.submit(boom, 1)
        for i in range(5):  # the full queue waits for `boom`, then raises its error
            await w.submit(lambda i=i: ran.append(i), 1)
        await w.close()

    with pytest.raises(ValueError, match="ledger down"):
        asyncio.run(go())
    assert ran == []


def test_no_more_than_the_limit_waits_unless_one_job_is_larger() -> None:
    release = threading.Event()
    peak = 0

    async def go() -> None:
        nonlocal peak
        w = writer.Writer(limit=10)
        await w.submit(release.wait, 50)  # larger than the limit: accepted into an empty queue
        submitted = asyncio.ensure_future(w.submit(lambda: None, 1))
        await asyncio.sleep(0.05)
        assert not submitted.done()  # waits: 50 bytes are still in the writer
        peak = w._waiting
        release.set()
        await submitted
        await w.close()

    asyncio.run(go())
    assert peak == 50


def test_abort_stops_taking_jobs() -> None:
    ran: list[int] = []

    async def go() -> None:
        w = writer.Writer(limit=100)
        await w.submit(lambda: ran.append(1), 1)
        await w.abort()

    asyncio.run(go())
    assert ran in ([], [1])


def test_the_short_switch_interval_lasts_only_for_the_block() -> None:
    import sys

    before = sys.getswitchinterval()
    with writer.responsive_threads():
        assert sys.getswitchinterval() <= writer.SWITCH_INTERVAL
    assert sys.getswitchinterval() == before

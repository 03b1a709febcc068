"""Lease timing without a cluster: each round's outcome is scripted, the clock is fake.

What is pinned down: work pauses once renewals have failed past the renew deadline and
resumes on the next renewal (no restart); another holder ends the loop; `holds()` is true
only within the renew deadline of the last won round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from finops.kube import leader

Step = Callable[["Scripted"], bool]


class Scripted(leader.LeaderElector):
    """Rounds answer from a script (True won, False lost, an exception failed)."""

    def __init__(self, script: list[Step], clock: list[float]) -> None:
        super().__init__(
            client=None,
            namespace="ns",
            identity="me",
            renew_deadline=10.0,
            retry_period=0.001,
            monotonic=lambda: clock[0],
        )
        self.script = script
        self.rounds = 0

    async def _contend(self) -> bool:
        self.rounds += 1
        if not self.script:
            raise AssertionError("script exhausted")
        return self.script.pop(0)(self)


def at(clock: list[float], when: float, outcome: Any) -> Step:
    def step(elector: Scripted) -> bool:
        clock[0] = when
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome == "other":
            elector._observed_record = ("someone-else", "t", 15, 1)
            return False
        return bool(outcome)

    return step


def test_holds_only_within_the_renew_deadline_of_the_last_won_round() -> None:
    clock = [0.0]
    elector = Scripted([at(clock, 0.0, True), at(clock, 12.0, False)], clock)
    assert not elector.holds()
    assert asyncio.run(elector.try_acquire_or_renew())
    clock[0] = 9.9
    assert elector.holds()
    clock[0] = 10.0
    assert not elector.holds()
    assert not asyncio.run(elector.try_acquire_or_renew())
    assert not elector.holds()


def test_failed_renewals_pause_work_past_the_deadline_and_a_renewal_resumes_it() -> None:
    clock = [0.0]
    down = ConnectionError("api server unreachable")
    events: list[str] = []
    stop = asyncio.Event()
    script = [
        at(clock, 2.0, down),
        at(clock, 8.0, down),  # within the deadline: still working
        at(clock, 11.0, down),  # past it: pause
        at(clock, 40.0, down),  # still paused, not paused twice
        at(clock, 42.0, True),  # renewed: resume
        at(clock, 44.0, True),
        lambda e: bool(stop.set()),  # then stop
    ]
    elector = Scripted(script, clock)
    elector.is_leader = True

    async def go() -> None:
        await elector.keep_renewing(
            stop, lambda: events.append(f"pause@{clock[0]:g}"), lambda: events.append("resume")
        )

    asyncio.run(go())
    assert events == ["pause@11", "resume"]
    assert elector.is_leader and elector.rounds == 7


def test_another_holder_ends_the_loop_at_once() -> None:
    clock = [0.0]
    elector = Scripted([at(clock, 2.0, True), at(clock, 4.0, "other")], clock)
    with pytest.raises(leader.LostLeadershipError, match="someone-else"):
        asyncio.run(elector.keep_renewing(asyncio.Event()))
    assert not elector.is_leader

"""Case 1: SIGKILL the allocation job and the charge job mid-run, then run them again.

Two universes follow one script hour by hour: the reference runs every job once, never
interrupted; the faulted one starts each job as a process and kills it (SIGKILL) at a point
picked by a fixed seed, then runs it again. Kill points: a seeded delay spread over the run's
measured duration, a seeded delay inside the phase that matters (the OpenCost fetch; the
status writes and finalizer releases), and a deterministic point where the run's write waits
on a lock the test holds (the allocation merge after its COPY; the charge transaction after
the version mirror committed), seen in `pg_stat_activity` before the kill.

Invariants, checked after every kill and after every next run:
- right after a kill: every hour of `provider_allocations` is as before the run or as after
  the uninterrupted run (no partial hour); `subscription_charges` is wholly the one or the
  other (no partial run); no Subscription is gone that the reference still holds (no
  finalizer released early);
- after the next run: it exits 0, and the canonical ledger dump (see `_harness.ledger_dump`)
  equals the reference's row for row, the same Subscriptions exist with the same
  `status.costs`, and every `status.costs` agrees with the ledger rows.
"""

from __future__ import annotations

import collections
import datetime as dt
import random
import time
from collections.abc import Callable

from tests.faults import _harness as h

SEED = 16_001
MIN_KILLS = 20
MAX_HOURS = 40  # a kill that comes after the run ended does not count: room to retry
WALL_SECONDS = 360.0
SUBSCRIPTIONS = 24

KINDS = {h.ALLOCATIONS: ("spread", "phase", "lock"), h.CHARGES: ("spread", "phase", "lock")}
PHASE_ANCHOR = {h.ALLOCATIONS: ("collecting", "wrote"), h.CHARGES: ("ledger:", "run ")}
LOCKED = {
    h.ALLOCATIONS: ("provider_allocations", ("INSERT INTO provider_allocations",)),
    h.CHARGES: ("subscription_charges", h.CHARGE_WRITES),
}
LOCK_LABEL = {
    h.ALLOCATIONS: "merge waiting after its COPY",
    h.CHARGES: "charge transaction waiting (versions committed)",
}


def phase_of(mode: str, last: str) -> str:
    """Where a run was when killed, from its last log line."""
    if mode == h.ALLOCATIONS:
        steps = [("run ", "recording"), ("wrote", "finalizing/recording"), ("hour ", "fetch")]
        steps.append(("collecting", "fetch"))
    else:
        steps = [("run ", "recording"), ("subscription ", "recording"), ("ledger:", "status")]
        steps.append(("charging", "ledger pass"))
    return next((label for prefix, label in steps if last.startswith(prefix)), "start-up")


class Killer:
    """Starts a faulted run as a process and kills it at a point of the given kind."""

    def __init__(self, faulted: h.Universe, rng: random.Random) -> None:
        self.faulted = faulted
        self.rng = rng
        self.startup: dict[str, float] = {}

    def attempt(self, mode: str, hour: dt.datetime, kind: str, ref: h.Timeline) -> str | None:
        """The phase the run was killed in, or None when it finished before the kill."""
        if kind == "lock":
            table, statements = LOCKED[mode]
            with h.table_locked(self.faulted.dsn, table):
                proc = self.faulted.spawn(mode, hour)
                h.wait_until(
                    f"{mode} waiting on {table}",
                    lambda: (
                        h.waiting_on_lock(self.faulted.dsn, self.faulted.app, *statements) > 0
                        or proc.proc.poll() is not None
                    ),
                )
                killed = proc.kill()
            assert killed, f"{mode} finished although its write was blocked:\n{proc.output()}"
            return LOCK_LABEL[mode]
        proc = self.faulted.spawn(mode, hour)
        if kind == "phase":
            first, then = PHASE_ANCHOR[mode]
            start, end = h.offset_of(ref, first), h.offset_of(ref, then)
            assert start is not None and end is not None, ref
            if not proc.wait_message(first):
                proc.wait()
                return None
            time.sleep(self.rng.uniform(0, end - start))
        else:
            startup = self.startup.get(mode, 1.0)
            work = ref[-1][0] if ref else 0.5
            time.sleep(self.rng.uniform(0.5 * startup, startup + 0.7 * work))
        last = proc.last_message()
        if not proc.kill():
            return None
        return phase_of(mode, last)


def check_after_kill(mode: str, before: h.Snapshot, after: h.Snapshot, now: h.Snapshot) -> None:
    """What a killed run may leave: nothing partial and nothing released early."""
    hours_now = h.allocations_by_hour(now.ledger)
    hours_before = h.allocations_by_hour(before.ledger)
    hours_after = h.allocations_by_hour(after.ledger)
    for hour in set(hours_now) | set(hours_after):
        rows = hours_now.get(hour, [])
        assert rows in (hours_before.get(hour, []), hours_after.get(hour, [])), (
            f"{mode}: hour {hour} of provider_allocations is partial"
        )
    charges = now.ledger["subscription_charges"]
    assert charges in (before.ledger["subscription_charges"], after.ledger["subscription_charges"])
    for table in ("pricebooks", "offering_versions", "subscription_versions"):
        assert set(before.ledger[table]) <= set(now.ledger[table]) <= set(after.ledger[table])
    early = after.present - now.present
    assert not early, f"finalizer released early: {sorted(early)}"


def check_recovered(mode: str, ref: h.Snapshot, now: h.Snapshot, hour: dt.datetime) -> None:
    assert now.ledger == ref.ledger, f"{mode} {hour}: ledger differs from the uninterrupted run"
    assert now.present == ref.present
    if mode == h.CHARGES:
        assert now.costs == ref.costs
        assert h.costs_disagreements(now, hour) == []


def test_sigkill_at_seeded_points_leaves_the_ledger_of_an_uninterrupted_run(
    universes: Callable[[], h.Universe],
) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    plans = h.script(SUBSCRIPTIONS, 8, deactivate_every=4, last_hour=14)
    reference, faulted = universes(), universes()
    for uni in (reference, faulted):
        uni.populate(plans)
    killer = Killer(faulted, rng)
    kills: dict[str, collections.Counter[str]] = {m: collections.Counter() for m in KINDS}
    figures: dict[str, int] = collections.Counter()
    queues: dict[str, list[str]] = {m: [] for m in KINDS}
    hours = 0
    before = faulted.snapshot()
    while min(sum(c.values()) for c in kills.values()) < MIN_KILLS:
        assert hours < MAX_HOURS and time.monotonic() - started < WALL_SECONDS, (kills, hours)
        hour = h.DAY0 + h.HOUR * hours
        for uni in (reference, faulted):
            uni.churn(plans, hour)
        for mode in (h.ALLOCATIONS, h.CHARGES):
            seen = reference_run(reference, killer, mode, hour, first=hours == 0)
            ref = reference.snapshot()
            if mode == h.CHARGES:
                assert h.costs_disagreements(ref, hour) == []
            if not queues[mode]:
                queues[mode] = rng.sample(KINDS[mode], len(KINDS[mode]))
            kind = queues[mode].pop()
            phase = killer.attempt(mode, hour, kind, seen)
            if phase is None:
                figures[f"{mode}_finished_before_kill"] += 1
            else:
                kills[mode][phase] += 1
                check_after_kill(mode, before, ref, faulted.snapshot())
            code, _ = faulted.run(mode, hour)
            assert code == 0, f"{mode} run after the kill failed"
            now = faulted.snapshot()
            check_recovered(mode, ref, now, hour)
            figures["rows_compared"] += h.rows_in(now.ledger)
            figures["next_runs_completed"] += 1
            before = now
        hours += 1
    h.write_figures(
        "case1-sigkill",
        {
            "seed": SEED,
            "subscriptions": SUBSCRIPTIONS,
            "simulated_hours": hours,
            "kills": {m: dict(c) for m, c in kills.items()},
            "kills_total": {m: sum(c.values()) for m, c in kills.items()},
            "finalizers_released": len(plans) - len(before.present),
            **figures,
            "seconds": round(time.monotonic() - started, 1),
        },
    )


def reference_run(
    reference: h.Universe, killer: Killer, mode: str, hour: dt.datetime, *, first: bool
) -> h.Timeline:
    """The uninterrupted run of this hour; the first hour runs as a process to measure start-up."""
    if first:
        proc = reference.spawn(mode, hour)
        assert proc.wait() == 0, proc.output()
        assert proc.seen, "the job logged nothing"
        killer.startup[mode] = proc.seen[0][0]
        return [(t - proc.seen[0][0], m) for t, m in proc.seen]
    code, seen = reference.run(mode, hour)
    assert code == 0, f"uninterrupted {mode} run of {hour} failed: {seen}"
    return seen

"""Case 2: two runs of the same hour at once.

Each simulated hour, the racing universe starts two allocation processes together, then two
charge processes together, alternating between two processes of the same CostJob and two
CostJobs over the same namespaces (an unsharded and a sharded allocation CostJob; two charge
CostJobs over one namespace). Every other hour the test holds a lock the writes need until
both runs wait on it, so they meet inside the ledger write rather than one after the other.

Invariants: the ledger equals that of one uninterrupted run per hour (no duplicate, no lost
row), the same Subscriptions exist with `status.costs` agreeing with the ledger, and each
run either succeeded or left a `Failed` execution record on its CostJob that says why.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Any

from tests.faults import _harness as h

HOURS = 6
SUBSCRIPTIONS = 24
COSTJOBS = {
    "allocations": "ResourceCostCollection",
    "allocations-sharded": "ResourceCostCollection",
    "charges": "SubscriptionChargeCollection",
    "charges-b": "SubscriptionChargeCollection",
}
PAIRS = {
    (h.ALLOCATIONS, "same"): ("allocations", "allocations"),
    (h.ALLOCATIONS, "two"): ("allocations", "allocations-sharded"),
    (h.CHARGES, "same"): ("charges", "charges"),
    (h.CHARGES, "two"): ("charges", "charges-b"),
}
LOCKED = {h.ALLOCATIONS: "provider_allocations", h.CHARGES: "subscription_charges"}


def race(uni: h.Universe, mode: str, hour: Any, jobs: tuple[str, str], meet: bool) -> list[int]:
    """Start both runs together; with `meet`, release them only once both wait on a lock
    (the second may queue behind the first one's uncommitted rows rather than the table's)."""
    if not meet:
        procs = [uni.spawn(mode, hour, job) for job in jobs]
        return [p.wait() for p in procs]
    table = LOCKED[mode]
    with h.table_locked(uni.dsn, table):
        procs = [uni.spawn(mode, hour, job) for job in jobs]
        h.wait_until(
            f"both {mode} runs waiting on {table}",
            lambda: (
                h.waiting_on_lock(uni.dsn, uni.app, "") >= 2
                or any(p.proc.poll() is not None for p in procs)
            ),
        )
    return [p.wait() for p in procs]


def test_two_runs_of_one_hour_at_once_leave_one_runs_ledger_and_clear_records(
    universes: Callable[[], h.Universe],
) -> None:
    started = time.monotonic()
    plans = h.script(SUBSCRIPTIONS, 8, deactivate_every=4, last_hour=HOURS)
    reference, racing = universes(), universes()
    reference.populate(plans)
    racing.populate(plans, costjobs=COSTJOBS)
    outcomes: collections.Counter[str] = collections.Counter()
    rows_compared = 0
    runs = 0
    for n in range(HOURS):
        hour = h.DAY0 + h.HOUR * n
        for uni in (reference, racing):
            uni.churn(plans, hour)
        for mode in (h.ALLOCATIONS, h.CHARGES):
            code, seen = reference.run(mode, hour)
            assert code == 0, seen
            ref = reference.snapshot()
            variant = "same" if n % 2 == 0 else "two"
            jobs = PAIRS[(mode, variant)]
            history = {job: len(racing.costjob_history(job)) for job in set(jobs)}
            codes = race(racing, mode, hour, jobs, meet=n % 4 < 2)
            runs += 2
            now = racing.snapshot()
            assert now.ledger == ref.ledger, f"{mode} {hour}: duplicate or lost rows"
            assert now.present == ref.present
            if mode == h.CHARGES:
                assert h.costs_disagreements(now, hour) == []
                assert now.costs == ref.costs
            rows_compared += h.rows_in(now.ledger)
            check_records(racing, mode, jobs, history, codes, outcomes)
    h.write_figures(
        "case2-concurrent",
        {
            "simulated_hours": HOURS,
            "subscriptions": SUBSCRIPTIONS,
            "runs_raced": runs,
            "outcomes": dict(outcomes),
            "rows_compared": rows_compared,
            "seconds": round(time.monotonic() - started, 1),
        },
    )


def check_records(
    uni: h.Universe,
    mode: str,
    jobs: tuple[str, str],
    before: dict[str, int],
    codes: list[int],
    outcomes: collections.Counter[str],
) -> None:
    """One execution record per run on its CostJob; a failed run's record says why."""
    records: list[dict[str, Any]] = []
    for job in set(jobs):
        history = uni.costjob_history(job)
        added = len(history) - before[job]
        assert added == jobs.count(job), f"{job}: {added} record(s) for {jobs.count(job)} run(s)"
        records += history[:added]
    assert sorted(r["status"] for r in records) == sorted(
        "Success" if c == 0 else "Failed" for c in codes
    ), (codes, records)
    for record in records:
        if record["status"] != "Success":
            assert record.get("error"), record
            # Losing the race to a run that already finished a Subscription is no failure.
            assert "NotFound" not in record["error"], record
            outcomes[f"{mode} failed: {record['error'][:120]}"] += 1
        else:
            outcomes[f"{mode} succeeded"] += 1

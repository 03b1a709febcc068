"""Case 2: two runs of the same hour at once.

Each simulated hour, the racing universe starts two allocation processes together, then two
charge processes together, alternating between two processes of the same CostJob and two
CostJobs over the same namespaces (an unsharded and a sharded allocation CostJob; two charge
CostJobs over one namespace). In 4 of 6 hours the test holds a lock the writes need until
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

import psycopg
from tests.faults import _harness as h

from finops.store import migrate

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


def race(
    uni: h.Universe, mode: str, hour: Any, jobs: tuple[str, str], meet: bool
) -> list[h.JobProcess]:
    """Start both runs together and wait for both; with `meet`, release them only once both
    wait on a lock (the second may queue behind the first one's uncommitted rows rather than
    the table's)."""
    if not meet:
        procs = [uni.spawn(mode, hour, job) for job in jobs]
        for p in procs:
            p.wait()
        return procs
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
    for p in procs:
        p.wait()
    return procs


def logs(procs: list[h.JobProcess]) -> str:
    """Both racing runs' logs, for a failure message."""
    return "\n".join(
        f"--- run {i} (exit {p.proc.returncode}):\n{p.output()}" for i, p in enumerate(procs)
    )


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
            procs = race(racing, mode, hour, jobs, meet=n % 4 < 2)
            runs += 2
            now = racing.snapshot()
            seen = logs(procs)
            assert now.ledger == ref.ledger, f"{mode} {hour}: duplicate or lost rows\n{seen}"
            assert now.present == ref.present, seen
            if mode == h.CHARGES:
                assert h.costs_disagreements(now, hour) == [], seen
                assert now.costs == ref.costs, seen
            rows_compared += h.rows_in(now.ledger)
            codes = [p.proc.returncode for p in procs]
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


def test_a_run_that_finds_its_subscriptions_released_meanwhile_still_succeeds(
    universes: Callable[[], h.Universe],
) -> None:
    """The race of case 2 made deterministic: the run lists the deleted Subscriptions, then
    waits (the test holds the migrations' advisory lock its ledger pass takes first) while
    their finalizers go, as a concurrent run would release them; it must still succeed."""
    plans = h.script(4, 8, deactivate_every=2, last_hour=3)
    uni = universes()
    uni.populate(plans)
    for n in range(3):
        uni.churn(plans, h.DAY0 + h.HOUR * n)
        for mode in (h.ALLOCATIONS, h.CHARGES):
            if n < 2:
                assert uni.run(mode, h.DAY0 + h.HOUR * n)[0] == 0
    deleting = sorted(
        n for n, o in uni.subscriptions().items() if o["metadata"].get("deletionTimestamp")
    )
    assert deleting == ["sub-001", "sub-003"]
    assert uni.run(h.ALLOCATIONS, h.DAY0 + 2 * h.HOUR)[0] == 0
    with psycopg.connect(uni.dsn, autocommit=True) as lock:
        lock.execute("SELECT pg_advisory_lock(%s)", (migrate.LOCK_KEY,))
        proc = uni.spawn(h.CHARGES, h.DAY0 + 2 * h.HOUR)
        h.wait_until(
            "the charge run waiting for the ledger",
            lambda: (
                h.asking_for_migration_lock(uni.dsn, uni.app) > 0 or proc.proc.poll() is not None
            ),
        )
        assert proc.proc.poll() is None, proc.output()
        with uni.kube.http() as client:
            for name in deleting:
                resp = client.patch(
                    f"{h.GROUP}/namespaces/{uni.namespace}/subscriptions/{name}",
                    json={"metadata": {"finalizers": None}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
                assert resp.status_code == 200, resp.text
        assert not set(deleting) & set(uni.subscriptions())
    assert proc.wait() == 0, proc.output()
    assert uni.costjob_history("charges")[0]["status"] == "Success"

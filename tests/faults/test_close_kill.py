"""SIGKILL the charge job while it closes a billing period, and while it books corrections.

Two universes follow the same script across the end of November: Subscriptions activated on
its last evening, both jobs run hour by hour, the charge runs wait two hours of grace. The
reference runs every job once, never interrupted. In the faulted universe, the charge run
that closes November is killed at the moment its close waits on a lock the test holds on
`billing_periods` (seen in `pg_stat_activity`), and, after late allocation rows for a closed
hour arrive, the run that books their corrections is killed the same way on
`charge_corrections`; a third kill lands at a seeded delay inside a run.

After each kill nothing of the interrupted step is left (no period closed, no correction
booked), the next run of the same hour exits 0 and leaves the ledger equal to the
reference's row for row, and November's statement (JSON, CSV and HTML) is the same text in
both universes and after every later run, kill, replay and late data.
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable

import psycopg
from tests.faults import _harness as h

from finops.api import environment
from finops.billing import statement_html, statements
from finops.store import statements as store_statements

SEED = 24_001
CLOSE = dt.datetime(2026, 12, 1, tzinfo=h.UTC)
GRACE = {environment.Env.FINOPS_PERIOD_GRACE_HOURS: "2"}
HOURS = [CLOSE + k * h.HOUR for k in range(-4, 5)]


def plans() -> list[h.SubPlan]:
    """Every Offering, activated on November's last evening; one deactivated that night."""
    out = []
    for i, offering in enumerate(h.OFFERINGS):
        sources: tuple[tuple[tuple[str, str], ...], ...] = ()
        if "resourcePricing" in h.OFFERINGS[offering]:
            sources = ((("namespace", f"ns-{i % 4:04d}"),),)
        gone = CLOSE - 2 * h.HOUR + 13 * h.MINUTE if i == 1 else None
        activated = CLOSE - 4 * h.HOUR + (7 * i) * h.MINUTE
        out.append(h.SubPlan(f"sub-{i:03d}", offering, sources, activated, gone))
    return out


def run(uni: h.Universe, mode: str, hour: dt.datetime) -> None:
    """One uninterrupted run of `mode` for `hour` (in-process), with the test's grace."""
    env = uni.job_env(mode, hour) | GRACE
    code, _ = uni.run_env(mode, env)
    assert code == 0, f"{mode} run of {hour} failed"


def november(uni: h.Universe) -> tuple[str, str, str]:
    """November's statement of the universe's namespace, with what two universes cannot
    share (namespace, Subscription UIDs, the invoice id made of the namespace) neutral."""
    with psycopg.connect(uni.dsn) as conn:
        s = store_statements.statement(
            conn, cluster=h.CLUSTER, namespace=uni.namespace, label="2026-11"
        )
    texts = [statements.json_text(s), statements.csv_text(s), statement_html.page(s)]
    names = {line.subscription_uid: f"<uid of {line.subscription}>" for line in s.lines}
    names |= {s.invoice_id: "<invoice>", uni.namespace: "<ns>"}
    for key, neutral in names.items():
        texts = [t.replace(key, neutral) for t in texts]
    return texts[0], texts[1], texts[2]


def killed_on_lock(uni: h.Universe, hour: dt.datetime, table: str, statement: str) -> None:
    """Start the charge run as a process, hold `table` so `statement` waits, kill it there."""
    with h.table_locked(uni.dsn, table):
        proc = h.JobProcess(h.CHARGES, uni.job_env(h.CHARGES, hour) | GRACE)
        h.wait_until(
            f"the charge run waiting on {table}",
            lambda: (
                h.waiting_on_lock(uni.dsn, uni.app, statement) > 0 or proc.proc.poll() is not None
            ),
        )
        assert proc.kill(), f"the charge run finished although {table} was locked:\n{proc.output()}"


def closed(uni: h.Universe) -> int:
    with psycopg.connect(uni.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM billing_periods").fetchone()
    return 0 if row is None else int(row[0])


def test_a_kill_during_close_or_corrections_leaves_nothing_half_done(
    universes: Callable[[], h.Universe],
) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    script = plans()
    reference, faulted = universes(), universes()
    for uni in (reference, faulted):
        uni.populate(script)
    for hour in HOURS[:6]:  # through CLOSE + 1h: November waits for its grace
        for uni in (reference, faulted):
            uni.churn(script, hour)
            run(uni, h.ALLOCATIONS, hour)
            run(uni, h.CHARGES, hour)
    assert closed(reference) == closed(faulted) == 0
    closing = HOURS[6]
    for uni in (reference, faulted):
        run(uni, h.ALLOCATIONS, closing)
    run(reference, h.CHARGES, closing)
    assert closed(reference) == 1
    statement = november(reference)

    killed_on_lock(faulted, closing, "billing_periods", "INSERT INTO billing_periods")
    assert closed(faulted) == 0, "a killed close left a closed period behind"
    run(faulted, h.CHARGES, closing)
    assert faulted.snapshot().ledger == reference.snapshot().ledger
    assert november(faulted) == statement

    late = HOURS[7]
    for uni in (reference, faulted):
        late_allocation(uni, CLOSE - 2 * h.HOUR)
        run(uni, h.ALLOCATIONS, late)
    run(reference, h.CHARGES, late)
    assert corrections(reference) > 0
    killed_on_lock(faulted, late, "charge_corrections", "INSERT INTO charge_corrections")
    assert corrections(faulted) == 0, "a killed run left some of its corrections behind"
    run(faulted, h.CHARGES, late)
    assert faulted.snapshot().ledger == reference.snapshot().ledger

    last = HOURS[8]
    for uni in (reference, faulted):
        run(uni, h.ALLOCATIONS, last)
    run(reference, h.CHARGES, last)
    proc = h.JobProcess(h.CHARGES, faulted.job_env(h.CHARGES, last) | GRACE)
    time.sleep(rng.uniform(0.5, 3.0))
    proc.kill()
    run(faulted, h.CHARGES, last)
    run(faulted, h.CHARGES, last)  # a replay of the same hour changes nothing
    assert faulted.snapshot().ledger == reference.snapshot().ledger
    for uni in (reference, faulted):
        assert november(uni) == statement
    h.write_figures(
        "case-close-kill",
        {"seed": SEED, "seconds": round(time.monotonic() - started, 1), "kills": 3},
    )


def late_allocation(uni: h.Universe, hour: dt.datetime) -> None:
    """A row that arrives for a closed hour long after it was settled (a backfill)."""
    with psycopg.connect(uni.dsn) as conn:
        conn.execute(
            """
            INSERT INTO provider_allocations (cluster, hour, namespace, name, aggregation,
                start_time, end_time, cpu_core_usage_average, ram_byte_usage_average,
                pricebook_id, currency, is_finalized)
            SELECT cluster, hour, namespace, name || '-late', aggregation, start_time, end_time,
                   cpu_core_usage_average * 3, ram_byte_usage_average, pricebook_id, currency,
                   true
            FROM provider_allocations WHERE hour = %s
            """,
            (hour,),
        )


def corrections(uni: h.Universe) -> int:
    with psycopg.connect(uni.dsn) as conn:
        row = conn.execute("SELECT count(*) FROM charge_corrections").fetchone()
    return 0 if row is None else int(row[0])

"""Billing periods end to end: real API server, real PostgreSQL, the generated OpenCost, both
jobs run hour by hour across the end of November until November closes.

Two universes follow the same script; in one ("late") allocation rows for a November hour
arrive only after November closed, in the other ("timely") the same rows are there before
that hour is charged. Then, for November:
- export = statement = ledger = `status.costs`: the FOCUS export of the period, the
  statement's totals and lines, the ledger's rows and each Subscription's month bucket as the
  period's last charge run wrote it (the fee's `projected` plus the meters' `current`) agree
  to the micro, per Subscription and currency;
- the statement of the late universe is the same text before and after the late data, the
  runs that follow, a replayed hour and a killed run;
- the corrections it books in December sum to the difference: its November plus them equals
  the timely universe's November, per Subscription and currency.
"""

from __future__ import annotations

import csv
import datetime as dt
import pathlib
from collections import Counter
from collections.abc import Callable
from decimal import Decimal

import psycopg
from tests.faults import _harness as h
from tests.faults.conftest import book, opencost, universes  # noqa: F401 (fixtures)
from tests.faults.test_close_kill import GRACE, late_allocation, november, plans, run

from finops import cli
from finops.billing import statements
from finops.store import statements as store_statements

CLOSE = dt.datetime(2026, 12, 1, tzinfo=h.UTC)
LAST_NOVEMBER_RUN = CLOSE - h.HOUR
LATE_HOUR = CLOSE - 2 * h.HOUR


def statement_of(uni: h.Universe, label: str) -> statements.Statement:
    with psycopg.connect(uni.dsn) as conn:
        return store_statements.statement(
            conn, cluster=h.CLUSTER, namespace=uni.namespace, label=label, provisional=True
        )


def by_subscription(s: statements.Statement) -> Counter[tuple[str, str]]:
    """Charges plus corrections of a statement per (Subscription, currency)."""
    out: Counter[tuple[str, str]] = Counter()
    for line in s.lines:
        out[(line.subscription, line.currency)] += line.amount_micros
    for k in s.corrections:
        out[(k.subscription, k.currency)] += k.amount_micros
    return out


def exported(uni: h.Universe, out: pathlib.Path) -> Counter[tuple[str, str]]:
    """November's FOCUS export of the namespace, BilledCost per (Subscription, currency)."""
    argv = ["export", "focus", "--dsn", uni.dsn, "--cluster", h.CLUSTER, "--out", str(out)]
    argv += ["--from", "2026-11-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z"]
    assert cli.main([*argv, "--namespace", uni.namespace]) == 0
    sums: Counter[tuple[str, str]] = Counter()
    with out.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            micros = int(Decimal(r["BilledCost"]).scaleb(6))
            sums[(r["ResourceName"], r["BillingCurrency"])] += micros
    return sums


def ledger(uni: h.Universe) -> Counter[tuple[str, str]]:
    """November's charge rows per (Subscription, currency), straight from the table."""
    with psycopg.connect(uni.dsn) as conn:
        rows = conn.execute(
            """
            SELECT v.name, c.currency, sum(c.amount_micros) FROM subscription_charges c
            JOIN subscription_versions v ON v.id = c.subscription_version_id
            WHERE c.hour >= '2026-11-01' AND c.hour < %s GROUP BY 1, 2
            """,
            (CLOSE,),
        ).fetchall()
    return Counter({(str(n), str(c)): int(a) for n, c, a in rows if a})


def from_status(costs: dict[str, list[dict[str, object]]]) -> Counter[str]:
    """Each Subscription's November from its month bucket: the fee's projection (the whole
    month's fee, which the last hour's row completes) plus every meter's settled usage."""
    out: Counter[str] = Counter()
    for name, buckets in costs.items():
        month = next(b for b in buckets if b["granularity"] == "month")
        for part in month.get("breakdown") or []:  # type: ignore[union-attr]
            key = "projected" if part["name"] == h.FEE_SOURCE else "current"
            out[name] += int(part.get(key) or 0)
    return Counter({k: v for k, v in out.items() if v})


def drive(uni: h.Universe, script: list[h.SubPlan], hours: list[dt.datetime], late: bool) -> None:
    for hour in hours:
        uni.churn(script, hour)
        run(uni, h.ALLOCATIONS, hour)
        if not late and hour == LATE_HOUR:
            late_allocation(uni, LATE_HOUR)
        run(uni, h.CHARGES, hour)


def test_a_closed_month_agrees_everywhere_and_late_data_corrects_it(
    universes: Callable[[], h.Universe],  # noqa: F811
    tmp_path: pathlib.Path,
) -> None:
    script = plans()
    late, timely = universes(), universes()
    for uni in (late, timely):
        uni.populate(script)
        drive(uni, script, [CLOSE + k * h.HOUR for k in range(-4, 0)], uni is late)
    november_costs = {n: o["status"]["costs"] for n, o in late.subscriptions().items()}
    for uni in (late, timely):
        drive(uni, script, [CLOSE + k * h.HOUR for k in range(0, 3)], uni is late)
    closed = statement_of(late, "2026-11")
    assert closed.closed and not closed.corrections

    charged = ledger(late)
    assert by_subscription(closed) == charged
    assert exported(late, tmp_path / "late.csv") == charged
    totals = {t.currency: t.total_micros for t in closed.totals}
    assert totals == {c: sum(v for (_, cur), v in charged.items() if cur == c) for c in totals}
    status = from_status(november_costs)
    assert status and all(status[n] == charged[(n, c)] for (n, c) in charged if n in status)

    text = november(late)
    late_allocation(late, LATE_HOUR)
    drive(late, script, [CLOSE + 3 * h.HOUR], late=True)
    run(late, h.CHARGES, CLOSE + 3 * h.HOUR)  # a replayed hour
    proc = h.JobProcess(h.CHARGES, late.job_env(h.CHARGES, CLOSE + 4 * h.HOUR) | GRACE)
    proc.wait_message("charging")
    proc.kill()
    drive(late, script, [CLOSE + 4 * h.HOUR], late=True)
    assert november(late) == text
    assert statement_of(late, "2026-11") == closed

    december = statement_of(late, "2026-12")
    assert december.corrections, "late data for a closed hour booked no correction"
    truth = by_subscription(statement_of(timely, "2026-11"))
    corrected = by_subscription(closed)
    for k in december.corrections:
        corrected[(k.subscription, k.currency)] += k.amount_micros
    assert +corrected == +truth
    assert by_subscription(closed) != truth

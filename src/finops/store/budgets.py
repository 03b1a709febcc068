"""Budgets in the ledger: threshold crossings, each Budget's latest evaluation, and the sums
an evaluation reads.

Why in the ledger: a crossing must be recorded durably so that its Event is posted once per
period whatever replays or restarts happen, and the gateway shows budgets without reading
the Kubernetes API. Writes join the caller's transaction (the job wraps them in units of
work); money is integer micros and hours are the start of a UTC hour.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import psycopg

from finops.api import models
from finops.collection import budgets

FEE_SOURCE = "subscription"


def _utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC)


# ---------------------------------------------------------------- what an evaluation reads


def recorded(
    conn: psycopg.Connection[Any], *, cluster: str, budget_uids: Collection[str]
) -> dict[str, budgets.Recorded]:
    """The latest recorded evaluation of each Budget (absent: never evaluated)."""
    rows = conn.execute(
        """
        SELECT budget_uid, period_start, evaluated_hour, generation, members
        FROM budget_evaluations WHERE cluster = %s AND budget_uid = ANY(%s)
        """,
        (cluster, list(budget_uids)),
    ).fetchall()
    return {
        str(uid): budgets.Recorded(_utc(start), _utc(hour), int(generation), tuple(members))
        for uid, start, hour, generation, members in rows
    }


def crossings(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    budget_uids: Collection[str],
    since: dt.datetime,
) -> list[budgets.Crossing]:
    """Crossings of these Budgets in periods starting at `since` or later, and every crossing
    whose Event is not posted yet (whatever its period)."""
    rows = conn.execute(
        """
        SELECT budget_uid, period_start, percent, basis, crossed_at, value_micros,
               amount_micros, event_posted
        FROM budget_thresholds
        WHERE cluster = %s AND budget_uid = ANY(%s) AND (period_start >= %s OR NOT event_posted)
        ORDER BY budget_uid, period_start, crossed_at, basis, percent
        """,
        (cluster, list(budget_uids), since),
    ).fetchall()
    return [
        budgets.Crossing(
            str(uid), _utc(start), int(percent), models.ThresholdBasis(basis), _utc(at), int(value),
            int(amount), bool(posted),
        )
        for uid, start, percent, basis, at, value, amount, posted in rows
    ]  # fmt: skip


def sums(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    start: dt.datetime,
    end: dt.datetime,
    usage_only: bool = False,
) -> dict[str, dict[str, int]]:
    """Micros charged per Subscription and currency over hours in [start, end), fee rows
    included unless `usage_only`."""
    if not subscription_uids or start >= end:
        return {}
    rows = conn.execute(
        """
        SELECT subscription_uid, currency, sum(amount_micros) FROM subscription_charges
        WHERE cluster = %s AND subscription_uid = ANY(%s) AND hour >= %s AND hour < %s
          AND (NOT %s OR source <> %s)
        GROUP BY 1, 2
        """,
        (cluster, list(subscription_uids), start, end, usage_only, FEE_SOURCE),
    ).fetchall()
    out: dict[str, dict[str, int]] = {}
    for uid, currency, total in rows:
        out.setdefault(str(uid), {})[str(currency)] = int(total)
    return out


# ---------------------------------------------------------------- what an evaluation writes


def record_crossings(
    conn: psycopg.Connection[Any], *, cluster: str, found: Iterable[budgets.Crossing]
) -> int:
    """Record new crossings; one already recorded keeps its first hour and value. Returns how
    many rows were added."""
    items = sorted(found, key=lambda c: c.key)
    if not items:
        return 0
    cur = conn.execute(
        """
        INSERT INTO budget_thresholds
            (cluster, budget_uid, period_start, basis, percent, crossed_at, value_micros,
             amount_micros)
        SELECT %s, * FROM unnest(%s::text[], %s::timestamptz[], %s::text[], %s::int[],
                                 %s::timestamptz[], %s::bigint[], %s::bigint[])
        ON CONFLICT DO NOTHING
        """,
        (
            cluster,
            [c.budget_uid for c in items],
            [c.period_start for c in items],
            [c.basis.value for c in items],
            [c.percent for c in items],
            [c.crossed_at for c in items],
            [c.value_micros for c in items],
            [c.amount_micros for c in items],
        ),
    )
    return cur.rowcount


def mark_posted(
    conn: psycopg.Connection[Any], *, cluster: str, posted: Iterable[budgets.Crossing]
) -> None:
    """Remember that these crossings' Events are in the cluster."""
    items = sorted(posted, key=lambda c: c.key)
    if not items:
        return
    conn.execute(
        """
        UPDATE budget_thresholds t SET event_posted = true
        FROM unnest(%s::text[], %s::timestamptz[], %s::text[], %s::int[])
             AS p(budget_uid, period_start, basis, percent)
        WHERE t.cluster = %s AND t.budget_uid = p.budget_uid
          AND t.period_start = p.period_start AND t.basis = p.basis AND t.percent = p.percent
        """,
        (
            [c.budget_uid for c in items],
            [c.period_start for c in items],
            [c.basis.value for c in items],
            [c.percent for c in items],
            cluster,
        ),
    )


_EVALUATION_COLUMNS = (
    "budget_uid", "namespace", "name", "generation", "period", "period_start", "period_end",
    "evaluated_hour", "currency", "amount_micros", "spent_micros", "future_fees_micros",
    "future_usage_micros", "state", "members",
)  # fmt: skip


def _evaluation_row(ev: budgets.Evaluation) -> tuple[Any, ...]:
    terms, outlook = ev.terms, ev.forecast
    return (
        terms.uid, terms.namespace, terms.name, terms.generation, terms.period.value,
        ev.plan.start, ev.plan.end, ev.plan.scheduled, terms.currency, terms.amount_micros,
        outlook.spent, outlook.future_fees, outlook.future_usage, ev.state.value,
        list(ev.plan.members),
    )  # fmt: skip


def record_evaluations(
    conn: psycopg.Connection[Any], *, cluster: str, evaluations: Iterable[budgets.Evaluation]
) -> None:
    """Keep each Budget's latest evaluation; one for an earlier hour of the same spec (a
    replayed run) does not replace a later one."""
    columns = ", ".join(_EVALUATION_COLUMNS)
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _EVALUATION_COLUMNS[1:])
    values = ", ".join(["%s"] * (len(_EVALUATION_COLUMNS) + 1))
    with conn.cursor() as cur:
        cur.executemany(
            f"""
            INSERT INTO budget_evaluations (cluster, {columns}) VALUES ({values})
            ON CONFLICT (cluster, budget_uid) DO UPDATE SET {updates}
            WHERE EXCLUDED.evaluated_hour >= budget_evaluations.evaluated_hour
               OR EXCLUDED.generation <> budget_evaluations.generation
            """.encode(),
            [(cluster, *_evaluation_row(ev)) for ev in evaluations],
        )


def forget_others(
    conn: psycopg.Connection[Any], *, cluster: str, namespace: str, keep: Collection[str]
) -> int:
    """Drop the evaluations of Budgets that no longer exist (in `namespace`, or anywhere for
    `*`); their threshold history stays. Returns how many went."""
    cur = conn.execute(
        """
        DELETE FROM budget_evaluations
        WHERE cluster = %s AND (%s = '*' OR namespace = %s) AND NOT budget_uid = ANY(%s)
        """,
        (cluster, namespace, namespace, list(keep)),
    )
    return cur.rowcount


# ---------------------------------------------------------------- what the gateway reads


@dataclasses.dataclass(frozen=True)
class EvaluationRow:
    """A Budget's latest evaluation as the gateway returns it."""

    uid: str
    namespace: str
    name: str
    period: str
    period_start: dt.datetime
    period_end: dt.datetime
    evaluated_hour: dt.datetime
    currency: str
    amount_micros: int
    spent_micros: int
    future_fees_micros: int
    future_usage_micros: int
    state: str
    members: tuple[str, ...]

    @property
    def forecast_micros(self) -> int:
        return self.spent_micros + self.future_fees_micros + self.future_usage_micros


def evaluations(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespaces: Collection[str],
    name: str | None = None,
) -> list[EvaluationRow]:
    """The latest evaluation of every Budget in these namespaces (or of the one named),
    ordered by namespace and name."""
    if not namespaces:
        return []
    rows = conn.execute(
        """
        SELECT budget_uid, namespace, name, period, period_start, period_end, evaluated_hour,
               currency, amount_micros, spent_micros, future_fees_micros, future_usage_micros,
               state, members
        FROM budget_evaluations
        WHERE cluster = %s AND namespace = ANY(%s) AND (%s::text IS NULL OR name = %s)
        ORDER BY namespace, name
        """,
        (cluster, list(namespaces), name, name),
    ).fetchall()
    return [
        EvaluationRow(
            str(r[0]), str(r[1]), str(r[2]), str(r[3]), _utc(r[4]), _utc(r[5]), _utc(r[6]),
            str(r[7]), int(r[8]), int(r[9]), int(r[10]), int(r[11]), str(r[12]), tuple(r[13]),
        )
        for r in rows
    ]  # fmt: skip


def budget_namespaces(conn: psycopg.Connection[Any], *, cluster: str) -> list[str]:
    """Every namespace holding an evaluated Budget, sorted."""
    rows = conn.execute(
        "SELECT DISTINCT namespace FROM budget_evaluations WHERE cluster = %s ORDER BY 1",
        (cluster,),
    ).fetchall()
    return [str(ns) for (ns,) in rows]


def period_crossings(
    conn: psycopg.Connection[Any], *, cluster: str, rows: Sequence[EvaluationRow]
) -> dict[str, list[budgets.Crossing]]:
    """The crossings of each evaluated Budget's current period, in the order crossed."""
    if not rows:
        return {}
    found = crossings(
        conn,
        cluster=cluster,
        budget_uids=[r.uid for r in rows],
        since=min(r.period_start for r in rows),
    )
    starts = {r.uid: r.period_start for r in rows}
    out: dict[str, list[budgets.Crossing]] = {r.uid: [] for r in rows}
    for c in found:
        if starts.get(c.budget_uid) == c.period_start:
            out[c.budget_uid].append(c)
    return out


def hourly(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    currency: str,
    start: dt.datetime,
    end: dt.datetime,
) -> list[tuple[dt.datetime, int]]:
    """Micros charged per hour of [start, end) to these Subscriptions in one currency, in
    order; hours with nothing charged are absent."""
    if not subscription_uids or start >= end:
        return []
    rows = conn.execute(
        """
        SELECT hour, sum(amount_micros) FROM subscription_charges
        WHERE cluster = %s AND subscription_uid = ANY(%s) AND currency = %s
          AND hour >= %s AND hour < %s
        GROUP BY hour ORDER BY hour
        """,
        (cluster, list(subscription_uids), currency, start, end),
    ).fetchall()
    return [(_utc(hour), int(total)) for hour, total in rows]

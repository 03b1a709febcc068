"""Budgets in the real ledger: crossings recorded once, evaluations kept per Budget (a replay
of an earlier hour never replaces a later one), and the sums an evaluation reads."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from finops.api import models
from finops.billing import forecast
from finops.collection import budgets
from finops.store import budgets as store
from tests.db import builders
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger

CLUSTER = builders.CLUSTER
APRIL = (dt.datetime(2026, 4, 1, tzinfo=dt.UTC), dt.datetime(2026, 5, 1, tzinfo=dt.UTC))
HOUR = dt.timedelta(hours=1)


def crossing(
    percent: int, basis: str = "Actual", *, at: int = 10, uid: str = "b-1", posted: bool = False
) -> budgets.Crossing:
    return budgets.Crossing(
        uid,
        APRIL[0],
        percent,
        models.ThresholdBasis(basis),
        APRIL[0] + at * HOUR,
        500 + at,
        1000,
        posted,
    )


def evaluation(hour: int, *, generation: int = 1, spent: int = 10) -> budgets.Evaluation:
    body: Any = {
        "metadata": {"name": "team", "namespace": "team-a", "uid": "b-1", "generation": generation},
        "spec": {"amount": "0.001", "currency": "USD"},
    }
    terms = budgets.BudgetTerms.from_object(body)
    plan = budgets.BudgetPlan(terms, APRIL[0] + hour * HOUR, *APRIL, ("s-1", "s-2"))
    return budgets.Evaluation(plan, forecast.Forecast(spent, 5, 1), {}, (), ())


class TestCrossings:
    def test_a_crossing_is_recorded_once_and_keeps_its_first_hour(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        assert (
            store.record_crossings(conn, cluster=CLUSTER, found=[crossing(50), crossing(80)]) == 2
        )
        again = [crossing(50, at=30), crossing(100, "Forecast", at=30)]
        assert store.record_crossings(conn, cluster=CLUSTER, found=again) == 1
        found = store.crossings(conn, cluster=CLUSTER, budget_uids=["b-1"], since=APRIL[0])
        assert [(c.percent, c.basis.value, c.crossed_at) for c in found] == [
            (50, "Actual", APRIL[0] + 10 * HOUR),
            (80, "Actual", APRIL[0] + 10 * HOUR),
            (100, "Forecast", APRIL[0] + 30 * HOUR),
        ]
        assert not any(c.event_posted for c in found)

    def test_marked_events_stay_posted_and_only_unposted_ones_of_old_periods_come_back(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        store.record_crossings(conn, cluster=CLUSTER, found=[crossing(50), crossing(80)])
        store.mark_posted(conn, cluster=CLUSTER, posted=[crossing(50)])
        may = APRIL[1]
        left = store.crossings(conn, cluster=CLUSTER, budget_uids=["b-1"], since=may)
        assert [(c.percent, c.event_posted) for c in left] == [(80, False)]
        store.mark_posted(conn, cluster=CLUSTER, posted=[crossing(80)])
        assert store.crossings(conn, cluster=CLUSTER, budget_uids=["b-1"], since=may) == []

    def test_the_table_refuses_a_crossing_no_budget_could_have(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        with pytest.raises(psycopg.errors.CheckViolation):
            store.record_crossings(conn, cluster=CLUSTER, found=[crossing(0)])


class TestEvaluations:
    def test_a_replay_of_an_earlier_hour_does_not_replace_a_later_evaluation(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        store.record_evaluations(conn, cluster=CLUSTER, evaluations=[evaluation(20, spent=20)])
        store.record_evaluations(conn, cluster=CLUSTER, evaluations=[evaluation(10, spent=10)])
        (row,) = store.evaluations(conn, cluster=CLUSTER, namespaces=["team-a"])
        assert (row.evaluated_hour, row.spent_micros, row.forecast_micros) == (
            APRIL[0] + 20 * HOUR, 20, 26
        )  # fmt: skip
        assert row.members == ("s-1", "s-2") and row.state == "OnTrack"
        edited = evaluation(10, generation=2, spent=11)
        store.record_evaluations(conn, cluster=CLUSTER, evaluations=[edited])
        (row,) = store.evaluations(conn, cluster=CLUSTER, namespaces=["team-a"], name="team")
        assert row.spent_micros == 11
        assert store.recorded(conn, cluster=CLUSTER, budget_uids=["b-1"]) == {
            "b-1": budgets.Recorded(APRIL[0], APRIL[0] + 10 * HOUR, 2, ("s-1", "s-2"))
        }

    def test_budgets_that_are_gone_are_forgotten_within_the_scope_of_the_run(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        store.record_evaluations(conn, cluster=CLUSTER, evaluations=[evaluation(1)])
        assert store.forget_others(conn, cluster=CLUSTER, namespace="elsewhere", keep=[]) == 0
        assert store.budget_namespaces(conn, cluster=CLUSTER) == ["team-a"]
        assert store.forget_others(conn, cluster=CLUSTER, namespace="*", keep=["b-1"]) == 0
        assert store.forget_others(conn, cluster=CLUSTER, namespace="team-a", keep=[]) == 1
        assert store.evaluations(conn, cluster=CLUSTER, namespaces=["team-a"]) == []


class TestSums:
    def test_sums_split_by_currency_and_leave_out_fees_for_the_usage_rate(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        o, v = builders.offering_version(conn), builders.subscription_version(conn, uid="s-1")
        rows = [
            charge_rows.ChargeRow(
                CLUSTER,
                "s-1",
                APRIL[0] + n * HOUR,
                source,
                Decimal(1),
                amount,
                amount,
                currency,
                True,
                o,
                v,
            )
            for n in range(5)
            for source, amount, currency in (
                ("subscription", 1000, "USD"),
                ("cpuHour", 7, "USD"),
                ("ramGbHour", 3, "EUR"),
            )
        ]
        oracle_ledger.upsert(conn, rows)
        window = {"start": APRIL[0] + HOUR, "end": APRIL[0] + 4 * HOUR}
        got = store.sums(conn, cluster=CLUSTER, subscription_uids=["s-1", "s-9"], **window)
        assert got == {"s-1": {"USD": 3 * 1007, "EUR": 9}}
        usage = store.sums(
            conn, cluster=CLUSTER, subscription_uids=["s-1"], usage_only=True, **window
        )
        assert usage == {"s-1": {"USD": 21, "EUR": 9}}
        assert store.hourly(
            conn, cluster=CLUSTER, subscription_uids=["s-1"], currency="USD", **window
        ) == [(APRIL[0] + n * HOUR, 1007) for n in (1, 2, 3)]

"""A Budget over a generated month, end to end: real API server, real PostgreSQL, usage from an
OpenCost replay of a generated cluster, and the charge job run every hour as its CronJob would.

The month is November 2026. A platform fee (1.00 an hour), metered usage from namespace
`ns-0000` and, from 20 November 10:00, a GPU add-on (40.00 a day, DayBoundary) count toward a
monthly Budget with thresholds at 50 % and 80 % of spend and 100 % of the forecast. Every
expectation is computed here: spend from the ledger's rows, future fees from the literal
tick oracle (`tests/oracle/fee_ticks.py`), usage from the documented rate (the usage charged
in the week of whole hours before the run, per active hour, times the active hours left).

Two runs are killed: at the hour the 50 % threshold is crossed, after its Event was posted
and before the run recorded that (it waits on a lock the test holds on `budget_evaluations`);
at the 80 % hour, before the crossing is recorded (a lock on `budget_thresholds`). Both
hours are then run again, and replayed once more, with an earlier hour replayed after them.
Each threshold still makes exactly one Event.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import psycopg
import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from psycopg import conninfo
from tests.e2e._support import active_book
from tests.faults import _harness as faults
from tests.oracle import fee_ticks

from finops.controller import cost_metrics
from finops.jobs import allocations as allocation_job
from finops_devenv import controlplane, postgres
from finops_devenv import opencost_replay as replay

GROUP = "/apis/finops.stakater.com/v1alpha1"
UTC = dt.UTC
HOUR = dt.timedelta(hours=1)
MONTH = (dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 12, 1, tzinfo=UTC))
GPU_AT = dt.datetime(2026, 11, 20, 10, tzinfo=UTC)
AMOUNT = 1_000_000_000  # 1,000.00 USD
WINDOW_HOURS = 168
RATES = {"cpuHour": "0.031", "ramGbHour": "0.004", "pvGbHour": "0.0002", "networkGiB": "0.09"}
OFFERINGS = {
    "platform": {"subscriptionFee": {"tickAlignment": "ActivatedAt", "period": "1h",
                                     "priceMicros": 1_000_000}},
    "metered": {"resourcePricing": [{"name": "cpuHour"}, {"name": "ramGbHour"}]},
    "gpu": {"subscriptionFee": {"tickAlignment": "DayBoundary", "period": "1",
                                "priceMicros": 40_000_000}},
}  # fmt: skip
FEES = {
    "platform": fee_ticks.Fee(1_000_000, "ActivatedAt", "1h", MONTH[0]),
    "gpu": fee_ticks.Fee(40_000_000, "DayBoundary", "1", GPU_AT),
}


@dataclasses.dataclass
class Month(faults.Universe):
    """The scenario's namespace and ledger (a fault-suite universe: its job runs, in-process
    or as killable processes), and what was there right after each killed run."""

    killed: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        with self.kube.http() as client:
            resp = client.get(f"{GROUP}/namespaces/{self.namespace}/{plural}/{name}")
        assert resp.status_code == 200, resp.text
        got: dict[str, Any] = resp.json()
        return got

    def subscription(self, name: str, activated: dt.datetime, sources: Any = None) -> None:
        """A Subscription activated at `activated`, as the controller would leave it."""
        spec: dict[str, Any] = {"offeringRef": {"name": name, "namespace": self.namespace}}
        if sources:
            spec["usageSources"] = sources
        self.post("subscriptions", faults.make_object("Subscription", name, spec))
        self.put_status(name, activatedAt=faults.rfc(activated), ready="True")

    def charge(self, hour: dt.datetime) -> None:
        code, seen = self.run(faults.CHARGES, hour)
        assert code == 0, f"charge run of {hour} failed: {seen}"

    def kill_charge(self, hour: dt.datetime, table: str, statement: str) -> None:
        """A charge run as a process, killed while its write to `table` waits on our lock."""
        with faults.table_locked(self.dsn, table):
            proc = self.spawn(faults.CHARGES, hour)
            faults.wait_until(
                f"the charge run waiting on {table}",
                lambda: (
                    faults.waiting_on_lock(self.dsn, self.app, statement) > 0
                    or proc.proc.poll() is not None
                ),
                timeout=120,
            )
            assert proc.kill(), f"the run finished although {table} was locked:\n{proc.output()}"
            self.killed[table] = {"hour": hour, "events": self.events()}

    def events(self) -> list[dict[str, Any]]:
        with self.kube.http() as client:
            resp = client.get(
                f"/api/v1/namespaces/{self.namespace}/events",
                params={"fieldSelector": "involvedObject.kind=Budget"},
            )
        assert resp.status_code == 200, resp.text
        items: list[dict[str, Any]] = resp.json()["items"]
        return items

    def rows(self) -> list[tuple[str, dt.datetime, str, int]]:
        """(Subscription name, hour, source, micros) of every charge row."""
        with psycopg.connect(self.dsn) as conn:
            found = conn.execute(
                """
                SELECT v.name, c.hour, c.source, c.amount_micros FROM subscription_charges c
                JOIN subscription_versions v ON v.id = c.subscription_version_id
                WHERE c.cluster = %s
                """,
                (faults.CLUSTER,),
            ).fetchall()
        return [(str(n), h.astimezone(UTC), str(s), int(a)) for n, h, s, a in found]


def _collect_allocations(month: Month) -> None:
    """Every hour of the month from OpenCost at once (lookback over the month), finalized."""
    env = month.job_env(faults.ALLOCATIONS, MONTH[1])
    env["HOURS_LOOKBACK"] = str((MONTH[1] - MONTH[0]) // HOUR)

    async def go() -> int:
        client = AsyncClient(config=KubeConfig.from_file(str(month.kube.kubeconfig)))
        try:
            return await allocation_job.run(env, now=lambda: MONTH[1], kube=client)
        finally:
            await client.close()

    assert asyncio.run(go()) == 0


def _setup(month: Month) -> None:
    month.kube.create_namespace(month.namespace)
    for name, pricing in OFFERINGS.items():
        month.post("offerings", faults.make_object("Offering", name, {"pricing": pricing}))
    for name, kind in (("allocations", "ResourceCostCollection"),
                       ("charges", "SubscriptionChargeCollection")):  # fmt: skip
        month.post(
            "costjobs", faults.make_object("CostJob", name, {"type": kind, "interval": "1h"})
        )
    month.subscription("platform", MONTH[0])
    month.subscription("metered", MONTH[0], [{"namespace": "ns-0000"}])
    thresholds = [{"percent": 50}, {"percent": 80}, {"percent": 100, "basis": "Forecast"}]
    budget = {"amount": "1000", "currency": "USD", "thresholds": thresholds}
    month.post("budgets", faults.make_object("Budget", "team", budget))


# ---------------------------------------------------------------- what the month must show


def _allocations(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(
            """SELECT hour, namespace, pod, controller_kind, controller_name, start_time,
                      end_time, cpu_core_usage_average, ram_byte_usage_average, pv_byte_hours,
                      network_transfer_bytes, network_receive_bytes
               FROM provider_allocations WHERE cluster = %s""",
            (faults.CLUSTER,),
        )
        names = [d.name for d in cur.description or ()]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _half_even(x: Fraction) -> int:
    q, r = divmod(x.numerator, x.denominator)
    return q + (2 * r > x.denominator or (2 * r == x.denominator and q % 2 == 1))


@dataclasses.dataclass(frozen=True)
class Expected:
    """Every hour's charges and the forecast the documented method gives at every run."""

    usage: dict[dt.datetime, int]
    """Micros of the metered Subscription's usage in each hour."""

    def fees(self, start: dt.datetime, end: dt.datetime, at: dt.datetime) -> int:
        """Fee rows of hours [start, end) of the Subscriptions that exist at run `at`."""
        total = FEES["platform"].fee(start, end)
        return total + (FEES["gpu"].fee(max(start, GPU_AT), end) if at >= GPU_AT else 0)

    def spent(self, at: dt.datetime) -> int:
        through = at + HOUR
        usage = sum(m for h, m in self.usage.items() if h < through)
        return self.fees(MONTH[0], through, at) + usage

    def forecast(self, at: dt.datetime) -> int:
        lo = max(at - WINDOW_HOURS * HOUR, MONTH[0])
        observed = (at - lo) // HOUR
        recent = sum(m for h, m in self.usage.items() if lo <= h < at)
        left = (MONTH[1] - at) // HOUR - 1
        usage = _half_even(Fraction(recent * left, observed)) if observed else 0
        return self.spent(at) + self.fees(at + HOUR, MONTH[1], at) + usage

    def first(self, value: Any, percent: int) -> dt.datetime:
        hour = MONTH[0]
        while value(hour) * 100 < percent * AMOUNT:
            hour += HOUR
            assert hour < MONTH[1], f"{percent}% is never reached"
        return hour


def _expected(dsn: str) -> Expected:
    from tests.e2e.test_charge_job import expected_usage

    rows = _allocations(dsn)
    meters: dict[str, tuple[str, int] | None] = {"cpuHour": None, "ramGbHour": None}
    sources = [{"namespace": "ns-0000"}]
    usage = {}
    hour = MONTH[0]
    while hour < MONTH[1]:
        found = expected_usage(rows, sources, meters, MONTH[0], hour)
        usage[hour] = sum(amount for _, amount, _ in found.values())
        hour += HOUR
    return Expected(usage)


@dataclasses.dataclass
class Run:
    """What the month looked like: the Budget's status after every hour's run, the hours of
    the crossings the test expects, and what was there right after each killed run."""

    month: Month
    expected: Expected
    crossings: dict[str, dt.datetime]
    statuses: dict[dt.datetime, dict[str, Any]] = dataclasses.field(default_factory=dict)


def _play(month: Month, expected: Expected) -> Run:
    run = Run(
        month,
        expected,
        {
            "50 Actual": expected.first(expected.spent, 50),
            "80 Actual": expected.first(expected.spent, 80),
            "100 Forecast": expected.first(expected.forecast, 100),
        },
    )
    h50, h80 = run.crossings["50 Actual"], run.crossings["80 Actual"]
    hour = MONTH[0]
    while hour < MONTH[1]:
        if hour == GPU_AT:
            month.subscription("gpu", GPU_AT)
        if hour == h50:
            month.kill_charge(hour, "budget_evaluations", "INSERT INTO budget_evaluations")
        if hour == h80:
            month.kill_charge(hour, "budget_thresholds", "INSERT INTO budget_thresholds")
        month.charge(hour)
        if hour in (h50, h80):
            month.charge(hour)  # replayed
        if hour == h80:
            month.charge(h50)  # an earlier hour replayed after a later one: changes nothing
        run.statuses[hour] = month.get("budgets", "team")["status"]
        hour += HOUR
    return run


@pytest.fixture(scope="module")
def played(
    kube: controlplane.ControlPlane, pg_server: postgres.PostgresCluster, _ledger_template: str
) -> Iterator[Run]:
    dsn = pg_server.create_database(template=_ledger_template)
    source = replay.Generated(namespaces=1, pods_per_namespace=2, seed=25)
    with active_book(kube, "budget-book", RATES), replay.ReplayServer(source) as opencost:
        month = Month(kube, f"t-{uuid.uuid4().hex[:10]}", dsn, opencost.url)
        _setup(month)
        _collect_allocations(month)
        yield _play(month, _expected(dsn))
    pg_server.drop_database(str(conninfo.conninfo_to_dict(dsn)["dbname"]))


# ---------------------------------------------------------------- the month, checked


def test_the_ledger_holds_the_charges_the_expectation_is_built_from(played: Run) -> None:
    rows = played.month.rows()
    usage = {h: 0 for h in played.expected.usage}
    for name, hour, _, micros in rows:
        if name == "metered":
            usage[hour] += micros
    assert usage == played.expected.usage
    assert sum(m for n, _, s, m in rows if s == "subscription") == played.expected.fees(
        *MONTH, MONTH[1]
    )


def test_spent_and_forecast_follow_the_documented_method_at_every_hour(played: Run) -> None:
    expected = played.expected
    for hour, status in played.statuses.items():
        assert status["evaluatedHour"] == faults.rfc(hour)
        assert status["spentMicros"] == expected.spent(hour), hour
        assert status["forecastMicros"] == expected.forecast(hour), hour
        detail = status["forecastDetail"]
        assert detail["futureFeesMicros"] == expected.fees(hour + HOUR, MONTH[1], hour), hour
        assert status["subscriptions"] == (3 if hour >= GPU_AT else 2)


def test_thresholds_are_crossed_at_the_expected_hours_and_kept(played: Run) -> None:
    # The scenario is built so each threshold falls in its own stretch of the month.
    h50, h80, forecast = (played.crossings[k] for k in ("50 Actual", "80 Actual", "100 Forecast"))
    assert MONTH[0] < h50 < GPU_AT == forecast < h80 < MONTH[1]
    final = played.statuses[MONTH[1] - HOUR]
    assert [(t["percent"], t["basis"], t["crossedAt"]) for t in final["thresholds"]] == [
        (50, "Actual", faults.rfc(h50)),
        (100, "Forecast", faults.rfc(forecast)),
        (80, "Actual", faults.rfc(h80)),
    ]
    for hour, status in played.statuses.items():
        crossed = {f"{t['percent']} {t['basis']}" for t in status["thresholds"]}
        assert crossed == {k for k, at in played.crossings.items() if at <= hour}, hour


def test_the_state_and_conditions_follow_spend_and_forecast(played: Run) -> None:
    states = {h: s["state"] for h, s in played.statuses.items()}
    assert states[GPU_AT - HOUR] == "OnTrack" and states[GPU_AT] == "ForecastExceeded"
    assert states[MONTH[1] - HOUR] == "Exceeded"
    over = next(h for h in states if played.expected.spent(h) > AMOUNT)
    assert next(h for h, s in states.items() if s == "Exceeded") == over
    final = played.statuses[MONTH[1] - HOUR]
    conditions = {c["type"]: c for c in final["conditions"]}
    assert conditions["Exceeded"]["status"] == "True"
    assert conditions["Exceeded"]["reason"] == "SpentOverAmount"
    assert conditions["ForecastExceeded"]["reason"] == "ForecastOverAmount"


def test_each_threshold_makes_exactly_one_event_across_killed_and_replayed_runs(
    played: Run,
) -> None:
    month = played.month
    after_posting = month.killed["budget_evaluations"]
    assert [e["reason"] for e in after_posting["events"]] == ["ActualThresholdCrossed"]
    before_recording = month.killed["budget_thresholds"]
    assert len(before_recording["events"]) == 2  # 50 % and the forecast; 80 % not yet
    events = month.events()
    assert sorted((e["reason"], e["type"], e["count"]) for e in events) == [
        ("ActualThresholdCrossed", "Normal", 1),
        ("ActualThresholdCrossed", "Normal", 1),
        ("ForecastThresholdCrossed", "Warning", 1),
    ]
    messages = sorted(e["message"] for e in events)
    assert (
        messages[0].startswith("forecast ")
        and "reached 100% of the budget of 1,000.00 USD" in messages[0]
    )
    assert "reached 50% of the budget" in messages[1] and "reached 80%" in messages[2]
    assert {e["involvedObject"]["name"] for e in events} == {"team"}
    with psycopg.connect(month.dsn) as conn:
        flags = conn.execute("SELECT event_posted FROM budget_thresholds").fetchall()
    assert flags == [(True,)] * 3


def test_the_metrics_say_what_the_status_says(played: Run) -> None:
    budget = played.month.get("budgets", "team")
    status = budget["status"]
    samples = {
        (family.name, tuple(sorted(s.labels.items()))): s.value
        for family in cost_metrics.budget_families([budget])
        for s in family.samples
    }
    labels = (("budget", "team"), ("namespace", played.month.namespace))
    assert samples == {
        ("finops_budget_amount_micros", labels): status["amountMicros"],
        ("finops_budget_spent_micros", labels): status["spentMicros"],
        ("finops_budget_forecast_micros", labels): status["forecastMicros"],
    }

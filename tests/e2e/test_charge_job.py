"""`--mode=collectionjob` end to end: real API server, real PostgreSQL, OpenCost replaying captures.

A scripted day of simulated scheduled hours. Every expectation is computed here from the
documented formulas (tick boundaries, opening-tick proration, per-row usage with margins,
one half-even rounding per charge row), never by calling the code under test.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import psycopg
import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from tests.e2e._support import active_book

from finops.billing import focus
from finops.jobs import allocations as allocation_job
from finops.jobs import charges as job
from finops.store import focus as focus_store
from finops_devenv import controlplane
from finops_devenv import opencost_replay as replay

GROUP = "/apis/finops.stakater.com/v1alpha1"
UTC = dt.UTC
HOUR = dt.timedelta(hours=1)
DAY_START = dt.datetime(2026, 10, 31, tzinfo=UTC)
FINALIZER = "subscriptions.finops.stakater.com/finalizer"
CLUSTER = "charge-cluster"
GIB = 2**30
# The test book's rates in micros ("0.031", "0.004", "0.0002", "0.09").
RATES = {"cpuHour": 31_000, "ramGbHour": 4_000, "pvGbHour": 200, "networkGb": 90_000}
FIXED_MONTH = 2_629_800
DATABASE_DOWN = "host=127.0.0.1 port=9 dbname=none user=nobody connect_timeout=2"
"""A DSN nothing answers on: the charge run's ledger pass cannot run."""


# ---------------------------------------------------------------- fixtures and API helpers


@pytest.fixture(scope="module")
def book(kube: controlplane.ControlPlane) -> Iterator[dict[str, Any]]:
    """The active, ready currency PriceBook the allocation job prices rows with."""
    rates = {"cpuHour": "0.031", "ramGbHour": "0.004", "pvGbHour": "0.0002", "networkGiB": "0.09"}
    with active_book(kube, "charges-book", rates) as obj:
        yield obj


def create(kube: controlplane.ControlPlane, ns: str, plural: str, body: dict[str, Any]) -> None:
    with kube.http() as client:
        resp = client.post(f"{GROUP}/namespaces/{ns}/{plural}", json=body)
    assert resp.status_code == 201, resp.text


def offering(kube: controlplane.ControlPlane, ns: str, name: str, pricing: dict[str, Any]) -> None:
    body = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Offering",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"pricing": pricing},
    }
    create(kube, ns, "offerings", body)


def subscription(
    kube: controlplane.ControlPlane,
    ns: str,
    name: str,
    offering_name: str,
    activated: dt.datetime | None,
    *,
    sources: list[dict[str, str]] | None = None,
    finalizer: bool = False,
) -> dict[str, Any]:
    """Create a Subscription and stamp `activatedAt` as the controller would."""
    spec: dict[str, Any] = {"offeringRef": {"name": offering_name, "namespace": ns}}
    if sources:
        spec["usageSources"] = sources
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    body = {"apiVersion": "finops.stakater.com/v1alpha1", "kind": "Subscription"}
    create(kube, ns, "subscriptions", {**body, "metadata": meta, "spec": spec})
    if activated is None:  # as the controller leaves one that never passed its gates
        created = get_sub(kube, ns, name)
        assert created is not None
        return created
    return set_status(kube, ns, name, activatedAt=rfc(activated), ready="True")


def sub_url(ns: str, name: str) -> str:
    return f"{GROUP}/namespaces/{ns}/subscriptions/{name}"


def get_sub(kube: controlplane.ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    with kube.http() as client:
        resp = client.get(sub_url(ns, name))
    if resp.status_code == 404:
        return None
    assert resp.status_code == 200, resp.text
    obj: dict[str, Any] = resp.json()
    return obj


def set_status(
    kube: controlplane.ControlPlane, ns: str, name: str, **fields: Any
) -> dict[str, Any]:
    obj = get_sub(kube, ns, name)
    assert obj is not None
    obj["status"] = {**(obj.get("status") or {}), **fields}
    with kube.http() as client:
        resp = client.put(f"{sub_url(ns, name)}/status", json=obj)
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


def rfc(t: dt.datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def at(hour: int, minute: int = 0, second: int = 0) -> dt.datetime:
    return DAY_START + dt.timedelta(hours=hour, minutes=minute, seconds=second)


def client_for(kube: controlplane.ControlPlane) -> AsyncClient:
    return AsyncClient(config=KubeConfig.from_file(str(kube.kubeconfig)))


def charge_run(
    kube: controlplane.ControlPlane, ns: str, dsn: str, scheduled: dt.datetime, **extra: str
) -> int:
    env = {
        "POSTGRES_CONNECTION_STRING": dsn,
        "CLUSTER_ID": CLUSTER,
        "SCHEDULED_TIMESTAMP": rfc(scheduled + dt.timedelta(minutes=7)),
        **extra,
    }

    async def go() -> int:
        client = client_for(kube)
        try:
            return await job.run(env, now=lambda: scheduled, kube=client, namespace=ns)
        finally:
            await client.close()

    return asyncio.run(go())


def allocation_run(
    kube: controlplane.ControlPlane,
    costjob: dict[str, Any],
    dsn: str,
    url: str,
    scheduled: dt.datetime,
) -> None:
    env = {
        "COSTJOB_NAME": costjob["metadata"]["name"],
        "COSTJOB_NAMESPACE": costjob["metadata"]["namespace"],
        "POSTGRES_CONNECTION_STRING": dsn,
        "OPENCOST_CONNECTION_STRING": url,
        "OPENCOST_AGGREGATE": "namespace,pod",
        "SCHEDULED_TIMESTAMP": rfc(scheduled),
        "HOURS_LOOKBACK": "2",
        "CLUSTER_ID": CLUSTER,
    }

    async def go() -> int:
        client = client_for(kube)
        try:
            return await allocation_job.run(env, now=lambda: scheduled, kube=client)
        finally:
            await client.close()

    assert asyncio.run(go()) == 0


@pytest.fixture
def costjob(kube: controlplane.ControlPlane, kube_namespace: str) -> dict[str, Any]:
    body = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": "allocations", "namespace": kube_namespace},
        "spec": {"type": "ResourceCostCollection", "interval": "1h"},
    }
    create(kube, kube_namespace, "costjobs", body)
    return body


# ---------------------------------------------------------------- independent expectations


class Fee:
    """Tick boundaries listed one by one, and the documented fee per boundary."""

    def __init__(self, alignment: str, period: str, price: int, activated: dt.datetime) -> None:
        self.alignment, self.period, self.price, self.activated = (
            alignment,
            period,
            price,
            activated,
        )

    def boundaries(self, until: dt.datetime) -> list[dt.datetime]:
        a, out = self.activated, []
        if self.alignment == "ActivatedAt":
            step = dt.timedelta(minutes=int(self.period[:-1]))
            b = a + step
            while b <= until:
                out.append(b)
                b += step
        elif self.alignment == "HourBoundary":
            step = HOUR * int(self.period)
            b = dt.datetime(1970, 1, 1, tzinfo=UTC)
            b += step * ((a - b) // step + 1)
            while b <= until:
                out.append(b)
                b += step
        elif self.alignment == "DayBoundary":
            b = a.replace(hour=0, minute=0, second=0) + dt.timedelta(days=1)
            while b <= until:
                out.append(b)
                b += dt.timedelta(days=int(self.period))
        else:
            year, month = a.year, a.month
            while True:
                month += int(self.period)
                year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
                b = dt.datetime(year, month, 1, tzinfo=UTC)
                if b > until:
                    break
                out.append(b)
        return out

    def nominal_seconds(self) -> int:
        n = int(self.period[:-1]) * 60 if self.alignment == "ActivatedAt" else int(self.period)
        return {
            "ActivatedAt": n,
            "HourBoundary": n * 3600,
            "DayBoundary": n * 86400,
            "MonthBoundary": n * FIXED_MONTH,
        }[self.alignment]

    def worth(self, boundary: dt.datetime, first: dt.datetime) -> int:
        if boundary != first or self.alignment == "ActivatedAt":
            return self.price
        seconds = int((first - self.activated).total_seconds())
        return self.price * seconds // self.nominal_seconds()

    def window(self, start: dt.datetime, end: dt.datetime) -> int:
        """Boundaries in (start, end] times their worth."""
        all_ = self.boundaries(end)
        return sum(self.worth(b, all_[0]) for b in all_ if start < b <= end)


def half_even(x: Fraction) -> int:
    q, r = divmod(x.numerator, x.denominator)
    if 2 * r > x.denominator or (2 * r == x.denominator and q % 2):
        q += 1
    return q


def allocation_rows(dsn: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(
            """SELECT hour, namespace, pod, controller_kind, controller_name, start_time, end_time,
                      cpu_core_usage_average, ram_byte_usage_average, pv_byte_hours,
                      network_transfer_bytes, network_receive_bytes
               FROM provider_allocations WHERE cluster = %s""",
            (CLUSTER,),
        )
        names = [d.name for d in cur.description or ()]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def selects(sources: list[dict[str, str]], row: dict[str, Any]) -> bool:
    for s in sources:
        if s.get("namespace") and row["namespace"] != s["namespace"]:
            continue
        kind = s.get("resourceType")
        if kind == "Pod":
            if s.get("name") and row["pod"] != s["name"]:
                continue
        elif kind and (
            row["controller_kind"] != kind.lower()
            or (s.get("name") and row["controller_name"] != s["name"])
        ):
            continue
        return True
    return False


def expected_usage(
    rows: list[dict[str, Any]],
    sources: list[dict[str, str]],
    margins: dict[str, tuple[str, int] | None],
    activated: dt.datetime,
    hour: dt.datetime,
) -> dict[str, tuple[Fraction, int, int]]:
    """meter → (exact quantity, rounded amount, rounded unit price) for one hour."""
    qty: dict[str, Fraction] = {}
    amt: dict[str, Fraction] = {}
    for r in rows:
        if r["hour"] != hour or not selects(sources, r):
            continue
        start, end = r["start_time"], r["end_time"]
        covered = (end - max(start, activated)) // dt.timedelta(microseconds=1)
        length = (end - start) // dt.timedelta(microseconds=1)
        if covered <= 0:
            continue
        hours = Fraction(covered, 3_600_000_000)
        share = Fraction(covered, length)
        signals = {
            "cpuHour": Fraction(r["cpu_core_usage_average"]) * hours,
            "ramGbHour": Fraction(r["ram_byte_usage_average"]) * hours / GIB,
            "pvGbHour": Fraction(r["pv_byte_hours"]) * share / GIB,
            "networkGb": (
                Fraction(r["network_transfer_bytes"]) + Fraction(r["network_receive_bytes"])
            )
            * share
            / GIB,
        }
        for meter, margin in margins.items():
            price = Fraction(RATES[meter])
            if margin and margin[0] == "factorMilli":
                price = price * margin[1] / 1000
            elif margin:
                price += margin[1]
            qty[meter] = qty.get(meter, Fraction(0)) + signals[meter]
            amt[meter] = amt.get(meter, Fraction(0)) + signals[meter] * price
    return {
        m: (qty[m], half_even(amt[m]), half_even(amt[m] / qty[m]) if qty[m] else 0) for m in qty
    }


def quantity12(x: Fraction) -> Decimal:
    return Decimal(half_even(x * 10**12)) / Decimal(10**12)


def ledger(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            """SELECT subscription_uid, hour, source, quantity, unit_price_micros, amount_micros,
                      currency, finalized, offering_version_id, subscription_version_id
               FROM subscription_charges ORDER BY 1, 2, 3"""
        ).fetchall()


# ---------------------------------------------------------------- the scripted day

PLANS: dict[str, dict[str, Any]] = {
    # name: fee (alignment, period, price) or None, usage meters with margins, sources, activation
    "fee-activated": {"fee": ("ActivatedAt", "90m", 40_000_000), "act": at(0, 20)},
    "fee-hour": {"fee": ("HourBoundary", "2", 7_000_000), "act": at(0, 15)},
    "fee-day": {"fee": ("DayBoundary", "1", 24_000_000), "act": at(0, 45, 30)},
    "fee-month": {"fee": ("MonthBoundary", "1", 300_000_000), "act": at(0, 5)},
    "usage-only": {
        "usage": {"cpuHour": None, "ramGbHour": None, "pvGbHour": None, "networkGb": None},
        "sources": [{"namespace": "prometheus-system"}],
        "act": at(0, 10),
    },
    "mixed": {
        "fee": ("HourBoundary", "1", 1_000_000),
        "usage": {"cpuHour": ("factorMilli", 1150), "ramGbHour": ("absoluteMicros", 200)},
        "sources": [
            {"resourceType": "Deployment", "name": "coredns", "namespace": "kube-system"},
            {"resourceType": "Pod", "namespace": "opencost"},
        ],
        # Inside the captured rows' span, so the first hour's rows are trimmed.
        "act": at(0, 57, 30),
    },
}


def fee_of(plan: dict[str, Any]) -> Fee | None:
    if "fee" not in plan:
        return None
    alignment, period, price = plan["fee"]
    return Fee(alignment, period, price, plan["act"])


def pricing_of(plan: dict[str, Any]) -> dict[str, Any]:
    pricing: dict[str, Any] = {}
    if "fee" in plan:
        alignment, period, price = plan["fee"]
        pricing["subscriptionFee"] = {
            "tickAlignment": alignment,
            "period": period,
            "priceMicros": price,
        }
    if "usage" in plan:
        entries = []
        for meter, margin in plan["usage"].items():
            entry: dict[str, Any] = {"name": meter}
            if margin:
                entry["margins"] = {margin[0]: margin[1]}
            entries.append(entry)
        pricing["resourcePricing"] = entries
    return pricing


def expected_rows(
    plans: dict[str, dict[str, Any]],
    uids: dict[str, str],
    alloc: list[dict[str, Any]],
    through: dt.datetime,
) -> dict[tuple[str, dt.datetime, str], tuple[Decimal, int, int, bool]]:
    """(uid, hour, source) → (quantity, unit price, amount, finalized) for runs up to `through`."""
    out: dict[tuple[str, dt.datetime, str], tuple[Decimal, int, int, bool]] = {}
    for name, plan in plans.items():
        act: dt.datetime = plan["act"]
        hour = act.replace(minute=0, second=0)
        fee = fee_of(plan)
        while hour <= through:
            final = hour < through
            if fee is not None:
                ticks = len([b for b in fee.boundaries(hour + HOUR) if b > hour])
                out[(uids[name], hour, "subscription")] = (
                    Decimal(ticks),
                    fee.price,
                    fee.window(hour, hour + HOUR),
                    final,
                )
            if "usage" in plan:
                measured = expected_usage(alloc, plan["sources"], plan["usage"], act, hour)
                for meter, (q, amount, unit) in measured.items():
                    out[(uids[name], hour, meter)] = (quantity12(q), unit, amount, final)
            hour += HOUR
    return out


def expected_buckets(
    plan: dict[str, Any], rows: dict[tuple[str, dt.datetime, str], Any], uid: str, h: dt.datetime
) -> list[dict[str, Any]]:
    fee = fee_of(plan)
    day = h.replace(hour=0)
    month = day.replace(day=1)
    nxt = (month + dt.timedelta(days=32)).replace(day=1)
    order = ["cpuHour", "gpuHour", "ramGbHour", "pvGbHour", "networkGb"]
    out = []
    windows = [("hour", h, h + HOUR), ("day", day, day + dt.timedelta(days=1))]
    for gran, start, end in [*windows, ("month", month, nxt)]:
        breakdown: list[dict[str, Any]] = []
        fee_now = fee.window(start, min(h, end)) if fee else 0
        fee_all = fee.window(start, end) if fee else 0
        if fee_now or fee_all:
            entry: dict[str, Any] = {"name": "subscription"}
            if fee_now:
                entry["current"] = fee_now
            if fee_all:
                entry["projected"] = fee_all
            breakdown.append(entry)
        used = dict.fromkeys(order, 0)
        for (u, hour, source), (_, _, amount, _) in rows.items():
            if u == uid and source != "subscription" and start <= hour < end and hour <= h:
                used[source] += amount
        breakdown += [{"name": m, "current": used[m]} for m in order if used[m]]
        bucket: dict[str, Any] = {
            "granularity": gran,
            "start": rfc(start),
            "endExclusive": rfc(end),
        }
        current = fee_now + sum(used.values())
        if current:
            bucket["current"] = current
        if fee_all:
            bucket["projected"] = fee_all
        if breakdown:
            bucket["breakdown"] = breakdown
        out.append(bucket)
    return out


def costs_resolved(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in obj["status"]["conditions"] if c["type"] == "CostsResolved")


def test_a_scripted_day_charges_every_hour_and_bucket_to_the_micro(
    kube: controlplane.ControlPlane,
    kube_namespace: str,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
) -> None:
    ns = kube_namespace
    uids: dict[str, str] = {}
    for name, plan in PLANS.items():
        offering(kube, ns, f"o-{name}", pricing_of(plan))
        obj = subscription(kube, ns, name, f"o-{name}", plan["act"], sources=plan.get("sources"))
        uids[name] = obj["metadata"]["uid"]
    url = opencost_captures.url

    def check_ledger(through: dt.datetime) -> None:
        want = expected_rows(PLANS, uids, allocation_rows(ledger_dsn), through)
        got = {(r[0], r[1], r[2]): (r[3], r[4], r[5], r[7]) for r in ledger(ledger_dsn)}
        assert got == want
        # Usage was really measured (the captures move no network bytes).
        for name in ("usage-only", "mixed"):
            billed = {k[2] for k, v in want.items() if k[0] == uids[name] and v[2] > 0} - {
                "subscription"
            }
            assert billed == set(PLANS[name]["usage"]) - {"networkGb"}, name
        assert {r[6] for r in ledger(ledger_dsn)} == {"USD"}

    def check_buckets(h: dt.datetime) -> None:
        want_rows = expected_rows(PLANS, uids, allocation_rows(ledger_dsn), h)
        for name, plan in PLANS.items():
            obj = get_sub(kube, ns, name)
            assert obj is not None
            assert obj["status"]["costs"] == expected_buckets(plan, want_rows, uids[name], h), name
            cond = costs_resolved(obj)
            assert (cond["status"], cond["reason"]) == ("True", "FromDB")
            assert cond["observedGeneration"] == obj["metadata"]["generation"]

    for hour in range(25):
        h = at(hour)
        if hour == 5:
            # Charged before this hour's allocations: hour 04's usage is past the boundary.
            assert charge_run(kube, ns, ledger_dsn, h) == 0
            open_rows = {(r[2], r[7]) for r in ledger(ledger_dsn) if r[1] == at(4)}
            assert ("subscription", True) in open_rows
            assert ("cpuHour", False) in open_rows and ("cpuHour", True) not in open_rows
        allocation_run(kube, costjob, ledger_dsn, url, h)
        assert charge_run(kube, ns, ledger_dsn, h) == 0
        if hour == 5:
            usage_04 = {(r[2], r[7]) for r in ledger(ledger_dsn) if r[1] == at(4)}
            assert ("cpuHour", True) in usage_04 and ("cpuHour", False) not in usage_04
        if hour in (0, 1, 12):
            check_ledger(h)
            check_buckets(h)

    last = at(24)
    check_ledger(last)
    check_buckets(last)
    # The opening ticks of the day and month alignments land in the 23:00 row.
    rows = {(r[0], r[1], r[2]): r[5] for r in ledger(ledger_dsn)}
    assert rows[(uids["fee-day"], at(23), "subscription")] == 24_000_000 * 83_670 // 86_400
    assert rows[(uids["fee-month"], at(23), "subscription")] == 300_000_000 * 86_100 // FIXED_MONTH
    with psycopg.connect(ledger_dsn) as conn:
        versions: dict[str, str] = dict(
            conn.execute(
                "SELECT DISTINCT c.subscription_uid, v.uid FROM subscription_charges c "
                "JOIN subscription_versions v ON v.id = c.subscription_version_id"
            ).fetchall()
        )
        offered = conn.execute(
            "SELECT DISTINCT o.name FROM subscription_charges c "
            "JOIN offering_versions o ON o.id = c.offering_version_id"
        ).fetchall()
    assert versions == {uid: uid for uid in uids.values()}
    assert {o for (o,) in offered} == {f"o-{name}" for name in PLANS}

    # Running the same hour again changes nothing: rows, statuses, resourceVersions.
    before = (ledger(ledger_dsn), [get_sub(kube, ns, n) for n in PLANS])
    for _ in range(3):
        assert charge_run(kube, ns, ledger_dsn, last) == 0
    assert (ledger(ledger_dsn), [get_sub(kube, ns, n) for n in PLANS]) == before


# ---------------------------------------------------------------- finalizers and failures


def delete(kube: controlplane.ControlPlane, ns: str, name: str) -> None:
    with kube.http() as client:
        resp = client.delete(sub_url(ns, name))
    assert resp.status_code in (200, 202), resp.text


def held_by(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if str(getattr(r, "subscription", "")).endswith(f"/{name}")
    ]


def test_finalizers_are_released_only_when_every_gate_holds_and_each_hold_is_logged(
    kube: controlplane.ControlPlane,
    kube_namespace: str,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="finops.jobs.charges")
    ns = kube_namespace
    hourly = {"tickAlignment": "ActivatedAt", "period": "60m", "priceMicros": 1_000_000}
    offering(kube, ns, "guarded", {"subscriptionFee": {**hourly, "minPeriods": 3}})
    offering(kube, ns, "metered", {"resourcePricing": [{"name": "cpuHour"}]})
    offering(kube, ns, "doomed", {"subscriptionFee": hourly})
    for name, offer, sources in (
        ("guarded", "guarded", None),
        ("metered", "metered", [{"namespace": "kube-system"}]),
        ("undeactivated", "guarded", None),
        ("orphan", "doomed", None),
    ):
        subscription(kube, ns, name, offer, at(0), sources=sources, finalizer=True)
    for name in ("guarded", "metered", "orphan"):
        set_status(kube, ns, name, deactivatedAt=rfc(at(1, 30)))
    for name in ("guarded", "metered", "undeactivated", "orphan"):
        delete(kube, ns, name)
    with kube.http() as client:
        assert client.delete(f"{GROUP}/namespaces/{ns}/offerings/doomed").status_code == 200
    url = opencost_captures.url
    for hour in range(2):
        allocation_run(kube, costjob, ledger_dsn, url, at(hour))

    # 02:00, allocations settled only before 01:00: every gate but one holds something.
    caplog.clear()
    assert charge_run(kube, ns, ledger_dsn, at(2)) == 1  # the orphan's Offering is gone
    assert held_by(caplog, "guarded") == ["MinPeriods not yet satisfied, keeping finalizer"]
    assert held_by(caplog, "metered") == [
        "Charges not finalized through deactivation hour, keeping finalizer"
    ]
    assert held_by(caplog, "undeactivated") == [
        "Subscription not yet deactivated, keeping finalizer"
    ]
    orphan = held_by(caplog, "orphan")
    assert "Errors recorded for subscription in this run, keeping finalizer" in orphan
    assert any("cannot read Offering" in line and "404" in line for line in orphan)
    for name in ("guarded", "metered", "undeactivated", "orphan"):
        assert get_sub(kube, ns, name) is not None
    # The failure held only the orphan: the others were charged and given buckets.
    for name in ("guarded", "metered"):
        obj = get_sub(kube, ns, name)
        assert obj is not None and costs_resolved(obj)["reason"] == "FromDB"
        assert len(obj["status"]["costs"]) == 3
    orphan_obj = get_sub(kube, ns, "orphan")
    assert orphan_obj is not None and "costs" not in orphan_obj["status"]

    # Allocations for 02:00 settle hour 01:00; by 03:00 three ticks have passed.
    allocation_run(kube, costjob, ledger_dsn, url, at(2))
    caplog.clear()
    assert charge_run(kube, ns, ledger_dsn, at(2)) == 1
    assert held_by(caplog, "metered") == ["Removed finalizer for deleted subscription"]
    assert get_sub(kube, ns, "metered") is None
    assert get_sub(kube, ns, "guarded") is not None
    caplog.clear()
    assert charge_run(kube, ns, ledger_dsn, at(3)) == 1
    assert held_by(caplog, "guarded") == ["Removed finalizer for deleted subscription"]
    assert get_sub(kube, ns, "guarded") is None
    assert get_sub(kube, ns, "undeactivated") is not None
    assert get_sub(kube, ns, "orphan") is not None
    # The guarded Subscription's closing charges reached the ledger before it went:
    # ActivatedAt 1h from 00:00, deactivated 01:30 → snapped to 02:00, two ticks.
    with psycopg.connect(ledger_dsn) as conn:
        billed = conn.execute(
            "SELECT sum(amount_micros), bool_and(finalized) FROM subscription_charges c "
            "JOIN subscription_versions v ON v.id = c.subscription_version_id "
            "WHERE v.name = 'guarded'"
        ).fetchone()
    assert billed == (2_000_000, True)


def test_with_the_database_down_costs_come_from_the_fee_calculator(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    offering(kube, ns, "mixed", pricing_of(PLANS["mixed"]))
    offering(kube, ns, "usage", pricing_of(PLANS["usage-only"]))
    subscription(kube, ns, "mixed", "mixed", at(0), sources=PLANS["mixed"]["sources"])
    subscription(kube, ns, "usage", "usage", at(0), sources=PLANS["usage-only"]["sources"])
    assert charge_run(kube, ns, DATABASE_DOWN, at(3)) == 1

    mixed = get_sub(kube, ns, "mixed")
    assert mixed is not None
    cond = costs_resolved(mixed)
    assert (cond["status"], cond["reason"]) == ("True", "FromCalculator")
    fee = Fee("HourBoundary", "1", 1_000_000, at(0))
    day = mixed["status"]["costs"][1]
    assert day["current"] == fee.window(at(0), at(3)) == 3_000_000
    assert day["projected"] == fee.window(at(0), at(24))
    assert [b["name"] for b in day["breakdown"]] == ["subscription"]
    usage_only = get_sub(kube, ns, "usage")
    assert usage_only is not None
    assert costs_resolved(usage_only)["reason"] == "FromCalculator"
    assert [set(b) for b in usage_only["status"]["costs"]] == [
        {"granularity", "start", "endExclusive"}
    ] * 3


def _charged_from_the_ledger(
    kube: controlplane.ControlPlane,
    ns: str,
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
) -> dict[str, Any]:
    """The "mixed" Subscription, its allocations of hours 0-3 collected and the run of hour
    3 done: the Subscription as that run left it (costs summed from the ledger)."""
    plan = PLANS["mixed"]
    offering(kube, ns, "mixed", pricing_of(plan))
    subscription(kube, ns, "mixed", "mixed", plan["act"], sources=plan["sources"])
    for hour in range(4):
        allocation_run(kube, costjob, ledger_dsn, opencost_captures.url, at(hour))
    assert charge_run(kube, ns, ledger_dsn, at(3)) == 0
    charged = get_sub(kube, ns, "mixed")
    assert charged is not None and costs_resolved(charged)["reason"] == "FromDB"
    return charged


def test_a_run_without_the_database_leaves_ledger_costs_of_its_hour_and_replaces_older_ones(
    kube: controlplane.ControlPlane,
    kube_namespace: str,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two runs of one hour can race; the one that cannot use the ledger must not write its
    fee-only buckets over the costs the other summed from the ledger. It still fails."""
    caplog.set_level(logging.INFO, logger="finops.jobs.charges")
    ns, plan = kube_namespace, PLANS["mixed"]
    charged = _charged_from_the_ledger(kube, ns, costjob, ledger_dsn, opencost_captures)
    month = charged["status"]["costs"][2]
    assert {b["name"] for b in month["breakdown"]} == {"subscription", *plan["usage"]}

    assert charge_run(kube, ns, DATABASE_DOWN, at(3)) == 1
    again = get_sub(kube, ns, "mixed")
    assert again is not None
    assert again["status"] == charged["status"]
    assert again["metadata"]["resourceVersion"] == charged["metadata"]["resourceVersion"]
    kept = "1 subscription(s) keep the costs a run of 2026-10-31T03:00:00Z or later summed"
    assert any(r.getMessage().startswith(kept) for r in caplog.records)

    assert charge_run(kube, ns, DATABASE_DOWN, at(4)) == 1
    later = get_sub(kube, ns, "mixed")
    assert later is not None and costs_resolved(later)["reason"] == "FromCalculator"
    assert later["status"]["costs"][0]["start"] == rfc(at(4))
    assert {b["name"] for b in later["status"]["costs"][2]["breakdown"]} == {"subscription"}


def test_a_run_of_an_older_hour_leaves_the_costs_a_later_run_summed(
    kube: controlplane.ControlPlane,
    kube_namespace: str,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Job of an older hour that finishes after the next hour's run (retried, or slow) sums
    the ledger too, but its costs are older: they do not go back over the newer ones."""
    caplog.set_level(logging.INFO, logger="finops.jobs.charges")
    ns = kube_namespace
    newer = _charged_from_the_ledger(kube, ns, costjob, ledger_dsn, opencost_captures)
    assert newer["status"]["costs"][0]["start"] == rfc(at(3))

    assert charge_run(kube, ns, ledger_dsn, at(2)) == 0
    after = get_sub(kube, ns, "mixed")
    assert after is not None
    assert after["status"] == newer["status"]
    assert after["metadata"]["resourceVersion"] == newer["metadata"]["resourceVersion"]
    kept = "1 subscription(s) keep the costs a run of a later hour than 2026-10-31T02:00:00Z"
    assert any(r.getMessage().startswith(kept) for r in caplog.records)

    allocation_run(kube, costjob, ledger_dsn, opencost_captures.url, at(4))
    assert charge_run(kube, ns, ledger_dsn, at(4)) == 0
    later = get_sub(kube, ns, "mixed")
    assert later is not None and costs_resolved(later)["reason"] == "FromDB"
    assert later["status"]["costs"][0]["start"] == rfc(at(4))


def test_a_deleted_subscription_that_never_activated_is_released_without_charges(
    kube: controlplane.ControlPlane,
    kube_namespace: str,
    ledger_dsn: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="finops.jobs.charges")
    ns = kube_namespace
    offering(
        kube,
        ns,
        "plain",
        {
            "subscriptionFee": {
                "tickAlignment": "ActivatedAt",
                "period": "1h",
                "priceMicros": 1_000_000,
            }
        },
    )
    subscription(kube, ns, "never", "plain", None, finalizer=True)
    delete(kube, ns, "never")
    held = get_sub(kube, ns, "never")
    assert held is not None and held["metadata"].get("deletionTimestamp")

    assert charge_run(kube, ns, ledger_dsn, at(2)) == 0
    assert get_sub(kube, ns, "never") is None
    assert held_by(caplog, "never") == [
        "Removed finalizer for deleted subscription (never activated, nothing to bill)"
    ]
    with psycopg.connect(ledger_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM subscription_charges").fetchone() == (0,)


def test_each_hour_carries_the_subscription_labels_it_was_charged_under(
    kube: controlplane.ControlPlane, kube_namespace: str, ledger_dsn: str
) -> None:
    """The job mirrors a relabelled Subscription as a new version (same generation), so the
    FOCUS export tags earlier hours with the old labels and later ones with the new."""
    ns = kube_namespace
    fee = {"tickAlignment": "HourBoundary", "period": "1", "priceMicros": 1_000_000}
    offering(kube, ns, "tagged", {"subscriptionFee": fee})
    subscription(kube, ns, "tagged", "tagged", at(0))
    with kube.http() as client:
        resp = client.patch(
            sub_url(ns, "tagged"),
            json={"metadata": {"labels": {"cost-center": "cc-42"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert resp.status_code == 200, resp.text
    assert charge_run(kube, ns, ledger_dsn, at(1)) == 0
    with kube.http() as client:
        resp = client.patch(
            sub_url(ns, "tagged"),
            json={"metadata": {"labels": {"cost-center": "cc-7"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert resp.status_code == 200, resp.text
    assert resp.json()["metadata"]["generation"] == 1
    assert charge_run(kube, ns, ledger_dsn, at(3)) == 0

    with psycopg.connect(ledger_dsn) as conn:
        got = list(
            focus_store.charges(
                conn, cluster=CLUSTER, start=at(0), end=at(4), include_unsettled=True
            )
        )
        generations = conn.execute(
            "SELECT DISTINCT generation FROM subscription_versions WHERE name = 'tagged'"
        ).fetchall()
    tags = {c.hour: focus.row(c)["Tags"] for c in got if c.namespace == ns}
    assert generations == [(1,)]
    assert set(tags) == {at(0), at(1), at(2), at(3)}
    assert tags[at(0)] == {"cost-center": "cc-42", "kubernetes.io/metadata.name": ns}
    assert tags[at(3)] == {"cost-center": "cc-7", "kubernetes.io/metadata.name": ns}

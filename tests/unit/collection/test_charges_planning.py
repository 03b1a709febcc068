"""Which hours a collection run charges and which rows they produce (pure planning)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from tests.oracle import charge_rows
from tests.oracle import usage as oracle_usage

from finops.billing import allocation, usage
from finops.collection import charges

UTC = dt.UTC
H = dt.timedelta(hours=1)


def at(day: int, hour: int, minute: int = 0, second: int = 0) -> dt.datetime:
    return dt.datetime(2026, 4, day, hour, minute, second, tzinfo=UTC)


def subscription(
    activated: str | None = "2026-04-01T09:15:00Z",
    deactivated: str | None = None,
    *,
    usage_sources: list[dict[str, str]] | None = None,
    deleting: bool = False,
    finalizers: tuple[str, ...] = (charges.FINALIZER,),
) -> charges.SubscriptionState:
    status: dict[str, Any] = {}
    if activated:
        status["activatedAt"] = activated
    if deactivated:
        status["deactivatedAt"] = deactivated
    meta: dict[str, Any] = {
        "uid": "u-1",
        "namespace": "billing",
        "name": "acme",
        "generation": 3,
        "resourceVersion": "77",
        "finalizers": list(finalizers),
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-04-01T13:00:00Z"
    spec: dict[str, Any] = {"offeringRef": {"name": "base", "namespace": "billing"}}
    if usage_sources is not None:
        spec["usageSources"] = usage_sources
    return charges.SubscriptionState.from_object({"metadata": meta, "spec": spec, "status": status})


def fee_offering(
    price: int = 40_000_000, alignment: str = "HourBoundary", period: str = "1", **extra: Any
) -> dict[str, Any]:
    fee = {"priceMicros": price, "tickAlignment": alignment, "period": period, **extra}
    return {"pricing": {"subscriptionFee": fee}}


CPU_OFFERING = {"pricing": {"resourcePricing": [{"name": "cpuHour"}]}}


class TestReadingTheSubscription:
    def test_the_object_fields_the_run_reads_are_parsed(self) -> None:
        sub = subscription(deactivated="2026-04-01T13:42:07Z", deleting=True)
        assert (sub.uid, sub.key, sub.generation, sub.resource_version) == (
            "u-1",
            "billing/acme",
            3,
            "77",
        )
        assert sub.activated_at == at(1, 9, 15)
        assert sub.deactivated_at == at(1, 13, 42, 7)
        assert sub.deleting and charges.FINALIZER in sub.finalizers
        assert (sub.offering_namespace, sub.offering_name) == ("billing", "base")

    def test_a_malformed_timestamp_is_a_terms_error(self) -> None:
        with pytest.raises(charges.TermsError, match="RFC 3339"):
            subscription(activated="yesterday")

    def test_terms_refuse_a_subscription_that_never_activated(self) -> None:
        with pytest.raises(charges.TermsError, match="has not activated"):
            charges.terms_for(subscription(activated=None), fee_offering())

    def test_a_broken_fee_block_is_a_terms_error(self) -> None:
        broken = {"pricing": {"subscriptionFee": {"priceMicros": "a lot"}}}
        with pytest.raises(charges.TermsError, match="priceMicros"):
            charges.terms_for(subscription(), broken)

    def test_usage_is_billed_only_with_sources_and_a_priced_meter(self) -> None:
        sources = [{"namespace": "acme-prod"}]
        assert charges.terms_for(subscription(usage_sources=sources), CPU_OFFERING).bills_usage
        assert not charges.terms_for(subscription(), CPU_OFFERING).bills_usage
        assert not charges.terms_for(
            subscription(usage_sources=sources), fee_offering()
        ).bills_usage


class TestTheChargeWindow:
    def test_a_first_run_starts_at_the_activation_hour_and_ends_after_the_scheduled_hour(
        self,
    ) -> None:
        terms = charges.terms_for(subscription(), fee_offering())
        assert charges.charge_window(terms, None, at(1, 13, 20)) == (at(1, 9), at(1, 14))

    def test_a_watermark_resumes_after_the_last_finalized_hour(self) -> None:
        terms = charges.terms_for(subscription(), fee_offering())
        assert charges.charge_window(terms, at(1, 11), at(1, 13)) == (at(1, 12), at(1, 14))

    def test_a_deactivated_subscription_stops_after_its_last_chargeable_hour(self) -> None:
        terms = charges.terms_for(subscription(deactivated="2026-04-01T11:40:00Z"), fee_offering())
        # HourBoundary snaps 11:40 to 12:00: the final tick closes in the 11:00 hour.
        assert charges.charge_window(terms, None, at(2, 5)) == (at(1, 9), at(1, 12))
        assert charges.charge_window(terms, at(1, 11), at(2, 5)) is None

    def test_a_long_period_keeps_billing_until_the_snapped_end(self) -> None:
        terms = charges.terms_for(
            subscription(deactivated="2026-04-01T11:40:00Z"), fee_offering(alignment="DayBoundary")
        )
        assert terms.last_hour() == at(1, 23)
        assert terms.settle_hour() == at(1, 23)
        assert charges.charge_window(terms, None, at(3, 0)) == (at(1, 9), at(2, 0))

    def test_usage_only_terms_end_with_the_hour_of_the_last_active_instant(self) -> None:
        sources = [{"namespace": "acme-prod"}]
        on_the_hour = charges.terms_for(
            subscription(deactivated="2026-04-01T12:00:00Z", usage_sources=sources), CPU_OFFERING
        )
        assert on_the_hour.last_hour() == at(1, 11)
        assert on_the_hour.settle_hour() == at(1, 12)


class TestFeeRows:
    def test_hourly_fee_rows_prorate_the_opening_tick_and_leave_the_scheduled_hour_open(
        self,
    ) -> None:
        terms = charges.terms_for(subscription(), fee_offering())
        assert terms.fee is not None
        rows = charge_rows.fee_charges(terms.fee, (at(1, 9), at(1, 12)), at(1, 11))
        # 09:15 → 10:00 is 2700 of 3600 seconds: 40000000 × 2700 // 3600.
        assert [(r.hour, r.amount_micros, r.quantity, r.finalized) for r in rows] == [
            (at(1, 9), 40_000_000 * 2700 // 3600, Decimal(1), True),
            (at(1, 10), 40_000_000, Decimal(1), True),
            (at(1, 11), 40_000_000, Decimal(1), False),
        ]
        assert {r.source for r in rows} == {"subscription"}
        assert {r.unit_price_micros for r in rows} == {40_000_000}

    def test_hours_without_a_boundary_are_written_as_zero_rows(self) -> None:
        terms = charges.terms_for(
            subscription(activated="2026-04-01T09:00:00Z"), fee_offering(alignment="DayBoundary")
        )
        assert terms.fee is not None
        rows = charge_rows.fee_charges(terms.fee, (at(1, 21), at(2, 1)), at(2, 1))
        # First boundary at the next midnight: 15 of 24 hours, rounded down.
        assert [(r.hour, r.amount_micros, r.quantity) for r in rows] == [
            (at(1, 21), 0, Decimal(0)),
            (at(1, 22), 0, Decimal(0)),
            (at(1, 23), 40_000_000 * 15 * 3600 // 86400, Decimal(1)),
            (at(2, 0), 0, Decimal(0)),
        ]


def row(
    hour: dt.datetime, namespace: str, cpu: str, *, start_minute: int = 0
) -> oracle_usage.PricedRow:
    return oracle_usage.PricedRow(
        allocation.AllocationRow(
            cluster="c",
            name=f"{namespace}/pod",
            namespace=namespace,
            aggregation="namespace,pod",
            hour=hour,
            start=hour + dt.timedelta(minutes=start_minute),
            end=hour + H,
            pod="pod",
            cpu_core_usage_average=Decimal(cpu),
        ),
        usage.Rates(cpu_hour=31_000),
    )


class TestUsageRows:
    def test_usage_hours_at_or_after_the_allocation_boundary_stay_open(self) -> None:
        terms = charges.terms_for(
            subscription(activated="2026-04-01T09:00:00Z", usage_sources=[{"namespace": "a"}]),
            CPU_OFFERING,
        )
        rows = [row(at(1, h), "a", "2") for h in (9, 10, 11, 12)]
        planned = charge_rows.usage_rows(terms, rows, (at(1, 9), at(1, 13)), at(1, 12), at(1, 11))
        assert [(p.hour, p.source, p.amount_micros, p.finalized) for p in planned] == [
            (at(1, 9), "cpuHour", 62_000, True),
            (at(1, 10), "cpuHour", 62_000, True),
            (at(1, 11), "cpuHour", 62_000, False),
            (at(1, 12), "cpuHour", 62_000, False),
        ]
        assert {p.quantity for p in planned} == {Decimal(2)}
        assert {p.unit_price_micros for p in planned} == {31_000}

    def test_rows_outside_the_window_or_the_sources_are_not_charged(self) -> None:
        terms = charges.terms_for(
            subscription(activated="2026-04-01T09:00:00Z", usage_sources=[{"namespace": "a"}]),
            CPU_OFFERING,
        )
        rows = [row(at(1, 8), "a", "2"), row(at(1, 9), "b", "2"), row(at(1, 13), "a", "2")]
        assert charge_rows.usage_rows(terms, rows, (at(1, 9), at(1, 13)), at(1, 14), None) == []

    def test_the_activation_instant_trims_the_first_hour(self) -> None:
        terms = charges.terms_for(
            subscription(activated="2026-04-01T09:15:00Z", usage_sources=[{"namespace": "a"}]),
            CPU_OFFERING,
        )
        planned = charge_rows.usage_rows(
            terms, [row(at(1, 9), "a", "1")], (at(1, 9), at(1, 10)), at(1, 12), None
        )
        # 45 minutes of 1 core at 31000 per core-hour.
        assert [(p.amount_micros, p.quantity) for p in planned] == [(23_250, Decimal("0.75"))]

    def test_plan_charges_lists_fee_rows_then_usage_rows(self) -> None:
        spec = {
            "pricing": {
                **fee_offering(price=1_000_000)["pricing"],
                "resourcePricing": [{"name": "cpuHour", "margins": {"factorMilli": 1500}}],
            }
        }
        terms = charges.terms_for(
            subscription(activated="2026-04-01T09:00:00Z", usage_sources=[{"namespace": "a"}]),
            spec,
        )
        planned = charge_rows.plan_charges(
            terms, (at(1, 9), at(1, 10)), [row(at(1, 9), "a", "1")], at(1, 10), None
        )
        assert [(p.source, p.amount_micros) for p in planned] == [
            ("subscription", 1_000_000),
            ("cpuHour", 46_500),
        ]
        assert charge_rows.plan_charges(terms, None, [], at(1, 10), None) == []

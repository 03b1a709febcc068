"""Offering price resolution: the active currency book's rates with each meter's margin."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from tests.unit.hierarchy import builders as b

from finops.billing import money, usage
from finops.pricing import resolve

NOW = dt.datetime(2026, 8, 12, 9, 15, 4, tzinfo=dt.UTC)
# The define-pricing page's book.
RATES = {
    "cpuHour": "0.031",
    "ramGbHour": "0.004",
    "pvGbHour": "0.00012",
    "gpuHour": "1.80",
    "networkGiB": "0.09",
}
BOOK = b.book("onprem-standard", RATES)


def metered(*entries: dict[str, Any], fee: dict[str, Any] | None = None) -> dict[str, Any]:
    return b.offering("gpu-workload", fee=fee, meters=list(entries))


def prices(resolution: resolve.Resolution) -> dict[str, int]:
    assert resolution.pricing is not None, resolution.message
    return {m["name"]: m["unitPriceMicros"] for m in resolution.pricing["meters"]}


class TestResolvedPricing:
    def test_the_docs_margin_table(self) -> None:
        cases: list[tuple[dict[str, Any], int]] = [
            ({"name": "cpuHour"}, 31000),
            ({"name": "cpuHour", "margins": {"absoluteMicros": 200}}, 31200),
            ({"name": "cpuHour", "margins": {"factorMilli": 1150}}, 35650),
            ({"name": "gpuHour", "margins": {"factorMilli": 1200}}, 2160000),
        ]
        for entry, expected in cases:
            assert prices(resolve.resolve(metered(entry), [BOOK], NOW)) == {entry["name"]: expected}

    def test_the_gpu_workload_example_keeps_declared_order(self) -> None:
        offering = metered(
            {"name": "gpuHour", "margins": {"factorMilli": 1200}},
            {"name": "cpuHour", "margins": {"absoluteMicros": 200}},
        )
        resolution = resolve.resolve(offering, [BOOK], NOW)
        assert resolution.outcome is resolve.Outcome.RESOLVED
        assert resolution.pricing == {
            "resolvedAt": "2026-08-12T09:15:04Z",
            "meters": [
                {"name": "gpuHour", "unitPriceMicros": 2160000},
                {"name": "cpuHour", "unitPriceMicros": 31200},
            ],
        }

    def test_the_fee_is_copied_through_verbatim(self) -> None:
        fee = {
            "period": "1h",
            "tickAlignment": "ActivatedAt",
            "priceMicros": 40000000,
            "minPeriods": 2,
        }
        offering = b.offering("managed-postgres-v1", fee=fee)
        resolution = resolve.resolve(offering, [], NOW)
        assert resolution.pricing == {
            "resolvedAt": "2026-08-12T09:15:04Z",
            "meters": [],
            "subscriptionFee": fee,
        }
        assert resolution.pricing["subscriptionFee"] is not fee

    def test_an_empty_pricing_block_resolves(self) -> None:
        resolution = resolve.resolve(b.offering("empty", fee=None), [], NOW)
        assert resolution.pricing == {"resolvedAt": "2026-08-12T09:15:04Z", "meters": []}

    def test_network_uses_the_networkGiB_rate(self) -> None:
        assert prices(resolve.resolve(metered({"name": "networkGb"}), [BOOK], NOW)) == {
            "networkGb": 90000
        }

    def test_a_meter_listed_twice_resolves_once_first_entry_winning(self) -> None:
        offering = metered(
            {"name": "cpuHour", "margins": {"factorMilli": 2000}}, {"name": "cpuHour"}
        )
        resolution = resolve.resolve(offering, [BOOK], NOW)
        assert resolution.pricing is not None
        assert resolution.pricing["meters"] == [{"name": "cpuHour", "unitPriceMicros": 62000}]

    def test_unset_rates_and_the_subscription_meter_resolve_against_zero(self) -> None:
        sparse = b.book("sparse", {"cpuHour": "0.031", "gpuHour": ""})
        offering = metered(
            {"name": "gpuHour", "margins": {"absoluteMicros": 5}},
            {"name": "subscription", "margins": {"absoluteMicros": 7}},
        )
        assert prices(resolve.resolve(offering, [sparse], NOW)) == {"gpuHour": 5, "subscription": 7}

    @given(
        rate=st.integers(min_value=0, max_value=10**12),
        absolute=st.none() | st.integers(min_value=0, max_value=10**9),
        factor=st.none() | st.integers(min_value=0, max_value=10**5),
    )
    def test_unit_prices_are_the_billing_cores_margin_of_the_rate(
        self, rate: int, absolute: int | None, factor: int | None
    ) -> None:
        margins = {
            k: v
            for k, v in (("absoluteMicros", absolute), ("factorMilli", factor))
            if v is not None
        }
        whole, frac = divmod(rate, money.MICROS_PER_UNIT)
        book = b.book("p", {"cpuHour": f"{whole}.{frac:06d}"})
        got = prices(resolve.resolve(metered({"name": "cpuHour", "margins": margins}), [book], NOW))
        expected = usage.Margin(absolute, factor).unit_price_micros(rate)
        assert got == {"cpuHour": expected}
        assert isinstance(got["cpuHour"], int)


class TestWhichBook:
    def test_only_a_book_marked_active_counts(self) -> None:
        idle = b.book("idle", RATES, active=False)
        resolution = resolve.resolve(metered({"name": "cpuHour"}), [idle], NOW)
        assert resolution.outcome is resolve.Outcome.NO_ACTIVE_PRICEBOOK
        assert resolution.message == (
            f"offering {b.NS}/gpu-workload: no active pricebook to resolve metered pricing"
        )

    def test_a_percent_book_cannot_price_meters(self) -> None:
        percent = b.book("scores", {}, mode="percent")
        resolution = resolve.resolve(metered({"name": "cpuHour"}), [percent], NOW)
        assert resolution.outcome is resolve.Outcome.NO_ACTIVE_PRICEBOOK
        assert resolution.pricing is None

    def test_the_election_breaks_a_transition_with_two_marked_books(self) -> None:
        old = b.book("old", {"cpuHour": "0.010"}, created="2026-01-01T00:00:00Z")
        new = b.book("new", {"cpuHour": "0.020"}, created="2026-06-01T00:00:00Z")
        pinned = b.book(
            "pinned", {"cpuHour": "0.030"}, created="2025-01-01T00:00:00Z", annotated=True
        )
        assert prices(resolve.resolve(metered({"name": "cpuHour"}), [old, new], NOW)) == {
            "cpuHour": 20000
        }
        assert prices(resolve.resolve(metered({"name": "cpuHour"}), [old, new, pinned], NOW)) == {
            "cpuHour": 30000
        }


class TestParseFailures:
    def test_a_rate_the_meters_need_names_the_meter_and_value(self) -> None:
        bad = b.book("bad", {**RATES, "cpuHour": "99999999999999.5"}, ready="False")
        resolution = resolve.resolve(metered({"name": "cpuHour"}), [bad], NOW)
        assert resolution.outcome is resolve.Outcome.PRICEBOOK_PARSE_FAILED
        assert resolution.message.startswith(
            f'offering {b.NS}/gpu-workload: meter cpuHour: PriceBook {b.NS}/bad rate "cpuHour" '
            '("99999999999999.5"): '
        )

    def test_an_unready_book_is_refused_even_when_these_meters_parse(self) -> None:
        bad = b.book("bad", {**RATES, "gpuHour": "1.0000001"}, ready="False")
        resolution = resolve.resolve(metered({"name": "cpuHour"}), [bad], NOW)
        assert resolution.outcome is resolve.Outcome.PRICEBOOK_PARSE_FAILED
        assert "is not ready" in resolution.message

    def test_a_fee_only_offering_ignores_a_broken_book(self) -> None:
        bad = b.book("bad", {"cpuHour": "1.0000001"}, ready="False")
        assert resolve.resolve(b.offering("fee"), [bad], NOW).outcome is resolve.Outcome.RESOLVED

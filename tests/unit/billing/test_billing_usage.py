"""Usage meters: quantities inside the active interval, margins per row, one rounding."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.fixtures import opencost as opencost_fixtures
from tests.oracle import usage as oracle_usage

from finops.api import models
from finops.billing import allocation, money, sources, ticks, usage

UTC = dt.UTC
H10 = dt.datetime(2026, 10, 3, 10, tzinfo=UTC)
GIB = 2**30


def find_captures() -> pathlib.Path:
    """The real OpenCost captures (the same lookup as the replay fixtures)."""
    found = opencost_fixtures.find_captures()
    if found is None:
        pytest.fail("real OpenCost captures not found (set FINOPS_OPENCOST_CAPTURES)")
    return found


# The PriceBook of the docs' define-pricing / quick-start pages.
PRICEBOOK_SPEC = {
    "currency": "USD",
    "valuationMode": "currency",
    "rates": {
        "cpuHour": "0.031",
        "ramGbHour": "0.004",
        "pvGbHour": "0.00012",
        "gpuHour": "1.80",
        "networkGiB": "0.09",
    },
}
BOOK = usage.Rates.from_pricebook_spec(PRICEBOOK_SPEC)
EVERYTHING = usage.UsagePricing(tuple(usage.MeterPrice(m) for m in usage.USAGE_METERS))
ACME = (sources.SourceFilter(namespace="acme"),)


def row(**fields: Any) -> allocation.AllocationRow:
    base: dict[str, Any] = {
        "cluster": "c",
        "name": "acme/api",
        "namespace": "acme",
        "aggregation": "namespace,pod",
        "hour": H10,
        "start": H10,
        "end": H10 + dt.timedelta(hours=1),
    }
    base.update(fields)
    return allocation.AllocationRow(**base)


def charges(
    rows: list[allocation.AllocationRow],
    *,
    pricing: usage.UsagePricing = EVERYTHING,
    rates: usage.Rates | None = BOOK,
    activated: dt.datetime = H10 - dt.timedelta(days=1),
    deactivated: dt.datetime | None = None,
    selected: tuple[sources.SourceFilter, ...] = ACME,
) -> dict[str, oracle_usage.UsageCharge]:
    result = oracle_usage.usage_charges(
        pricing,
        selected,
        [oracle_usage.PricedRow(r, rates) for r in rows],
        usage.ActiveInterval(activated, deactivated),
    )
    return {c.source: c for c in result}


class TestMarginTable:
    """`price-resource-usage`: the four rows of the margin table."""

    OFFERING = yaml.safe_load(
        """
        pricing:
          resourcePricing:
            - name: cpuHour
            - name: gpuHour
              margins:
                factorMilli: 1200
        """
    )

    @pytest.mark.parametrize(
        ("meter", "margins", "expected"),
        [
            ("cpuHour", None, 31_000),
            ("cpuHour", {"absoluteMicros": 200}, 31_200),
            ("cpuHour", {"factorMilli": 1150}, 35_650),
            ("gpuHour", {"factorMilli": 1200}, 2_160_000),
        ],
    )
    def test_effective_unit_price(
        self, meter: str, margins: dict[str, int] | None, expected: int
    ) -> None:
        rate = BOOK.for_meter(models.MeterName(meter))
        assert usage.Margin.from_dict(margins).unit_price_micros(rate) == expected

    def test_margins_are_read_from_the_offering_spec(self) -> None:
        pricing = usage.UsagePricing.from_offering_spec(self.OFFERING)
        prices = {
            p.meter.value: p.margin.unit_price_micros(BOOK.for_meter(p.meter))
            for p in pricing.meters
        }
        assert prices == {"cpuHour": 31_000, "gpuHour": 2_160_000}

    def test_a_price_driven_below_zero_is_clamped_to_zero(self) -> None:
        assert usage.Margin(absolute_micros=-50_000).apply(31_000) == 0

    def test_a_factor_keeps_the_exact_fraction_of_a_micro(self) -> None:
        assert usage.Margin(factor_milli=1150).apply(1) == Fraction(23, 20)
        assert usage.Margin(factor_milli=1150).unit_price_micros(1) == 1


class TestReadingResourcePricing:
    def test_the_subscription_meter_has_no_usage_calculator(self) -> None:
        spec = {"pricing": {"resourcePricing": [{"name": "subscription"}, {"name": "ramGbHour"}]}}
        pricing = usage.UsagePricing.from_offering_spec(spec)
        assert [p.meter for p in pricing.meters] == [models.MeterName.RAM_GB_HOUR]

    def test_a_meter_listed_twice_keeps_its_first_entry(self) -> None:
        spec = {
            "pricing": {
                "resourcePricing": [
                    {"name": "cpuHour", "margins": {"factorMilli": 1100}},
                    {"name": "cpuHour", "margins": {"factorMilli": 2000}},
                ]
            }
        }
        (only,) = usage.UsagePricing.from_offering_spec(spec).meters
        assert only.margin.factor_milli == 1100

    def test_an_unknown_meter_name_is_refused(self) -> None:
        with pytest.raises(ValueError, match="diskHour"):
            usage.UsagePricing.from_offering_spec(
                {"pricing": {"resourcePricing": [{"name": "diskHour"}]}}
            )

    def test_an_offering_without_resource_pricing_prices_nothing(self) -> None:
        assert not usage.UsagePricing.from_offering_spec({"pricing": {"subscriptionFee": {}}})


class TestMeters:
    BUSY = row(
        cpu_core_usage_average=Decimal("0.5"),
        gpu_usage_average=Decimal("2"),
        ram_byte_usage_average=Decimal(2 * GIB),
        pv_byte_hours=Decimal(4 * GIB),
        network_transfer_bytes=Decimal(GIB),
        network_receive_bytes=Decimal(3 * GIB),
    )

    def test_a_whole_hour_measures_each_signal(self) -> None:
        got = charges([self.BUSY])
        quantities = {name: c.quantity for name, c in got.items()}
        assert quantities == {
            "cpuHour": Fraction(1, 2),
            "gpuHour": Fraction(2),
            "ramGbHour": Fraction(2),
            "pvGbHour": Fraction(4),
            "networkGb": Fraction(4),
        }
        assert got["cpuHour"].amount_micros == 15_500  # 0.5 core-hours × 31000
        assert got["gpuHour"].amount_micros == 3_600_000
        assert got["networkGb"].amount_micros == 360_000

    def test_activation_trims_the_first_hour(self) -> None:
        got = charges([self.BUSY], activated=H10 + dt.timedelta(minutes=15))
        assert got["cpuHour"].quantity == Fraction(3, 8)
        assert got["ramGbHour"].quantity == Fraction(3, 2)
        assert got["pvGbHour"].quantity == Fraction(3)
        assert got["networkGb"].quantity == Fraction(3)

    def test_deactivation_trims_the_last_hour_at_the_raw_instant(self) -> None:
        got = charges([self.BUSY], deactivated=H10 + dt.timedelta(minutes=20))
        assert got["cpuHour"].quantity == Fraction(1, 6)
        assert got["networkGb"].quantity == Fraction(4, 3)

    def test_rows_outside_the_active_interval_produce_no_charge(self) -> None:
        assert charges([self.BUSY], activated=H10 + dt.timedelta(hours=1)) == {}
        assert charges([self.BUSY], activated=H10 - dt.timedelta(hours=2), deactivated=H10) == {}

    def test_a_partial_row_uses_its_own_span_for_time_and_share(self) -> None:
        short = row(
            start=H10 + dt.timedelta(minutes=30),
            end=H10 + dt.timedelta(minutes=50),
            cpu_core_usage_average=Decimal("3"),
            network_receive_bytes=Decimal(GIB),
        )
        got = charges([short], activated=H10 + dt.timedelta(minutes=40))
        assert got["cpuHour"].quantity == Fraction(1, 2)  # 3 cores × 10 minutes
        assert got["networkGb"].quantity == Fraction(1, 2)  # half of the row's 20 minutes

    def test_negative_measurements_bill_nothing(self) -> None:
        got = charges([row(cpu_core_usage_average=Decimal("-0.5"))])
        assert got["cpuHour"].quantity == 0 and got["cpuHour"].amount_micros == 0

    def test_a_row_without_a_rate_for_a_meter_is_dropped_from_it(self) -> None:
        no_gpu = usage.Rates.from_pricebook_spec({"rates": {"cpuHour": "0.031", "gpuHour": ""}})
        got = charges([self.BUSY], rates=no_gpu)
        assert set(got) == {"cpuHour"}

    def test_a_row_without_any_pricebook_is_dropped(self) -> None:
        assert charges([self.BUSY], rates=None) == {}

    def test_no_sources_or_no_meters_means_no_usage(self) -> None:
        assert charges([self.BUSY], selected=()) == {}
        assert charges([self.BUSY], pricing=usage.UsagePricing()) == {}
        assert charges([self.BUSY], selected=(sources.SourceFilter(namespace="other"),)) == {}


class TestChargeRows:
    def test_a_charge_row_is_rounded_once_not_per_allocation_row(self) -> None:
        # Each row: 0.4 micros of CPU at a 1-micro rate; three rows make 1.2 -> 1, not 0.
        tiny = usage.Rates(cpu_hour=1)
        rows = [row(name=f"acme/p{i}", cpu_core_usage_average=Decimal("0.4")) for i in range(3)]
        (charge,) = charges(rows, rates=tiny, pricing=self.cpu_only()).values()
        assert charge.exact_amount == Fraction(6, 5)
        assert charge.amount_micros == 1
        assert charge.rows == 3

    @pytest.mark.parametrize(("usage_cores", "expected"), [("2.5", 2), ("3.5", 4), ("2.5001", 3)])
    def test_ties_round_to_the_even_micro(self, usage_cores: str, expected: int) -> None:
        got = charges(
            [row(cpu_core_usage_average=Decimal(usage_cores))],
            rates=usage.Rates(cpu_hour=1),
            pricing=self.cpu_only(),
        )
        assert got["cpuHour"].amount_micros == expected

    def test_the_margin_applies_to_each_rows_own_rate(self) -> None:
        pricing = usage.UsagePricing(
            (usage.MeterPrice(models.MeterName.CPU_HOUR, usage.Margin(factor_milli=1150)),)
        )
        one = row(name="acme/a", cpu_core_usage_average=Decimal("1"))
        two = row(name="acme/b", cpu_core_usage_average=Decimal("2"))
        result = oracle_usage.usage_charges(
            pricing,
            ACME,
            [
                oracle_usage.PricedRow(one, usage.Rates(cpu_hour=31_000)),
                oracle_usage.PricedRow(two, usage.Rates(cpu_hour=62_000)),
            ],
            usage.ActiveInterval(H10),
        )
        (charge,) = result
        assert charge.amount_micros == 1 * 35_650 + 2 * 71_300
        assert charge.quantity == 3
        assert charge.unit_price_micros() == money.round_half_even(Fraction(178_250, 3))

    def test_charges_come_one_per_hour_and_meter_in_order(self) -> None:
        later = H10 + dt.timedelta(hours=1)
        rows = [
            row(
                hour=later,
                start=later,
                end=later + dt.timedelta(hours=1),
                ram_byte_usage_average=Decimal(GIB),
            ),
            row(cpu_core_usage_average=Decimal("1")),
            row(name="acme/other", cpu_core_usage_average=Decimal("1")),
        ]
        pricing = usage.UsagePricing(
            (
                usage.MeterPrice(models.MeterName.RAM_GB_HOUR),
                usage.MeterPrice(models.MeterName.CPU_HOUR),
            )
        )
        result = oracle_usage.usage_charges(
            pricing,
            ACME,
            [oracle_usage.PricedRow(r, BOOK) for r in rows],
            usage.ActiveInterval(H10),
        )
        assert [(c.hour, c.source) for c in result] == [
            (H10, "cpuHour"),
            (H10, "ramGbHour"),
            (later, "cpuHour"),
            (later, "ramGbHour"),
        ]
        # A rated row with nothing measured still counts: the charge row exists, at 0.
        assert [c.rows for c in result] == [2, 2, 1, 1]
        assert [c.amount_micros for c in result] == [62_000, 0, 0, 4_000]

    def test_quantities_are_stored_as_rounded_decimals(self) -> None:
        got = charges(
            [row(cpu_core_usage_average=Decimal("1"))], activated=H10 + dt.timedelta(seconds=1)
        )
        assert got["cpuHour"].quantity == Fraction(3599, 3600)
        assert got["cpuHour"].quantity_decimal(6) == Decimal("0.999722")

    @staticmethod
    def cpu_only() -> usage.UsagePricing:
        return usage.UsagePricing((usage.MeterPrice(models.MeterName.CPU_HOUR),))


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(
            st.decimals(min_value=-1, max_value=10**4, places=5),
            st.integers(0, 3600),
            st.integers(0, 3600),
        ),
        max_size=8,
    ),
    st.integers(0, 3600),
    st.integers(1, 10**7),
    st.integers(0, 3000),
)
def test_usage_charges_are_never_negative_and_round_the_exact_sum_once(
    measured: list[tuple[Decimal, int, int]], activated_s: int, rate: int, factor: int
) -> None:
    rows = []
    for i, (cores, a, b) in enumerate(measured):
        lo, hi = sorted((a, b))
        rows.append(
            row(
                name=f"acme/p{i}",
                start=H10 + dt.timedelta(seconds=lo),
                end=H10 + dt.timedelta(seconds=hi),
                cpu_core_usage_average=cores,
            )
        )
    pricing = usage.UsagePricing(
        (usage.MeterPrice(models.MeterName.CPU_HOUR, usage.Margin(factor_milli=factor)),)
    )
    result = oracle_usage.usage_charges(
        pricing,
        ACME,
        [oracle_usage.PricedRow(r, usage.Rates(cpu_hour=rate)) for r in rows],
        usage.ActiveInterval(H10 + dt.timedelta(seconds=activated_s)),
    )
    expected = Fraction(0)
    for r in rows:
        begin = max(r.start, H10 + dt.timedelta(seconds=activated_s))
        covered = max(0, (r.end - begin) // dt.timedelta(seconds=1))
        used = max(Fraction(r.cpu_core_usage_average), Fraction(0))
        expected += used * Fraction(covered, 3600) * rate * Fraction(factor, 1000)
    total_exact = sum((c.exact_amount for c in result), Fraction(0))
    assert total_exact == expected
    for c in result:
        assert c.amount_micros >= 0 and c.quantity >= 0
        assert c.amount_micros == money.round_half_even(c.exact_amount)


# ---------------------------------------------------------------- real OpenCost captures


def rows_from_capture(path: pathlib.Path, aggregation: str) -> list[allocation.AllocationRow]:
    """Allocation rows from an OpenCost response, numbers parsed exactly as Decimal."""
    body = json.loads(path.read_text(), parse_float=Decimal)
    out = []
    for step in body["data"]:
        for name, item in step.items():
            props = item["properties"]
            start = dt.datetime.fromisoformat(item["start"])
            gpu = item.get("gpuAllocation") or {}

            def number(value: Any) -> Decimal:
                return Decimal(0) if value is None else Decimal(value)

            out.append(
                allocation.AllocationRow(
                    cluster=props.get("cluster", ""),
                    name=name,
                    namespace=props.get("namespace", ""),
                    aggregation=aggregation,
                    hour=ticks.floor_hour(start),
                    start=start,
                    end=dt.datetime.fromisoformat(item["end"]),
                    minutes=number(item["minutes"]),
                    controller_kind=props.get("controllerKind", ""),
                    controller_name=props.get("controller", ""),
                    pod=props.get("pod", ""),
                    cpu_core_usage_average=number(item["cpuCoreUsageAverage"]),
                    cpu_core_hours=number(item["cpuCoreHours"]),
                    gpu_usage_average=number(gpu.get("gpuUsageAverage")),
                    ram_byte_usage_average=number(item["ramByteUsageAverage"]),
                    ram_byte_hours=number(item["ramByteHours"]),
                    pv_byte_hours=number(item["pvByteHours"]),
                    network_transfer_bytes=number(item["networkTransferBytes"]),
                    network_receive_bytes=number(item["networkReceiveBytes"]),
                )
            )
    return out


def reference_amount(quantity: Decimal, rate: str) -> int:
    """The same charge computed separately with wide Decimal arithmetic."""
    with localcontext() as ctx:
        ctx.prec = 80
        micros = quantity * Decimal(rate) * 1_000_000
        return int(micros.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


class TestRealCaptures:
    @pytest.fixture
    def controller_rows(self) -> list[allocation.AllocationRow]:
        return rows_from_capture(
            find_captures() / "allocation-controller-60m.json", "namespace,controller"
        )

    def test_one_deployment_is_priced_from_its_measured_usage(
        self, controller_rows: list[allocation.AllocationRow]
    ) -> None:
        server = [
            sources.SourceFilter("Deployment", "prometheus-server", "prometheus-system"),
        ]
        (picked,) = oracle_usage.select(server, controller_rows)
        seconds = (picked.end - picked.start) // dt.timedelta(seconds=1)
        result = oracle_usage.usage_charges(
            EVERYTHING,
            server,
            [oracle_usage.PricedRow(r, BOOK) for r in controller_rows],
            usage.ActiveInterval(picked.start - dt.timedelta(hours=1)),
        )
        got = {c.source: c.amount_micros for c in result}
        with localcontext() as ctx:
            ctx.prec = 80
            hours = Decimal(seconds) / 3600
            assert got["cpuHour"] == reference_amount(
                picked.cpu_core_usage_average * hours, "0.031"
            )
            assert got["ramGbHour"] == reference_amount(
                picked.ram_byte_usage_average * hours / GIB, "0.004"
            )
            assert got["pvGbHour"] == reference_amount(picked.pv_byte_hours / GIB, "0.00012")
        assert got["gpuHour"] == 0 and got["networkGb"] == 0

    def test_billed_core_hours_never_exceed_opencosts_allocated_core_hours(
        self, controller_rows: list[allocation.AllocationRow]
    ) -> None:
        # OpenCost allocates max(request, usage); the operator bills usage, so never more
        # (allowing for OpenCost's five-decimal rounding of cpuCoreHours).
        everything = [sources.SourceFilter(namespace=r.namespace) for r in controller_rows]
        for r in controller_rows:
            share = oracle_usage.RowShare.of(r, usage.ActiveInterval(r.start))
            assert share is not None
            billed = oracle_usage.meter_quantity(models.MeterName.CPU_HOUR, r, share)
            assert billed <= Fraction(r.cpu_core_hours) + Fraction(1, 10**5)
        assert oracle_usage.select(everything, controller_rows) == controller_rows

    def test_a_mid_row_activation_bills_the_covered_share(
        self, controller_rows: list[allocation.AllocationRow]
    ) -> None:
        fixed = [sources.SourceFilter("Deployment", "fixed", "oc-test")]
        (picked,) = oracle_usage.select(fixed, controller_rows)
        pricing = usage.UsagePricing((usage.MeterPrice(models.MeterName.RAM_GB_HOUR),))
        whole = oracle_usage.usage_charges(
            pricing,
            fixed,
            [oracle_usage.PricedRow(picked, BOOK)],
            usage.ActiveInterval(picked.start),
        )
        later = oracle_usage.usage_charges(
            pricing,
            fixed,
            [oracle_usage.PricedRow(picked, BOOK)],
            usage.ActiveInterval(picked.start + dt.timedelta(seconds=60)),
        )
        span = (picked.end - picked.start) // dt.timedelta(seconds=1)
        assert later[0].quantity == whole[0].quantity * Fraction(span - 60, span)

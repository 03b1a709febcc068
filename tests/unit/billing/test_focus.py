"""FOCUS 1.2 rows from ledger charges: every mandatory column, typed as the spec says."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from decimal import Decimal

import hypothesis.strategies as st
import pytest
from hypothesis import given
from tests.oracle import focus_columns

from finops.api import models
from finops.billing import focus, periods

H = dt.datetime(2026, 12, 31, 23, tzinfo=dt.UTC)

# The mandatory columns of FOCUS 1.2 (specification/columns/*.md of FOCUS_Spec): data type,
# whether the spec allows nulls, and the allowed values where the column lists them. Written
# out here, independently of the module, so a drift on either side fails.
MANDATORY_1_2: dict[str, tuple[str, bool, set[str] | None]] = {
    "BilledCost": ("Decimal", False, None),
    "BillingAccountId": ("String", False, None),
    "BillingAccountName": ("String", True, None),
    "BillingCurrency": ("String", False, None),
    "BillingPeriodEnd": ("Date/Time", False, None),
    "BillingPeriodStart": ("Date/Time", False, None),
    "ChargeCategory": ("String", False, {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}),
    "ChargeClass": ("String", True, {"Correction"}),
    "ChargeDescription": ("String", True, None),
    "ChargePeriodEnd": ("Date/Time", False, None),
    "ChargePeriodStart": ("Date/Time", False, None),
    "ContractedCost": ("Decimal", False, None),
    "EffectiveCost": ("Decimal", False, None),
    "InvoiceIssuerName": ("String", False, None),
    "ListCost": ("Decimal", False, None),
    "PricingQuantity": ("Decimal", True, None),
    "PricingUnit": ("String", True, None),
    "ProviderName": ("String", False, None),
    "PublisherName": ("String", False, None),
    "ServiceCategory": (
        "String",
        False,
        {
            "AI and Machine Learning",
            "Analytics",
            "Business Applications",
            "Compute",
            "Databases",
            "Developer Tools",
            "Multicloud",
            "Identity",
            "Integration",
            "Internet of Things",
            "Management and Governance",
            "Media",
            "Migration",
            "Mobile",
            "Networking",
            "Security",
            "Storage",
            "Web",
            "Other",
        },
    ),
    "ServiceName": ("String", False, None),
}
# Columns this export adds beyond the mandatory set, with the spec's level and allowed values.
OPTIONAL_1_2 = {
    "ChargeFrequency": ("Recommended", {"One-Time", "Recurring", "Usage-Based"}),
    "ConsumedQuantity": ("Conditional", None),
    "ConsumedUnit": ("Conditional", None),
    "ResourceId": ("Conditional", None),
    "ResourceName": ("Conditional", None),
    "ResourceType": ("Conditional", None),
    "SubAccountId": ("Conditional", None),
    "SubAccountName": ("Conditional", None),
    "Tags": ("Conditional", None),
    "ContractedUnitPrice": ("Conditional", None),
    "InvoiceId": ("Recommended", None),
    "ListUnitPrice": ("Conditional", None),
    "ServiceSubcategory": ("Recommended", None),
    "SkuId": ("Conditional", None),
    "SkuMeter": ("Conditional", None),
    "SkuPriceDetails": ("Conditional", None),
    "SkuPriceId": ("Conditional", None),
}
DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
CURRENCY = re.compile(r"^[A-Z]{3}$")


def charge(source: str = "cpuHour", **extra: object) -> focus.LedgerCharge:
    fields: dict[str, object] = {
        "cluster": "prod-eu",
        "namespace": "team-a",
        "subscription": "web",
        "subscription_uid": "uid-1",
        "offering": "platform-base",
        "hour": H,
        "source": source,
        "quantity": Decimal("0.123456789012"),
        "unit_price_micros": 31_000,
        "amount_micros": 3_827,
        "currency": "EUR",
        "finalized": True,
        "labels": {"stakater.com/tenant": "acme", "env": "prod"},
    }
    fields.update(extra)
    return focus.LedgerCharge(**fields)  # type: ignore[arg-type]


def fee() -> focus.LedgerCharge:
    return charge(
        "subscription", quantity=Decimal(1), unit_price_micros=40_000_000, amount_micros=40_000_000
    )


def test_every_mandatory_column_is_there_with_the_spec_type_nullability_and_values() -> None:
    for name, (data_type, nullable, allowed) in MANDATORY_1_2.items():
        column = focus.BY_NAME[name]
        assert column.level is focus.Level.MANDATORY, name
        assert column.data_type == data_type, name
        assert column.nullable is nullable, name
        assert set(column.allowed) == (allowed or set()), name
    for name, (level, allowed) in OPTIONAL_1_2.items():
        assert focus.BY_NAME[name].level == level, name
        assert set(focus.BY_NAME[name].allowed) == (allowed or set()), name
    spec_names = set(MANDATORY_1_2) | set(OPTIONAL_1_2)
    assert {n for n in focus.NAMES if not n.startswith("x_")} == spec_names
    assert focus.FOCUS_VERSION == "1.2"


@pytest.mark.parametrize("make", [fee, charge])
def test_rows_break_no_rule_of_the_column_table(make: object) -> None:
    row = focus.row(make())  # type: ignore[operator]
    assert focus_columns.problems(row) == []


def test_a_fee_is_a_recurring_purchase_and_a_meter_a_usage_based_usage() -> None:
    paid, used = focus.row(fee()), focus.row(charge())
    assert (paid["ChargeCategory"], paid["ChargeFrequency"]) == ("Purchase", "Recurring")
    assert (used["ChargeCategory"], used["ChargeFrequency"]) == ("Usage", "Usage-Based")
    # ConsumedQuantity/Unit describe measured usage only; a purchase leaves them null.
    assert paid["ConsumedQuantity"] is None and paid["ConsumedUnit"] is None
    assert used["ConsumedQuantity"] == Decimal("0.123456789012")
    assert used["ConsumedUnit"] == used["PricingUnit"] == "Core-Hours"
    assert paid["PricingQuantity"] == Decimal(1)


def test_money_is_the_exact_micros_and_list_cost_the_exact_product() -> None:
    row = focus.row(charge(amount_micros=3_827))
    for name in ("BilledCost", "EffectiveCost"):
        assert row[name] == Decimal("0.003827")
        assert str(row[name]) == "0.003827"
    assert row["x_UnitPrice"] == Decimal("0.031000")
    # A row whose PriceBook was not recorded is listed at its stored unit price.
    assert row["ListUnitPrice"] == row["ContractedUnitPrice"] == Decimal("0.031000")
    assert row["ListCost"] == Decimal("0.031000") * Decimal("0.123456789012")
    assert abs(row["ListCost"] - row["BilledCost"]) < Decimal("0.000001")  # type: ignore[operator]
    assert focus.units(2**63 - 1) == Decimal("9223372036854.775807")
    assert focus.text(focus.units(0)) == "0.000000"


def test_periods_are_the_hour_and_its_utc_month_and_the_names_come_from_the_ledger() -> None:
    row = focus.row(charge(hour=H.astimezone(dt.timezone(dt.timedelta(hours=2)))))
    assert row["ChargePeriodStart"] == H
    assert row["ChargePeriodEnd"] == dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    assert row["BillingPeriodStart"] == dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    assert row["BillingPeriodEnd"] == dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
    assert row["ServiceName"] == "platform-base"
    assert (row["SubAccountId"], row["SubAccountName"]) == ("team-a", "team-a")
    assert (row["ResourceId"], row["ResourceName"]) == ("uid-1", "web")
    assert row["BillingAccountId"] == "prod-eu"
    assert row["Tags"] == {"env": "prod", "stakater.com/tenant": "acme"}


def test_a_charge_without_currency_is_billed_in_iso_4217_no_currency() -> None:
    assert focus.row(charge(currency=""))["BillingCurrency"] == "XXX"
    assert focus.row(charge(labels={}))["Tags"] is None


def test_tags_merge_subscription_and_namespace_labels_the_namespace_wins_a_shared_key() -> None:
    own = {"cost-center": "cc-42", "env": "dev", "stakater.com/tenant": "globex"}
    tags = focus.tags(charge(subscription_labels=own))
    # The namespace keeps env and the tenant: a Subscription label cannot re-attribute cost.
    assert tags == {"cost-center": "cc-42", "env": "prod", "stakater.com/tenant": "acme"}
    assert list(tags) == sorted(tags)
    assert focus.row(charge(subscription_labels=own))["Tags"] == tags
    alone = focus.row(charge(labels={}, subscription_labels={"app": "web", "note": ""}))
    assert alone["Tags"] == {"app": "web", "note": ""}
    assert focus_columns.problems(alone) == []
    assert focus.text(alone["Tags"]) == '{"app":"web","note":""}'


def test_naive_hours_and_unknown_sources_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        focus.row(charge(hour=H.replace(tzinfo=None)))
    with pytest.raises(ValueError, match="unknown charge source"):
        focus.row(charge("diskIops"))


def test_problems_names_what_breaks_the_table() -> None:
    row = focus.row(charge())
    broken = {**row, "ChargeCategory": "Discount", "BilledCost": None, "ListCost": "1.0"}
    del broken["Tags"]
    assert sorted(focus_columns.problems(broken)) == [
        "BilledCost: null, but the column does not allow nulls",
        "ChargeCategory: 'Discount' is not an allowed value",
        "ListCost: str, not Decimal",
        "Tags: missing",
    ]


def test_the_csv_opens_with_the_csv_module_and_every_cell_has_its_type() -> None:
    text = "".join(focus.csv_lines(focus.row(c) for c in (fee(), charge(), charge(labels={}))))
    reader = csv.DictReader(io.StringIO(text, newline=""))
    assert tuple(reader.fieldnames or ()) == focus.NAMES
    rows = list(reader)
    assert len(rows) == 3
    for row in rows:
        for name, (data_type, nullable, allowed) in MANDATORY_1_2.items():
            cell = row[name]
            if cell == "":
                assert nullable, name
                continue
            if data_type == "Decimal":
                Decimal(cell)
                assert re.fullmatch(r"-?\d+(\.\d+)?", cell), (name, cell)
            elif data_type == "Date/Time":
                assert DATETIME.match(cell), (name, cell)
            if allowed is not None:
                assert cell in allowed, (name, cell)
        assert CURRENCY.match(row["BillingCurrency"])
    assert json.loads(rows[0]["Tags"]) == {"env": "prod", "stakater.com/tenant": "acme"}
    assert rows[2]["Tags"] == ""
    assert sum(Decimal(r["BilledCost"]) for r in rows) == Decimal("40.007654")


def test_json_chunks_are_one_array_with_exact_decimal_strings() -> None:
    body = json.loads("".join(focus.json_chunks(focus.row(c) for c in (fee(), charge()))))
    assert [r["BilledCost"] for r in body] == ["40.000000", "0.003827"]
    assert body[1]["Tags"] == {"env": "prod", "stakater.com/tenant": "acme"}
    assert body[0]["ConsumedQuantity"] is None
    assert json.loads("".join(focus.json_chunks([]))) == []


@given(st.lists(st.integers(min_value=0, max_value=2**62), max_size=50))
def test_billed_cost_sums_to_the_ledger_micros_exactly(amounts: list[int]) -> None:
    rows = [focus.row(charge(amount_micros=a)) for a in amounts]
    total = sum((r["BilledCost"] for r in rows), Decimal(0))
    assert isinstance(total, Decimal)
    assert total.scaleb(6) == sum(amounts)


DAILY = {
    "pricing": {
        "subscriptionFee": {
            "priceMicros": 12_000_000,
            "tickAlignment": "DayBoundary",
            "period": "1",
        },
        "resourcePricing": [
            {"name": "cpuHour", "margins": {"factorMilli": 1200}},
            {"name": "ramGbHour", "margins": {"absoluteMicros": 500}},
        ],
    }
}
BOOK = focus.PriceList("p", "onprem", "ab" * 32, {"cpuHour": 31_000, "ramGbHour": 4_000})
DAY = (dt.datetime(2026, 12, 31, tzinfo=dt.UTC), dt.datetime(2027, 1, 1, tzinfo=dt.UTC))


def priced(source: str = "cpuHour", **extra: object) -> focus.LedgerCharge:
    fields: dict[str, object] = {
        "offering_spec": DAILY,
        "offering_namespace": "catalog",
        "offering_uid": "off-uid",
        "price_list": BOOK,
    }
    fields.update(extra)
    return charge(source, **fields)


def test_a_fee_row_pays_for_its_period_in_the_periods_unit() -> None:
    row = focus.row(
        priced(
            "subscription",
            quantity=Decimal(1),
            unit_price_micros=12_000_000,
            amount_micros=12_000_000,
            covers=DAY,
            price_list=None,
        )
    )
    assert (row["ChargePeriodStart"], row["ChargePeriodEnd"]) == DAY
    assert (row["PricingUnit"], row["PricingQuantity"]) == ("Day", Decimal(1))
    assert row["ListUnitPrice"] == row["ContractedUnitPrice"] == Decimal("12.000000")
    assert row["ListCost"] == row["BilledCost"] == Decimal("12.000000")
    assert row["SkuMeter"] == "Subscription Fee"
    assert row["SkuPriceDetails"] == {"x_Period": "1", "x_TickAlignment": "DayBoundary"}


def test_a_prorated_opening_tick_is_a_share_of_a_period_priced_exactly() -> None:
    row = focus.row(
        priced(
            "subscription",
            quantity=Decimal(1),
            unit_price_micros=12_000_000,
            amount_micros=1_846_111,
            covers=DAY,
            price_list=None,
        )
    )
    assert row["PricingQuantity"] == Decimal("0.153842583333")
    assert row["ListCost"] == Decimal("12.000000") * Decimal("0.153842583333")
    assert abs(row["ListCost"] - row["BilledCost"]) < Decimal("0.000001")  # type: ignore[operator]


@pytest.mark.parametrize(
    ("alignment", "period", "unit"),
    [
        ("HourBoundary", "1", "Hour"),
        ("HourBoundary", "6", "6 Hours"),
        ("DayBoundary", "7", "7 Days"),
        ("MonthBoundary", "3", "3 Months"),
        ("ActivatedAt", "90m", "90 Minutes"),
        ("ActivatedAt", "1h", "Hour"),
        ("ActivatedAt", "3600s", "3600 Seconds"),
    ],
)
def test_fee_units_name_the_period(alignment: str, period: str, unit: str) -> None:
    spec = focus.fees.FeeSpec(1, models.TickAlignment(alignment), period)
    assert focus.fee_unit(spec) == unit


def test_usage_lists_the_pricebook_rate_and_contracts_the_margined_one() -> None:
    cpu = focus.row(priced(quantity=Decimal("2.5"), unit_price_micros=37_200, amount_micros=93_000))
    assert cpu["ListUnitPrice"] == Decimal("0.031000")
    assert cpu["ContractedUnitPrice"] == Decimal("0.037200000")
    assert cpu["ListCost"] == Decimal("0.0775")
    assert cpu["ContractedCost"] == cpu["BilledCost"] == Decimal("0.093")
    ram = focus.row(priced("ramGbHour", quantity=Decimal(2), unit_price_micros=4_500))
    assert ram["ContractedUnitPrice"] == Decimal("0.004500000")
    assert cpu["SkuId"] == "catalog/platform-base/cpuHour"
    assert cpu["SkuPriceId"] == "catalog/platform-base/cpuHour@off-uid/" + "ab" * 6
    assert cpu["SkuPriceDetails"] == {
        "x_MarginFactorMilli": "1200",
        "x_PriceBook": "p/onprem",
        "x_PriceBookRatesVersion": "ab" * 6,
    }


def test_a_correction_is_billed_in_the_period_it_is_booked_in() -> None:
    march = periods.Period(
        dt.datetime(2026, 12, 1, tzinfo=dt.UTC), dt.datetime(2027, 1, 1, tzinfo=dt.UTC), "2026-12"
    )
    index = periods.PeriodIndex(periods.Calendar(), (march,))
    booking = focus.Booking(march.end, march.start)
    row = focus.row(
        priced(amount_micros=-3_827, quantity=Decimal("-0.1"), booking=booking), index=index
    )
    assert row["ChargeClass"] == "Correction"
    assert row["BillingPeriodStart"] == march.end
    assert row["ChargePeriodStart"] == H
    assert row["BilledCost"] == Decimal("-0.003827")
    assert row["x_CorrectedInvoiceId"] == periods.invoice_id(
        "prod-eu", "team-a", march.start, "2026-12"
    )
    assert str(row["InvoiceId"]).startswith("INV-2027-01-")
    assert focus_columns.problems(row) == []

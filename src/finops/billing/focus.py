"""Ledger charges as FinOps Foundation FOCUS 1.2 rows, for tools that read billing data.

Why FOCUS: spreadsheets, BI tools and FinOps platforms already read that column set, so the
ledger can be handed over without a mapping on the reader's side. One charge row (Subscription
x hour x source) or one correction row becomes one FOCUS row. BilledCost and EffectiveCost are
the row's integer micros as an exact six-place Decimal. The list price is the PriceBook rate
(a fee's `priceMicros`), the contracted price the Offering's margined rate, and ListCost and
ContractedCost are those prices times PricingQuantity, exactly (no float, no rounding); they
differ from BilledCost only by the one rounding of the charge to whole micros.

The column table below states, per column, the FOCUS data type, feature level, whether the
spec lets it be null, and the values it allows, as written in the 1.2 column definitions of
the FOCUS_Spec repository; custom columns carry the spec's `x_` prefix. Pure: no I/O.

Tags are Kubernetes labels, one user-defined tag scheme set at two levels: the namespace (the
row's SubAccount) and the Subscription (its Resource), both as they were when the charge was
priced. FOCUS wants one finalized value per key, so `tags` merges them and, for a key on both,
keeps the namespace's value: namespace labels are the platform's and decide the tenant the
ledger rolls a charge up under, so whoever may edit a Subscription cannot move its cost to
another tenant or cost centre through Tags. Keys are passed on unprefixed and unaltered (the
spec forbids altering keys of a provider's only user-defined scheme); label values are always
strings, so no key needs the spec's `true` for valueless tags.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import decimal
import enum
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import cast

from finops.api import bodies, models
from finops.billing import fees, money, periods, ticks, usage

FOCUS_VERSION = "1.2"
DEFAULT_PROVIDER = "Kubernetes platform"
NO_CURRENCY = "XXX"
"""ISO 4217's code for "no currency": a charge whose currency nothing named (a fee with no
PriceBook in sight) still needs a valid BillingCurrency."""
FEE_SOURCE = "subscription"
SERVICE_CATEGORY = "Compute"
SERVICE_SUBCATEGORY = "Containers"
CORRECTION = "Correction"
QUANTITY_PLACES = 12
_EXACT = decimal.Context(prec=200)
"""Products of exact decimals are computed in this context: wide enough never to round."""


class DataType(enum.StrEnum):
    DECIMAL = "Decimal"
    STRING = "String"
    DATETIME = "Date/Time"
    JSON = "JSON"


class Level(enum.StrEnum):
    MANDATORY = "Mandatory"
    RECOMMENDED = "Recommended"
    CONDITIONAL = "Conditional"
    CUSTOM = "Custom"


@dataclasses.dataclass(frozen=True)
class Column:
    """One FOCUS column: its type, feature level, nullability and allowed values (if listed)."""

    name: str
    data_type: DataType
    level: Level
    nullable: bool
    allowed: tuple[str, ...] = ()


CHARGE_CATEGORIES = ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
CHARGE_CLASSES = (CORRECTION,)
CHARGE_FREQUENCIES = ("One-Time", "Recurring", "Usage-Based")
SERVICE_CATEGORIES = (
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
)

_D, _S, _T, _J = DataType.DECIMAL, DataType.STRING, DataType.DATETIME, DataType.JSON
_M, _R, _C, _X = Level.MANDATORY, Level.RECOMMENDED, Level.CONDITIONAL, Level.CUSTOM

COLUMNS: tuple[Column, ...] = (
    Column("BilledCost", _D, _M, False),
    Column("BillingAccountId", _S, _M, False),
    Column("BillingAccountName", _S, _M, True),
    Column("BillingCurrency", _S, _M, False),
    Column("BillingPeriodEnd", _T, _M, False),
    Column("BillingPeriodStart", _T, _M, False),
    Column("ChargeCategory", _S, _M, False, CHARGE_CATEGORIES),
    Column("ChargeClass", _S, _M, True, CHARGE_CLASSES),
    Column("ChargeDescription", _S, _M, True),
    Column("ChargeFrequency", _S, _R, False, CHARGE_FREQUENCIES),
    Column("ChargePeriodEnd", _T, _M, False),
    Column("ChargePeriodStart", _T, _M, False),
    Column("ConsumedQuantity", _D, _C, True),
    Column("ConsumedUnit", _S, _C, True),
    Column("ContractedCost", _D, _M, False),
    Column("ContractedUnitPrice", _D, _C, True),
    Column("EffectiveCost", _D, _M, False),
    Column("InvoiceId", _S, _R, True),
    Column("InvoiceIssuerName", _S, _M, False),
    Column("ListCost", _D, _M, False),
    Column("ListUnitPrice", _D, _C, True),
    Column("PricingQuantity", _D, _M, True),
    Column("PricingUnit", _S, _M, True),
    Column("ProviderName", _S, _M, False),
    Column("PublisherName", _S, _M, False),
    Column("ResourceId", _S, _C, True),
    Column("ResourceName", _S, _C, True),
    Column("ResourceType", _S, _C, True),
    Column("ServiceCategory", _S, _M, False, SERVICE_CATEGORIES),
    Column("ServiceName", _S, _M, False),
    Column("ServiceSubcategory", _S, _R, False),
    Column("SkuId", _S, _C, True),
    Column("SkuMeter", _S, _C, True),
    Column("SkuPriceDetails", _J, _C, True),
    Column("SkuPriceId", _S, _C, True),
    Column("SubAccountId", _S, _C, True),
    Column("SubAccountName", _S, _C, True),
    Column("Tags", _J, _C, True),
    Column("x_ChargeSource", _S, _X, False),
    Column("x_CorrectedInvoiceId", _S, _X, True),
    Column("x_Finalized", _S, _X, False, ("true", "false")),
    Column("x_UnitPrice", _D, _X, False),
)
NAMES = tuple(c.name for c in COLUMNS)
BY_NAME = {c.name: c for c in COLUMNS}
_OBJECTS = frozenset(c.name for c in COLUMNS if c.data_type is DataType.JSON)

# How each source is measured and priced (UnitFormat style); quantities are 2^30-byte GiB.
# A fee's pricing unit is its period (`fee_unit`).
UNITS = {
    FEE_SOURCE: "Periods",
    "cpuHour": "Core-Hours",
    "gpuHour": "GPU-Hours",
    "ramGbHour": "GiB-Hours",
    "pvGbHour": "GiB-Hours",
    "networkGb": "GiB",
}
METERS = {
    FEE_SOURCE: "Subscription Fee",
    "cpuHour": "CPU",
    "gpuHour": "GPU",
    "ramGbHour": "Memory",
    "pvGbHour": "Persistent Volume",
    "networkGb": "Network",
}
"""SkuMeter: what each source measures."""

Value = Decimal | str | dt.datetime | dict[str, str] | None


@dataclasses.dataclass(frozen=True)
class PriceList:
    """The PriceBook rates a usage row's hour was collected under (one `pricebooks` row)."""

    namespace: str
    name: str
    digest: str
    rates: Mapping[str, int]
    """Micros per `spec.rates` field (`cpuHour`, `networkGiB`, ...)."""


@dataclasses.dataclass(frozen=True)
class Booking:
    """Where a correction is booked: the start of the period it is booked in and of the
    closed period whose hour it corrects."""

    booked_in: dt.datetime
    corrects: dt.datetime


@dataclasses.dataclass(frozen=True)
class LedgerCharge:
    """One `subscription_charges` row (or `charge_corrections` row, with `booking`) with the
    Subscription version and the Offering that priced it."""

    cluster: str
    namespace: str
    subscription: str
    subscription_uid: str
    offering: str
    hour: dt.datetime
    source: str
    quantity: Decimal
    unit_price_micros: int
    amount_micros: int
    currency: str
    finalized: bool
    labels: Mapping[str, str]
    """The namespace's labels under that version."""
    subscription_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The Subscription's own labels under that version."""
    offering_namespace: str = ""
    offering_uid: str = ""
    offering_spec: bodies.OfferingSpecBody = dataclasses.field(
        default_factory=lambda: cast(bodies.OfferingSpecBody, {})
    )
    """The spec of the Offering version that priced the row (fee terms, margins)."""
    price_list: PriceList | None = None
    covers: tuple[dt.datetime, dt.datetime] | None = None
    """A fee row's service period (None for usage, and for rows written before it was kept)."""
    booking: Booking | None = None
    """Set on a correction."""

    @property
    def is_fee(self) -> bool:
        return self.source == FEE_SOURCE


def units(micros: int) -> Decimal:
    """Integer micros as an exact Decimal with six places: 40_000_000 -> Decimal('40.000000')."""
    digits = tuple(int(c) for c in str(abs(micros)))
    return Decimal((1 if micros < 0 else 0, digits, -money.DECIMALS))


def tags(charge: LedgerCharge) -> dict[str, str] | None:
    """The Tags object: the Subscription's labels overlaid by its namespace's (the namespace
    wins a shared key, see the module docstring), keys sorted; None when there are none."""
    return merged_tags(charge.labels, charge.subscription_labels)


def merged_tags(
    namespace_labels: Mapping[str, str], subscription_labels: Mapping[str, str]
) -> dict[str, str] | None:
    """`tags` of one Subscription version, from its two label sets."""
    merged = {**subscription_labels, **namespace_labels}
    return dict(sorted(merged.items())) or None


_PERIOD_UNITS = {
    models.TickAlignment.HOUR_BOUNDARY: "Hour",
    models.TickAlignment.DAY_BOUNDARY: "Day",
    models.TickAlignment.MONTH_BOUNDARY: "Month",
}
_DURATION_UNITS = {"h": "Hour", "m": "Minute", "s": "Second"}


def fee_terms(charge: LedgerCharge) -> fees.FeeSpec | None:
    """The fee of the Offering version that priced the row (None when it has none)."""
    try:
        return fees.FeeSpec.from_offering_spec(charge.offering_spec)
    except fees.FeeSpecError:
        return None


def fee_unit(spec: fees.FeeSpec) -> str:
    """A fee's period as a FOCUS unit: `Hour`, `Day`, `Month`, `3 Months`, `90 Minutes`."""
    if spec.tick_alignment is models.TickAlignment.ACTIVATED_AT:
        count, unit = int(spec.period[:-1]), _DURATION_UNITS[spec.period[-1]]
    else:
        count, unit = int(spec.period), _PERIOD_UNITS[spec.tick_alignment]
    return unit if count == 1 else f"{count} {unit}s"


def _fee_quantity(charge: LedgerCharge, spec: fees.FeeSpec | None) -> Decimal:
    """Periods paid for: whole ticks, or the prorated share of one (its micros over the
    price, twelve places), so that price x quantity is the list cost."""
    price = charge.unit_price_micros if spec is None else spec.price_micros
    if price == 0 or charge.amount_micros == int(charge.quantity) * price:
        return charge.quantity
    return money.to_decimal(Fraction(charge.amount_micros, price), QUANTITY_PLACES)


def _usage_prices(charge: LedgerCharge, book: PriceList) -> tuple[Decimal, Decimal]:
    """(list, contracted) unit price of a usage row: the PriceBook rate of its hour, and that
    rate with the Offering's margin for the meter."""
    meter = models.MeterName(charge.source)
    rate = usage.Rates.from_micros(book.rates).for_meter(meter)
    margins = {m.meter: m.margin for m in _pricing(charge).meters}
    margined = margins.get(meter, usage.Margin()).apply(rate)
    return units(rate), money.to_decimal(margined * Fraction(1, money.MICROS_PER_UNIT), 9)


def _pricing(charge: LedgerCharge) -> usage.UsagePricing:
    try:
        return usage.UsagePricing.from_offering_spec(charge.offering_spec)
    except ValueError:
        return usage.UsagePricing()


@dataclasses.dataclass(frozen=True)
class RowPricing:
    """A row's quantity, unit, unit prices and the exact costs they make."""

    quantity: Decimal
    unit: str
    list_price: Decimal
    contracted_price: Decimal

    @property
    def list_cost(self) -> Decimal:
        return _EXACT.multiply(self.list_price, self.quantity)

    @property
    def contracted_cost(self) -> Decimal:
        return _EXACT.multiply(self.contracted_price, self.quantity)


@dataclasses.dataclass(frozen=True)
class _Listing:
    """What a row's Offering version, PriceBook and source decide of its pricing."""

    unit: str
    list_price: Decimal | None
    """None: the row's own unit price stands (a fee with no terms, usage with no rates)."""
    contracted_price: Decimal | None
    fee: fees.FeeSpec | None


def _listing(charge: LedgerCharge) -> _Listing:
    """The one decision of which unit and prices a row lists, for the row builder and for the
    columns the CSV export works out once per key."""
    if not charge.is_fee:
        if charge.price_list is None:
            return _Listing(UNITS[charge.source], None, None, None)
        listed, contracted = _usage_prices(charge, charge.price_list)
        return _Listing(UNITS[charge.source], listed, contracted, None)
    spec = fee_terms(charge)
    if spec is None:
        return _Listing(UNITS[FEE_SOURCE], None, None, None)
    price = units(spec.price_micros)
    return _Listing(fee_unit(spec), price, price, spec)


def pricing(charge: LedgerCharge) -> RowPricing:
    """How the row was priced, in FOCUS terms."""
    listing, stored = _listing(charge), units(charge.unit_price_micros)
    quantity = _fee_quantity(charge, listing.fee) if charge.is_fee else charge.quantity
    return RowPricing(
        quantity,
        listing.unit,
        stored if listing.list_price is None else listing.list_price,
        stored if listing.contracted_price is None else listing.contracted_price,
    )


def sku(charge: LedgerCharge) -> tuple[str, str, dict[str, str] | None]:
    """(SkuId, SkuPriceId, SkuPriceDetails): the SKU is the Offering's product for this
    source; its price is that Offering version's (and, for usage, the PriceBook rates')."""
    sku_id = f"{charge.offering_namespace}/{charge.offering}/{charge.source}"
    price_id = f"{sku_id}@{charge.offering_uid}"
    details: dict[str, str] = {}
    if charge.is_fee:
        spec = fee_terms(charge)
        if spec is not None:
            details = {"x_Period": spec.period, "x_TickAlignment": spec.tick_alignment.value}
    else:
        margins = {m.meter.value: m.margin for m in _pricing(charge).meters}
        margin = margins.get(charge.source, usage.Margin())
        if margin.factor_milli is not None:
            details["x_MarginFactorMilli"] = str(margin.factor_milli)
        if margin.absolute_micros is not None:
            details["x_MarginAbsoluteMicros"] = str(margin.absolute_micros)
        if charge.price_list is not None:
            book = charge.price_list
            price_id = f"{price_id}/{book.digest[:12]}"
            details["x_PriceBook"] = f"{book.namespace}/{book.name}"
            details["x_PriceBookRatesVersion"] = book.digest[:12]
    return sku_id, price_id, details or None


@dataclasses.dataclass(frozen=True)
class SkuColumns:
    """The columns of a charge row that follow from its Offering version, PriceBook and source
    alone, as FOCUS text. Why: a month has millions of rows but few such triples, so the
    export works these out once each and the database fills them into every row."""

    unit: str
    meter: str
    list_price: Decimal | None
    """None: the row's own unit price (a fee with no terms, usage with no recorded rates)."""
    contracted_price: Decimal | None
    fee_price_micros: int | None
    """A fee's price of one period when its terms are known (prorated quantities divide by it)."""
    sku_id: str
    sku_price_id: str
    sku_price_details: str | None


def sku_columns(charge: LedgerCharge) -> SkuColumns:
    """The `SkuColumns` of a row; only its Offering, PriceBook and source are read."""
    sku_id, price_id, details = sku(charge)
    listing = _listing(charge)
    return SkuColumns(
        unit=listing.unit,
        meter=METERS[charge.source],
        list_price=listing.list_price,
        contracted_price=listing.contracted_price,
        fee_price_micros=None if listing.fee is None else listing.fee.price_micros,
        sku_id=sku_id,
        sku_price_id=price_id,
        sku_price_details=text(details),
    )


def window_hours(
    index: periods.PeriodIndex, start: dt.datetime, end: dt.datetime
) -> Iterator[tuple[dt.datetime, periods.Period]]:
    """Each whole hour in [start, end) with the billing period it is invoiced in."""
    hour = ticks.utc(start).replace(minute=0, second=0, microsecond=0)
    if hour < start:
        hour += ticks.HOUR
    period: periods.Period | None = None
    while hour < end:
        if period is None or not period.contains(hour):
            period = index.period_of(hour)
        yield hour, period
        hour += ticks.HOUR


def _periods(charge: LedgerCharge, index: periods.PeriodIndex) -> tuple[periods.Period, str | None]:
    """The period the row is invoiced in and, for a correction, the invoice it corrects."""
    if charge.booking is None:
        return index.period_of(charge.hour), None
    corrected = index.period_of(charge.hour)
    invoice = periods.invoice_id(charge.cluster, charge.namespace, corrected.start, corrected.label)
    return index.starting(charge.booking.booked_in), invoice


def _check(charge: LedgerCharge) -> dt.datetime:
    if charge.hour.tzinfo is None or charge.hour.utcoffset() is None:
        raise ValueError(f"LedgerCharge.hour must be timezone-aware, got {charge.hour!r}")
    if charge.source not in UNITS:
        raise ValueError(f"unknown charge source {charge.source!r}")
    return ticks.utc(charge.hour)


def description(charge: LedgerCharge, hour: dt.datetime) -> str:
    """ChargeDescription: what was charged, under which Offering (and, corrected, when)."""
    what = "Subscription fee" if charge.is_fee else f"{charge.source} usage"
    if charge.booking is not None:
        what = f"Correction of the {what.lower()} of {ticks.rfc3339(hour)}"
    return f"{what} of Offering {charge.offering}"


def row(
    charge: LedgerCharge,
    provider: str = DEFAULT_PROVIDER,
    index: periods.PeriodIndex | None = None,
) -> dict[str, Value]:
    """The FOCUS row of one ledger charge or correction, values typed (Decimal, str, aware
    datetime, dict); `index` places it in its billing period (UTC months by default)."""
    hour = _check(charge)
    period, corrected = _periods(charge, index or periods.PeriodIndex(periods.Calendar()))
    fee, cost, priced = charge.is_fee, units(charge.amount_micros), pricing(charge)
    sku_id, price_id, details = sku(charge)
    start, end = charge.covers or (hour, hour + ticks.HOUR)
    return {
        "BilledCost": cost,
        "BillingAccountId": charge.cluster,
        "BillingAccountName": charge.cluster,
        "BillingCurrency": charge.currency or NO_CURRENCY,
        "BillingPeriodEnd": period.end,
        "BillingPeriodStart": period.start,
        "ChargeCategory": "Purchase" if fee else "Usage",
        "ChargeClass": None if charge.booking is None else CORRECTION,
        "ChargeDescription": description(charge, hour),
        "ChargeFrequency": "Recurring" if fee else "Usage-Based",
        "ChargePeriodEnd": end,
        "ChargePeriodStart": start,
        "ConsumedQuantity": None if fee else charge.quantity,
        "ConsumedUnit": None if fee else UNITS[charge.source],
        "ContractedCost": priced.contracted_cost,
        "ContractedUnitPrice": priced.contracted_price,
        "EffectiveCost": cost,
        "InvoiceId": periods.invoice_id(
            charge.cluster, charge.namespace, period.start, period.label
        ),
        "InvoiceIssuerName": provider,
        "ListCost": priced.list_cost,
        "ListUnitPrice": priced.list_price,
        "PricingQuantity": priced.quantity,
        "PricingUnit": priced.unit,
        "ProviderName": provider,
        "PublisherName": provider,
        "ResourceId": charge.subscription_uid,
        "ResourceName": charge.subscription,
        "ResourceType": "Subscription",
        "ServiceCategory": SERVICE_CATEGORY,
        "ServiceName": charge.offering,
        "ServiceSubcategory": SERVICE_SUBCATEGORY,
        "SkuId": sku_id,
        "SkuMeter": METERS[charge.source],
        "SkuPriceDetails": details,
        "SkuPriceId": price_id,
        "SubAccountId": charge.namespace,
        "SubAccountName": charge.namespace,
        "Tags": tags(charge),
        "x_ChargeSource": charge.source,
        "x_CorrectedInvoiceId": corrected,
        "x_Finalized": "true" if charge.finalized else "false",
        "x_UnitPrice": units(charge.unit_price_micros),
    }


def text(value: Value) -> str | None:
    """A value as FOCUS text: plain decimals, `YYYY-MM-DDTHH:MM:SSZ`, compact JSON; None stays."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, dt.datetime):
        return ticks.rfc3339(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def csv_line(cells: Iterable[str]) -> str:
    """One CSV line (RFC 4180 quoting as `csv` writes it, CRLF)."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow(list(cells))
    return buffer.getvalue()


def csv_header() -> str:
    """The CSV header line: the column names."""
    return csv_line(NAMES)


def csv_lines(rows: Iterable[Mapping[str, Value]]) -> Iterator[str]:
    """The header, then one CSV line per row (RFC 4180 quoting, CRLF); null is an empty cell."""
    yield csv_header()
    for r in rows:
        yield csv_line(text(r[name]) or "" for name in NAMES)


def json_chunks(rows: Iterable[Mapping[str, Value]]) -> Iterator[str]:
    """A JSON array of row objects, one element per chunk; decimals stay exact strings."""
    yield "["
    sep = ""
    for r in rows:
        body = {name: (r[name] if name in _OBJECTS else text(r[name])) for name in NAMES}
        yield sep + json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        sep = ","
    yield "]\n"

"""Ledger charges as FinOps Foundation FOCUS 1.2 rows, for tools that read billing data.

Why FOCUS: spreadsheets, BI tools and FinOps platforms already read that column set, so the
ledger can be handed over without a mapping on the reader's side. One charge row (Subscription
x hour x source) becomes one FOCUS row. Nothing is discounted here, so the four cost columns
carry the same amount; money is the row's integer micros shown as an exact six-place Decimal.

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
import enum
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal

from finops.billing import money, ticks

FOCUS_VERSION = "1.2"
DEFAULT_PROVIDER = "Kubernetes platform"
NO_CURRENCY = "XXX"
"""ISO 4217's code for "no currency": a charge whose currency nothing named (a fee with no
PriceBook in sight) still needs a valid BillingCurrency."""
FEE_SOURCE = "subscription"


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
CHARGE_CLASSES = ("Correction",)
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
    Column("EffectiveCost", _D, _M, False),
    Column("InvoiceIssuerName", _S, _M, False),
    Column("ListCost", _D, _M, False),
    Column("PricingQuantity", _D, _M, True),
    Column("PricingUnit", _S, _M, True),
    Column("ProviderName", _S, _M, False),
    Column("PublisherName", _S, _M, False),
    Column("ResourceId", _S, _C, True),
    Column("ResourceName", _S, _C, True),
    Column("ResourceType", _S, _C, True),
    Column("ServiceCategory", _S, _M, False, SERVICE_CATEGORIES),
    Column("ServiceName", _S, _M, False),
    Column("SubAccountId", _S, _C, True),
    Column("SubAccountName", _S, _C, True),
    Column("Tags", _J, _C, True),
    Column("x_ChargeSource", _S, _X, False),
    Column("x_Finalized", _S, _X, False, ("true", "false")),
    Column("x_UnitPrice", _D, _X, False),
)
NAMES = tuple(c.name for c in COLUMNS)
BY_NAME = {c.name: c for c in COLUMNS}

# How each source is measured and priced (UnitFormat style); quantities are 2^30-byte GiB.
UNITS = {
    FEE_SOURCE: "Periods",
    "cpuHour": "Core-Hours",
    "gpuHour": "GPU-Hours",
    "ramGbHour": "GiB-Hours",
    "pvGbHour": "GiB-Hours",
    "networkGb": "GiB",
}

Value = Decimal | str | dt.datetime | dict[str, str] | None


@dataclasses.dataclass(frozen=True)
class LedgerCharge:
    """One `subscription_charges` row with the Subscription version and Offering that priced it."""

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


def units(micros: int) -> Decimal:
    """Integer micros as an exact Decimal with six places: 40_000_000 -> Decimal('40.000000')."""
    digits = tuple(int(c) for c in str(abs(micros)))
    return Decimal((1 if micros < 0 else 0, digits, -money.DECIMALS))


def billing_period(hour: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The UTC calendar month [start, end) holding `hour`: charges are invoiced monthly."""
    index = ticks.month_index(hour)
    return ticks.month_start(index), ticks.month_start(index + 1)


def tags(charge: LedgerCharge) -> dict[str, str] | None:
    """The Tags object: the Subscription's labels overlaid by its namespace's (the namespace
    wins a shared key, see the module docstring), keys sorted; None when there are none."""
    merged = {**charge.subscription_labels, **charge.labels}
    return dict(sorted(merged.items())) or None


def row(charge: LedgerCharge, provider: str = DEFAULT_PROVIDER) -> dict[str, Value]:
    """The FOCUS row of one ledger charge, values typed (Decimal, str, aware datetime, dict)."""
    if charge.hour.tzinfo is None or charge.hour.utcoffset() is None:
        raise ValueError(f"LedgerCharge.hour must be timezone-aware, got {charge.hour!r}")
    if charge.source not in UNITS:
        raise ValueError(f"unknown charge source {charge.source!r}")
    hour = ticks.utc(charge.hour)
    period_start, period_end = billing_period(hour)
    fee = charge.source == FEE_SOURCE
    cost = units(charge.amount_micros)
    unit = UNITS[charge.source]
    what = "Subscription fee" if fee else f"{charge.source} usage"
    return {
        "BilledCost": cost,
        "BillingAccountId": charge.cluster,
        "BillingAccountName": charge.cluster,
        "BillingCurrency": charge.currency or NO_CURRENCY,
        "BillingPeriodEnd": period_end,
        "BillingPeriodStart": period_start,
        "ChargeCategory": "Purchase" if fee else "Usage",
        "ChargeClass": None,
        "ChargeDescription": f"{what} of Offering {charge.offering}",
        "ChargeFrequency": "Recurring" if fee else "Usage-Based",
        "ChargePeriodEnd": hour + ticks.HOUR,
        "ChargePeriodStart": hour,
        "ConsumedQuantity": None if fee else charge.quantity,
        "ConsumedUnit": None if fee else unit,
        "ContractedCost": cost,
        "EffectiveCost": cost,
        "InvoiceIssuerName": provider,
        "ListCost": cost,
        "PricingQuantity": charge.quantity,
        "PricingUnit": unit,
        "ProviderName": provider,
        "PublisherName": provider,
        "ResourceId": charge.subscription_uid,
        "ResourceName": charge.subscription,
        "ResourceType": "Subscription",
        "ServiceCategory": "Compute",
        "ServiceName": charge.offering,
        "SubAccountId": charge.namespace,
        "SubAccountName": charge.namespace,
        "Tags": tags(charge),
        "x_ChargeSource": charge.source,
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


def _csv_line(cells: Iterable[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerow(list(cells))
    return buffer.getvalue()


def csv_lines(rows: Iterable[Mapping[str, Value]]) -> Iterator[str]:
    """The header, then one CSV line per row (RFC 4180 quoting, CRLF); null is an empty cell."""
    yield _csv_line(NAMES)
    for r in rows:
        yield _csv_line(text(r[name]) or "" for name in NAMES)


def json_chunks(rows: Iterable[Mapping[str, Value]]) -> Iterator[str]:
    """A JSON array of row objects, one element per chunk; decimals stay exact strings."""
    yield "["
    sep = ""
    for r in rows:
        body = {name: (r[name] if name == "Tags" else text(r[name])) for name in NAMES}
        yield sep + json.dumps(body, ensure_ascii=False, separators=(",", ":"))
        sep = ","
    yield "]\n"


def problems(r: Mapping[str, Value]) -> list[str]:
    """What in a row breaks the column table: missing columns, nulls, types, allowed values."""
    found = [f"{name}: missing" for name in NAMES if name not in r]
    for column in COLUMNS:
        value = r.get(column.name)
        if value is None:
            if not column.nullable and column.name in r:
                found.append(f"{column.name}: null, but the column does not allow nulls")
            continue
        expected: type | tuple[type, ...] = {
            DataType.DECIMAL: Decimal,
            DataType.STRING: str,
            DataType.DATETIME: dt.datetime,
            DataType.JSON: dict,
        }[column.data_type]
        if not isinstance(value, expected):
            found.append(f"{column.name}: {type(value).__name__}, not {column.data_type}")
        elif column.allowed and value not in column.allowed:
            found.append(f"{column.name}: {value!r} is not an allowed value")
    return found

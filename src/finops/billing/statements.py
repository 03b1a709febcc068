"""Statements: what one tenant namespace is invoiced for one billing period.

Why built from the FOCUS rows' source (`focus.LedgerCharge`): a statement and a FOCUS export
of the same period then hold the same charges and corrections by construction, so their
sums agree to the micro. A statement of a closed period reads only rows the database keeps
frozen, and is rendered from them alone (no clock, no current object), so it is the same
text, byte for byte, every time it is asked for.

Lines group the period's charge rows by Subscription, meter, currency and price; a fee line
names the service period its ticks cover. Corrections are listed apart, each naming the
statement and hour it corrects. Totals are per currency. Pure: no I/O.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import TypedDict

from finops.billing import focus, money, periods, ticks

TENANT_LABEL = "stakater.com/tenant"


@dataclasses.dataclass(frozen=True)
class Line:
    """Charges of one Subscription, source, currency and price over the period."""

    subscription: str
    subscription_uid: str
    offering: str
    source: str
    currency: str
    quantity: Decimal
    unit: str
    list_price: Decimal
    contracted_price: Decimal
    amount_micros: int
    first: dt.datetime
    last: dt.datetime
    """The service the line covers: a fee's periods, or the first to the last charged hour."""
    price_list: str
    """`namespace/name@rates version` of the PriceBook that priced usage; '' for fees."""


@dataclasses.dataclass(frozen=True)
class Correction:
    """One correction booked in the period: of which statement and hour, and how much."""

    subscription: str
    offering: str
    source: str
    currency: str
    hour: dt.datetime
    corrects: str
    """The InvoiceId of the statement whose hour is corrected."""
    quantity: Decimal
    unit: str
    amount_micros: int


@dataclasses.dataclass(frozen=True)
class Total:
    currency: str
    charges_micros: int
    corrections_micros: int

    @property
    def total_micros(self) -> int:
        return self.charges_micros + self.corrections_micros


@dataclasses.dataclass(frozen=True)
class Statement:
    """One statement: one billing account (cluster), tenant namespace and period."""

    invoice_id: str
    cluster: str
    namespace: str
    tenant: str
    period: periods.Period
    time_zone: str
    closed: bool
    lines: tuple[Line, ...]
    corrections: tuple[Correction, ...]
    totals: tuple[Total, ...]
    price_lists: tuple[str, ...]


def _price_list(charge: focus.LedgerCharge) -> str:
    book = charge.price_list
    return "" if book is None else f"{book.namespace}/{book.name}@{book.digest[:12]}"


def _line_key(c: focus.LedgerCharge, priced: focus.RowPricing) -> tuple[object, ...]:
    return (
        c.subscription,
        c.subscription_uid,
        c.offering,
        c.source,
        c.currency or focus.NO_CURRENCY,
        priced.unit,
        priced.list_price,
        priced.contracted_price,
        _price_list(c),
    )


def _lines(charges: Iterable[focus.LedgerCharge]) -> tuple[Line, ...]:
    groups: dict[tuple[object, ...], list[tuple[focus.LedgerCharge, focus.RowPricing]]] = {}
    for c in charges:
        priced = focus.pricing(c)
        groups.setdefault(_line_key(c, priced), []).append((c, priced))
    lines = []
    for key, rows in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        spans = [c.covers or (c.hour, c.hour + ticks.HOUR) for c, _ in rows]
        first = rows[0][0]
        lines.append(
            Line(
                subscription=first.subscription,
                subscription_uid=first.subscription_uid,
                offering=first.offering,
                source=first.source,
                currency=str(key[4]),
                quantity=sum((p.quantity for _, p in rows), Decimal(0)),
                unit=rows[0][1].unit,
                list_price=rows[0][1].list_price,
                contracted_price=rows[0][1].contracted_price,
                amount_micros=sum(c.amount_micros for c, _ in rows),
                first=min(s for s, _ in spans),
                last=max(e for _, e in spans),
                price_list=str(key[8]),
            )
        )
    return tuple(lines)


def _corrections(
    charges: Iterable[focus.LedgerCharge], index: periods.PeriodIndex
) -> tuple[Correction, ...]:
    out = []
    for c in charges:
        corrected = index.period_of(c.hour)
        out.append(
            Correction(
                subscription=c.subscription,
                offering=c.offering,
                source=c.source,
                currency=c.currency or focus.NO_CURRENCY,
                hour=c.hour,
                corrects=periods.invoice_id(
                    c.cluster, c.namespace, corrected.start, corrected.label
                ),
                quantity=focus.pricing(c).quantity,
                unit=focus.pricing(c).unit,
                amount_micros=c.amount_micros,
            )
        )
    return tuple(
        sorted(out, key=lambda k: (k.subscription, k.hour, k.source, k.currency, k.amount_micros))
    )


def _totals(lines: Sequence[Line], corrections: Sequence[Correction]) -> tuple[Total, ...]:
    charged: dict[str, int] = {}
    corrected: dict[str, int] = {}
    for line in lines:
        charged[line.currency] = charged.get(line.currency, 0) + line.amount_micros
    for k in corrections:
        corrected[k.currency] = corrected.get(k.currency, 0) + k.amount_micros
    return tuple(
        Total(cur, charged.get(cur, 0), corrected.get(cur, 0))
        for cur in sorted(set(charged) | set(corrected))
    )


def build(
    *,
    cluster: str,
    namespace: str,
    period: periods.Period,
    index: periods.PeriodIndex,
    charges: Iterable[focus.LedgerCharge],
) -> Statement:
    """The statement of `namespace` for `period` from its charge and correction rows (as
    `finops.store.focus.charges` reads them for the period's window)."""
    mine = [c for c in charges if c.namespace == namespace]
    booked = [c for c in mine if c.booking is not None]
    lines = _lines(c for c in mine if c.booking is None)
    corrections = _corrections(booked, index)
    tenants = sorted({c.labels.get(TENANT_LABEL, "") for c in mine} - {""})
    return Statement(
        invoice_id=periods.invoice_id(cluster, namespace, period.start, period.label),
        cluster=cluster,
        namespace=namespace,
        tenant=", ".join(tenants),
        period=period,
        time_zone=index.calendar.time_zone,
        closed=index.is_closed(period),
        lines=lines,
        corrections=corrections,
        totals=_totals(lines, corrections),
        price_lists=tuple(sorted({line.price_list for line in lines} - {""})),
    )


class PeriodJson(TypedDict):
    label: str
    start: str
    end: str
    timeZone: str
    closed: bool


class TotalJson(TypedDict):
    currency: str
    chargesMicros: int
    correctionsMicros: int
    totalMicros: int
    total: str


LineJson = TypedDict(
    "LineJson",
    {
        "subscription": str,
        "subscriptionUid": str,
        "offering": str,
        "meter": str,
        "from": str,
        "to": str,
        "quantity": str,
        "unit": str,
        "listUnitPrice": str,
        "unitPrice": str,
        "currency": str,
        "amountMicros": int,
        "amount": str,
        "priceList": str,
    },
)
"""One charge line (`from` is a keyword, hence this form)."""


class CorrectionJson(TypedDict):
    subscription: str
    offering: str
    meter: str
    hour: str
    corrects: str
    quantity: str
    unit: str
    currency: str
    amountMicros: int
    amount: str


class SummaryJson(TypedDict):
    """What a list of statements shows of one."""

    invoiceId: str
    namespace: str
    tenant: str
    period: PeriodJson
    totals: list[TotalJson]


class StatementJson(SummaryJson):
    billingAccount: str
    lines: list[LineJson]
    corrections: list[CorrectionJson]
    priceLists: list[str]


def _decimal(value: Decimal) -> str:
    return format(value, "f")


def amount(micros: int) -> str:
    """Micros as an exact six-place decimal string (what FOCUS BilledCost shows)."""
    return focus.text(focus.units(micros)) or "0.000000"


def summary(statement: Statement) -> SummaryJson:
    """The statement's id, namespace, tenant, period and totals."""
    s = statement
    return {
        "invoiceId": s.invoice_id,
        "namespace": s.namespace,
        "tenant": s.tenant,
        "period": {
            "label": s.period.label,
            "start": ticks.rfc3339(s.period.start),
            "end": ticks.rfc3339(s.period.end),
            "timeZone": s.time_zone,
            "closed": s.closed,
        },
        "totals": [
            {
                "currency": t.currency,
                "chargesMicros": t.charges_micros,
                "correctionsMicros": t.corrections_micros,
                "totalMicros": t.total_micros,
                "total": amount(t.total_micros),
            }
            for t in s.totals
        ],
    }


def as_json(statement: Statement) -> StatementJson:
    """The statement as a JSON object: money as exact decimal strings and integer micros."""
    s = statement
    head = summary(s)
    return {
        "invoiceId": head["invoiceId"],
        "billingAccount": s.cluster,
        "namespace": head["namespace"],
        "tenant": head["tenant"],
        "period": head["period"],
        "lines": [_line_json(line) for line in s.lines],
        "corrections": [_correction_json(k) for k in s.corrections],
        "totals": head["totals"],
        "priceLists": list(s.price_lists),
    }


def _line_json(line: Line) -> LineJson:
    return {
        "subscription": line.subscription,
        "subscriptionUid": line.subscription_uid,
        "offering": line.offering,
        "meter": line.source,
        "from": ticks.rfc3339(line.first),
        "to": ticks.rfc3339(line.last),
        "quantity": _decimal(line.quantity),
        "unit": line.unit,
        "listUnitPrice": _decimal(line.list_price),
        "unitPrice": _decimal(line.contracted_price),
        "currency": line.currency,
        "amountMicros": line.amount_micros,
        "amount": amount(line.amount_micros),
        "priceList": line.price_list,
    }


def _correction_json(k: Correction) -> CorrectionJson:
    return {
        "subscription": k.subscription,
        "offering": k.offering,
        "meter": k.source,
        "hour": ticks.rfc3339(k.hour),
        "corrects": k.corrects,
        "quantity": _decimal(k.quantity),
        "unit": k.unit,
        "currency": k.currency,
        "amountMicros": k.amount_micros,
        "amount": amount(k.amount_micros),
    }


def json_text(statement: Statement) -> str:
    """The JSON body: keys in a fixed order, one trailing newline."""
    return json.dumps(as_json(statement), indent=2, ensure_ascii=False) + "\n"


CSV_HEADER = (
    "InvoiceId", "Kind", "Subscription", "Offering", "Meter", "From", "To", "Corrects",
    "Quantity", "Unit", "UnitPrice", "Currency", "Amount",
)  # fmt: skip


def csv_rows(statement: Statement) -> Iterator[tuple[str, ...]]:
    """One row per line, correction and currency total, after the header."""
    s, inv = statement, statement.invoice_id
    yield CSV_HEADER
    for ln in s.lines:
        yield (
            inv, "charge", ln.subscription, ln.offering, ln.source, ticks.rfc3339(ln.first),
            ticks.rfc3339(ln.last), "", _decimal(ln.quantity), ln.unit,
            _decimal(ln.contracted_price), ln.currency, amount(ln.amount_micros),
        )  # fmt: skip
    for k in s.corrections:
        yield (
            inv, "correction", k.subscription, k.offering, k.source, ticks.rfc3339(k.hour),
            ticks.rfc3339(k.hour + ticks.HOUR), k.corrects, _decimal(k.quantity),
            k.unit, "", k.currency, amount(k.amount_micros),
        )  # fmt: skip
    for t in s.totals:
        yield (
            inv, "total", "", "", "", ticks.rfc3339(s.period.start), ticks.rfc3339(s.period.end),
            "", "", "", "", t.currency, amount(t.total_micros),
        )  # fmt: skip


def csv_text(statement: Statement) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(csv_rows(statement))
    return buffer.getvalue()


def money_text(micros: int, currency: str) -> str:
    """An amount for people: the currency's usual decimals (exact micros stay in the JSON)."""
    return f"{money.format_money(micros, currency)} {currency}"

"""Every charge row of a run computed row by row in Python: the oracle the set-based charge run
(`finops.collection.charge_plan.tables` written by `finops.store.charge_sql`) is proven against.

Fee rows come from the fee calculator hour by hour (`fees.FeeSchedule.hourly`), usage rows from
`tests.oracle.oracle_usage.usage_charges` over the allocation rows read into Python; the run itself
leaves those rows in the database and sums them there.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import datetime as dt
from collections.abc import Iterable, Sequence
from decimal import Decimal

from finops.api import models
from finops.billing import fees, ticks
from finops.collection import charge_plan, charges
from tests.oracle import usage as oracle_usage

RowKey = tuple[str, dt.datetime, str]


@dataclasses.dataclass(frozen=True)
class PlannedCharge:
    """One charge row before the run stamps cluster, currency and version ids on it."""

    hour: dt.datetime
    source: str
    quantity: Decimal
    unit_price_micros: int
    amount_micros: int
    finalized: bool
    covers: tuple[dt.datetime, dt.datetime] | None = None
    """A fee row's service period (see `fees.FeeSchedule.covered`)."""


def fee_charges(
    fee: fees.FeeSchedule, window: tuple[dt.datetime, dt.datetime], scheduled: dt.datetime
) -> list[PlannedCharge]:
    """One `subscription` row per hour of the window, zero hours included.

    The quantity is the number of tick boundaries the hour closes and the unit price is
    `priceMicros`; the amount is the fee's own (a prorated opening tick costs less than one
    unit price). Hours before the scheduled hour are final; the fee needs no allocations.
    """
    anchor = ticks.floor_hour(scheduled)
    rows: list[PlannedCharge] = []
    for hour, amount in fee.hourly(*window):
        before, after = fee.billed_ticks(hour), fee.billed_ticks(hour + ticks.HOUR)
        rows.append(
            PlannedCharge(
                hour=hour,
                source=models.MeterName.SUBSCRIPTION.value,
                quantity=Decimal(after - before),
                unit_price_micros=fee.spec.price_micros,
                amount_micros=amount,
                finalized=hour < anchor,
                covers=fee.covered(before, after),
            )
        )
    return rows


def usage_final(hour: dt.datetime, scheduled: dt.datetime, boundary: dt.datetime | None) -> bool:
    """A usage hour is final once it is before the scheduled hour and before the allocation
    boundary (the earliest hour whose allocations may still change)."""
    return hour < ticks.floor_hour(scheduled) and (boundary is None or hour < boundary)


def usage_rows(
    terms: charges.Terms,
    rows: Iterable[oracle_usage.PricedRow],
    window: tuple[dt.datetime, dt.datetime],
    scheduled: dt.datetime,
    boundary: dt.datetime | None,
) -> list[PlannedCharge]:
    """One row per (hour, meter) of the window that measured something, via the billing core."""
    if not terms.bills_usage:
        return []
    start, end = window
    inside = [r for r in rows if start <= r.row.hour < end]
    return [
        PlannedCharge(
            hour=charge.hour,
            source=charge.source,
            quantity=charge.quantity_decimal(charges.QUANTITY_PLACES),
            unit_price_micros=charge.unit_price_micros(),
            amount_micros=charge.amount_micros,
            finalized=usage_final(charge.hour, scheduled, boundary),
        )
        for charge in oracle_usage.usage_charges(
            terms.pricing, terms.sources, inside, terms.interval
        )
    ]


def plan_charges(
    terms: charges.Terms,
    window: tuple[dt.datetime, dt.datetime] | None,
    rows: Iterable[oracle_usage.PricedRow],
    scheduled: dt.datetime,
    boundary: dt.datetime | None,
) -> list[PlannedCharge]:
    """Every row one Subscription's window produces: fee rows, then usage rows."""
    if window is None:
        return []
    planned = [] if terms.fee is None else fee_charges(terms.fee, window, scheduled)
    planned.extend(usage_rows(terms, rows, window, scheduled, boundary))
    return planned


@dataclasses.dataclass(frozen=True)
class ChargeRow:
    """One row of `subscription_charges`; money in integer micros, quantity exact."""

    cluster: str
    subscription_uid: str
    hour: dt.datetime
    source: str
    quantity: Decimal
    unit_price_micros: int
    amount_micros: int
    currency: str
    finalized: bool
    offering_version_id: int
    subscription_version_id: int
    pricebook_id: int | None = None
    """Usage rows: the PriceBook rates their hour was collected under (the first row's)."""
    covers_start: dt.datetime | None = None
    """Fee rows: the start of the service period the hour's ticks pay for."""
    covers_end: dt.datetime | None = None


# ---------------------------------------------------------------- rows


class RowIndex:
    """Priced allocation rows by namespace, sorted by hour, for per-Subscription windows."""

    def __init__(self, rows: Iterable[oracle_usage.PricedRow]) -> None:
        self.by_namespace: dict[str, list[oracle_usage.PricedRow]] = collections.defaultdict(list)
        self.all: list[oracle_usage.PricedRow] = []
        for priced in rows:
            self.by_namespace[priced.row.namespace].append(priced)
            self.all.append(priced)
        for bucket in (*self.by_namespace.values(), self.all):
            bucket.sort(key=lambda p: p.row.hour)

    @staticmethod
    def _slice(
        rows: list[oracle_usage.PricedRow], window: charge_plan.Window
    ) -> list[oracle_usage.PricedRow]:
        lo = bisect.bisect_left(rows, window[0], key=lambda p: p.row.hour)
        hi = bisect.bisect_left(rows, window[1], key=lambda p: p.row.hour)
        return rows[lo:hi]

    def for_terms(
        self, terms: charges.Terms, window: charge_plan.Window
    ) -> list[oracle_usage.PricedRow]:
        """Rows a Subscription's sources could select in its window (each row once)."""
        if any(not s.namespace for s in terms.sources):
            return self._slice(self.all, window)
        out: list[oracle_usage.PricedRow] = []
        for namespace in sorted({s.namespace for s in terms.sources}):
            out.extend(self._slice(self.by_namespace.get(namespace, []), window))
        return out


def hour_currencies(priced: Iterable[tuple[oracle_usage.PricedRow, str]]) -> dict[dt.datetime, str]:
    """The currency of each hour's usage: that of the first row collected in it."""
    out: dict[dt.datetime, str] = {}
    for row, currency in priced:
        out.setdefault(row.row.hour, currency)
    return out


def hour_pricebooks(
    priced: Iterable[tuple[oracle_usage.PricedRow, str]],
) -> dict[dt.datetime, int | None]:
    """The PriceBook rates of each hour's usage: those of the first row collected in it (the
    row that names the hour's currency)."""
    out: dict[dt.datetime, int | None] = {}
    for row, _ in priced:
        out.setdefault(row.row.hour, row.pricebook_id)
    return out


@dataclasses.dataclass(frozen=True)
class PricedInputs(charge_plan.Inputs):
    """What the run read, plus the priced allocation rows of its windows (which the run itself
    leaves in the database)."""

    priced: Sequence[tuple[oracle_usage.PricedRow, str]] = ()


def rows(
    cluster: str,
    billed: Iterable[charge_plan.Billed],
    inputs: PricedInputs,
    scheduled: dt.datetime,
) -> list[ChargeRow]:
    """Every charge row of the run: fee rows price in the ledger's latest currency, usage
    rows in the currency their hour was collected under (the fee's when none was)."""
    priced = inputs.priced
    index = RowIndex(row for row, _ in priced)
    currencies = hour_currencies(priced)
    books = hour_pricebooks(priced)
    out: list[ChargeRow] = []
    for b in billed:
        window = inputs.windows.get(b.sub.uid)
        if window is None:
            continue
        candidates = index.for_terms(b.terms, window) if b.terms.bills_usage else []
        for p in plan_charges(b.terms, window, candidates, scheduled, inputs.boundary):
            is_fee = p.source == models.MeterName.SUBSCRIPTION
            currency, book = inputs.fee_currency, None
            if not is_fee:
                currency = currencies.get(p.hour, inputs.fee_currency)
                book = books.get(p.hour)
            out.append(
                ChargeRow(
                    cluster=cluster,
                    subscription_uid=b.sub.uid,
                    hour=p.hour,
                    source=p.source,
                    quantity=p.quantity,
                    unit_price_micros=p.unit_price_micros,
                    amount_micros=p.amount_micros,
                    currency=currency,
                    finalized=p.finalized,
                    offering_version_id=inputs.versions.offering[b.sub.uid],
                    subscription_version_id=inputs.versions.subscription[b.sub.uid],
                    pricebook_id=book,
                    covers_start=p.covers[0] if p.covers else None,
                    covers_end=p.covers[1] if p.covers else None,
                )
            )
    return out


def keys(planned: Iterable[ChargeRow]) -> set[RowKey]:
    """`(uid, hour, source)` of each planned row: what a recompute keeps in its windows."""
    return {(r.subscription_uid, r.hour, r.source) for r in planned}

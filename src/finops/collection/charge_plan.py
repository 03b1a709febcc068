"""The ledger pass of a charge run as pure decisions: which hours each Subscription is charged,
which allocation rows that needs, and the exact charge rows to write.

`finops.jobs.charges` reads the ledger, hands what it read to these functions and writes what
they return, so the run reads as read → decide → write and every choice made in between (row
index, window widening and union, the currency of a row, row assembly) is tested here without
a database. Per-Subscription rules (windows, fee and usage rows, finality) stay in
`finops.collection.charges`; this module applies them to a whole run at once.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

from finops.api import bodies
from finops.billing import fees, ticks
from finops.collection import charges

Window: TypeAlias = tuple[dt.datetime, dt.datetime]
VersionKey: TypeAlias = tuple[str, int]
RowKey: TypeAlias = tuple[str, dt.datetime, str]


@dataclasses.dataclass(frozen=True)
class Billed:
    """An activated Subscription whose terms could be read: what the ledger pass charges."""

    sub: charges.SubscriptionState
    terms: charges.Terms
    offering: bodies.OfferingBody
    namespace_labels: Mapping[str, str]

    @property
    def offering_version(self) -> VersionKey:
        """The Offering version (uid, generation) that prices this Subscription."""
        meta: bodies.ObjectMetaBody = self.offering.get("metadata") or {}
        return (str(meta.get("uid", "")), int(meta.get("generation") or 0))

    @property
    def subscription_version(self) -> VersionKey:
        return (self.sub.uid, self.sub.generation)

    def subscription_metadata(self) -> bodies.ObjectMetaBody:
        """The metadata a Subscription version row records."""
        return {
            "uid": self.sub.uid,
            "namespace": self.sub.namespace,
            "name": self.sub.name,
            "generation": self.sub.generation,
            "resourceVersion": self.sub.resource_version,
        }


# ---------------------------------------------------------------- versions


def offering_versions(billed: Iterable[Billed]) -> dict[VersionKey, bodies.OfferingBody]:
    """Each distinct Offering version of the run, with the object that defines it."""
    return {b.offering_version: b.offering for b in billed}


def subscription_versions(
    billed: Iterable[Billed],
) -> dict[
    VersionKey,
    tuple[bodies.ObjectMetaBody, bodies.SubscriptionSpecBody, Mapping[str, str], Mapping[str, str]],
]:
    """Each distinct Subscription version of the run as the row that records it:
    (metadata, spec, namespace labels, the Subscription's own labels)."""
    return {
        b.subscription_version: (
            b.subscription_metadata(),
            b.sub.spec,
            b.namespace_labels,
            b.sub.labels,
        )
        for b in billed
    }


@dataclasses.dataclass(frozen=True)
class VersionIds:
    """Mirror ids per Subscription uid: the Offering and Subscription versions that price it."""

    offering: Mapping[str, int]
    subscription: Mapping[str, int]


def version_ids(
    billed: Iterable[Billed],
    offerings: Mapping[VersionKey, int],
    subscriptions: Mapping[VersionKey, int],
) -> VersionIds:
    """Map the recorded version ids back to each Subscription of the run."""
    items = list(billed)
    return VersionIds(
        offering={b.sub.uid: offerings[b.offering_version] for b in items},
        subscription={b.sub.uid: subscriptions[b.subscription_version] for b in items},
    )


# ---------------------------------------------------------------- windows


def windows(
    billed: Iterable[Billed], marks: Mapping[str, dt.datetime], scheduled: dt.datetime
) -> dict[str, Window]:
    """The hours each Subscription is charged this run, by uid (absent: nothing to charge)."""
    out: dict[str, Window] = {}
    for b in billed:
        window = charges.charge_window(b.terms, marks.get(b.sub.uid), scheduled)
        if window is not None:
            out[b.sub.uid] = window
    return out


def widen(a: Window, b: Window) -> Window:
    """The smallest window holding both."""
    return (min(a[0], b[0]), max(a[1], b[1]))


@dataclasses.dataclass(frozen=True)
class UsageWindows:
    """What to read of the allocation rows: a window per namespace a usage source names, and
    one window over every namespace for sources that name none."""

    per_namespace: Mapping[str, Window]
    anywhere: Window | None

    @property
    def empty(self) -> bool:
        return not self.per_namespace and self.anywhere is None

    @property
    def bounds(self) -> Window | None:
        """The smallest window holding them all (None when there are none): the hours the
        run's usage statements can read at all."""
        spans = [*self.per_namespace.values(), *([self.anywhere] if self.anywhere else [])]
        return functools.reduce(widen, spans) if spans else None


def usage_windows(billed: Iterable[Billed], charged: Mapping[str, Window]) -> UsageWindows:
    """The union (as one widened window per namespace) of the usage-billing Subscriptions'
    windows, so a single query reads every allocation row the run can price."""
    per_namespace: dict[str, Window] = {}
    anywhere: Window | None = None
    for b in billed:
        window = charged.get(b.sub.uid)
        if window is None or not b.terms.bills_usage:
            continue
        for source in b.terms.sources:
            if not source.namespace:
                anywhere = window if anywhere is None else widen(anywhere, window)
            else:
                old = per_namespace.get(source.namespace)
                per_namespace[source.namespace] = window if old is None else widen(old, window)
    return UsageWindows(per_namespace, anywhere)


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything the ledger pass read before deciding."""

    boundary: dt.datetime | None
    windows: Mapping[str, Window]
    versions: VersionIds
    fee_currency: str


# ---------------------------------------------------------------- the set-based run


SubRow: TypeAlias = tuple[str, dt.datetime, dt.datetime, dt.datetime, dt.datetime | None, int, int]
"""(uid, window start, window end, activatedAt, deactivatedAt, offering version id,
subscription version id) of every Subscription charged this run."""
SourceRow: TypeAlias = tuple[str, str, str, str]
"""(uid, namespace, resourceType, name) of each usage source of a usage-billing Subscription."""
MeterRow: TypeAlias = tuple[str, str, int | None, int | None]
"""(uid, meter, factorMilli, absoluteMicros) of each priced usage meter."""
FeeRun: TypeAlias = tuple[
    str,
    dt.datetime,
    int,
    int,
    int,
    int,
    str,
    bool,
    int,
    int,
    dt.datetime | None,
    dt.datetime | None,
]
"""(uid, first hour, hours, ticks closed, unit price, amount, currency, finalized, offering
version id, subscription version id, start and end of the service the first hour's ticks pay
for) of `hours` consecutive fee rows, each one hour (hour and service) after the last
(`fees.HourRun`); all final or all open."""


@dataclasses.dataclass(frozen=True)
class Tables:
    """The run as plain rows for the set-based write: usage is summed by the database from
    these (no object per allocation row); fee rows are decided here."""

    subscriptions: Sequence[SubRow]
    sources: Sequence[SourceRow]
    meters: Sequence[MeterRow]
    fees: Sequence[FeeRun]
    usage: UsageWindows
    fee_currency: str

    @property
    def fee_rows(self) -> int:
        """How many fee rows the runs stand for."""
        return sum(run[2] for run in self.fees)


_NO_SPAN = (None, None)
"""The service columns of a fee row whose hour closes no tick."""


def fee_runs(b: Billed, window: Window, scheduled: dt.datetime, inputs: Inputs) -> list[FeeRun]:
    """One Subscription's fee rows as runs of plain tuples: a row for every hour of the
    window, zero hours included (the quantity is the ticks the hour closes), runs split where
    the rows turn open (hours before `scheduled` are final)."""
    fee = b.terms.fee
    if fee is None:
        return []
    uid, currency = b.sub.uid, inputs.fee_currency
    ov, sv = inputs.versions.offering[uid], inputs.versions.subscription[uid]
    price = fee.spec.price_micros
    anchor = ticks.floor_hour(scheduled)
    out: list[FeeRun] = []
    for hour, hours, closed, amount, span in fee.hourly_runs(*window):
        final = 0 if hour >= anchor else min(hours, (anchor - hour) // ticks.HOUR)
        for skip, n, done in ((0, final, True), (final, hours - final, False)):
            if n:
                first, service = hour + ticks.HOUR * skip, fees.shifted(span, skip) or _NO_SPAN
                out.append((uid, first, n, closed, price, amount, currency, done, ov, sv, *service))
    return out


def tables(billed: Iterable[Billed], inputs: Inputs, scheduled: dt.datetime) -> Tables:
    """What `finops.store.charge_sql.write` needs for the run (the fee rows, the windows,
    the usage sources and margins of the usage-billing Subscriptions)."""
    items = list(billed)
    subs: list[SubRow] = []
    srcs: list[SourceRow] = []
    meters: list[MeterRow] = []
    runs: list[FeeRun] = []
    for b in items:
        uid, window = b.sub.uid, inputs.windows.get(b.sub.uid)
        if window is None:
            continue
        interval = b.terms.interval
        ov, sv = inputs.versions.offering[uid], inputs.versions.subscription[uid]
        subs.append((uid, *window, interval.activated_at, interval.deactivated_at, ov, sv))
        runs.extend(fee_runs(b, window, scheduled, inputs))
        if not b.terms.bills_usage:
            continue
        srcs.extend((uid, s.namespace, s.resource_type, s.name) for s in b.terms.sources)
        meters.extend(
            (uid, m.meter.value, m.margin.factor_milli, m.margin.absolute_micros)
            for m in b.terms.pricing.meters
        )
    return Tables(
        subs, srcs, meters, runs, usage_windows(items, inputs.windows), inputs.fee_currency
    )

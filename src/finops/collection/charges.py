"""What a charge collection run decides, as pure functions of observed state and the pinned hour.

The `collectionjob` run (see `finops.jobs.charges`) reads Subscriptions, Offerings and the
ledger, then asks this module: which hours does this Subscription need charged, which charge
rows do they produce and which of them are final, what do the three `status.costs` buckets say,
and may the finalizer go. Nothing here reads a clock, the API or the database.

Rules kept here (and why):
- A Subscription is charged from the hour holding `activatedAt`, or from the hour after its
  watermark, through the scheduled hour `H`. Hours before `H` are the finalized pass; `H` itself
  is the hour in progress and is always written `finalized=false`.
- Billing ends: after deactivation no hour later than the last chargeable one is visited, so
  a deactivated Subscription that stays in the cluster stops growing the ledger.
- The fee writes one row per hour, zero hours included (that is what moves the watermark);
  usage writes a row only for an (hour, meter) that measured something. A usage hour at or
  after the cluster's allocation boundary is written `finalized=false` and recomputed later.
- The finalizer goes only when the Subscription is deactivated, `minPeriods` ticks have passed
  by `H`, the last chargeable hour is finalized (before `H`, and before the allocation boundary
  when usage is billed) and nothing failed for it in this run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
from collections.abc import Mapping, Sequence
from typing import Any

from finops.api import bodies, conditions, models, reasons, views
from finops.billing import buckets, fees, sources, ticks, usage

FINALIZER = "subscriptions.finops.stakater.com/finalizer"
_ONE_MICROSECOND = dt.timedelta(microseconds=1)
# Storage precision of a usage quantity (the ledger's `numeric`); amounts are exact micros.
QUANTITY_PLACES = 12


class TermsError(ValueError):
    """A Subscription or Offering whose billing terms cannot be read; the Subscription is held."""


@dataclasses.dataclass(frozen=True)
class SubscriptionState:
    """The parts of a Subscription object a collection run reads."""

    uid: str
    namespace: str
    name: str
    generation: int
    resource_version: str
    spec: bodies.SubscriptionSpecBody
    activated_at: dt.datetime | None
    deactivated_at: dt.datetime | None
    deleting: bool
    finalizers: tuple[str, ...]
    offering_namespace: str
    offering_name: str
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The Subscription's own `metadata.labels`: part of the ledger's version of it."""

    @classmethod
    def from_object(cls, obj: bodies.SubscriptionBody | Mapping[str, Any]) -> SubscriptionState:
        """Read a raw Subscription body; a malformed timestamp raises `TermsError`."""
        view = views.SubscriptionView.parse(obj)
        if view.problems:
            raise TermsError(view.problems[0])
        return cls(
            uid=view.uid,
            namespace=view.key.namespace,
            name=view.key.name,
            generation=view.generation or 0,
            resource_version=view.resource_version,
            spec=view.spec,
            activated_at=view.activated_at,
            deactivated_at=view.deactivated_at,
            deleting=view.deleting,
            finalizers=view.finalizers,
            offering_namespace=view.offering_namespace,
            offering_name=view.offering_name,
            labels=view.labels,
        )

    @property
    def key(self) -> str:
        """`namespace/name`, for logs."""
        return f"{self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True)
class Terms:
    """One Subscription's billing terms: the fee calculator and the usage calculators' inputs."""

    fee: fees.FeeSchedule | None
    pricing: usage.UsagePricing
    sources: tuple[sources.SourceFilter, ...]
    interval: usage.ActiveInterval

    @property
    def bills_usage(self) -> bool:
        """Usage is billed only when the Subscription declares sources and the Offering prices
        at least one usage meter."""
        return bool(self.sources) and bool(self.pricing)

    @property
    def deactivated_at(self) -> dt.datetime | None:
        return self.interval.deactivated_at

    def last_hour(self) -> dt.datetime | None:
        """The last hour that can carry a charge (None while active).

        The later of the fee's last billable hour (the snapped end can be far after the raw
        deactivation) and the hour holding the last active instant for usage.
        """
        end = self.interval.deactivated_at
        if end is None:
            return None
        last = ticks.floor_hour(max(end - _ONE_MICROSECOND, self.interval.activated_at))
        if self.fee is not None:
            billable = self.fee.last_billable_hour()
            if billable is not None and billable > last:
                last = billable
        return last

    def settle_hour(self) -> dt.datetime | None:
        """The hour that must be finalized before the finalizer may go (None while active):
        the hour holding `deactivatedAt`, or the fee's last billable hour when later."""
        end = self.interval.deactivated_at
        if end is None:
            return None
        need = ticks.floor_hour(end)
        if self.fee is not None:
            billable = self.fee.last_billable_hour()
            if billable is not None and billable > need:
                need = billable
        return need


def terms_for(sub: SubscriptionState, offering_spec: bodies.OfferingSpecBody) -> Terms:
    """Build the calculators of an activated Subscription; bad terms raise `TermsError`."""
    if sub.activated_at is None:
        raise TermsError(f"subscription {sub.key} has not activated")
    try:
        fee_spec = fees.FeeSpec.from_offering_spec(offering_spec)
        pricing = usage.UsagePricing.from_offering_spec(offering_spec)
        declared = sources.from_subscription_spec(sub.spec)
    except ValueError as exc:
        raise TermsError(f"subscription {sub.key}: {exc}") from None
    schedule = None if fee_spec is None else fee_spec.schedule(sub.activated_at, sub.deactivated_at)
    return Terms(
        fee=schedule,
        pricing=pricing,
        sources=tuple(s for s in declared if not s.is_empty()),
        interval=usage.ActiveInterval(sub.activated_at, sub.deactivated_at),
    )


def charge_window(
    terms: Terms, watermark: dt.datetime | None, scheduled: dt.datetime
) -> tuple[dt.datetime, dt.datetime] | None:
    """The hours `[start, end)` this run charges: after the watermark (or from the activation
    hour), through the scheduled hour, never past the last chargeable hour. None when empty."""
    scheduled = ticks.floor_hour(scheduled)
    start = ticks.floor_hour(terms.interval.activated_at)
    if watermark is not None:
        start = max(start, ticks.floor_hour(watermark) + ticks.HOUR)
    end = scheduled + ticks.HOUR
    last = terms.last_hour()
    if last is not None:
        end = min(end, last + ticks.HOUR)
    return (start, end) if start < end else None


# ---------------------------------------------------------------- status.costs


COSTS_MESSAGES: dict[reasons.CostsReason, str] = {
    reasons.CostsReason.FROM_DB: "status.costs aggregated from the charge rows in PostgreSQL",
    reasons.CostsReason.FROM_CALCULATOR: (
        "status.costs computed by the fee calculator: the charge ledger could not be read, "
        "so usage is not included"
    ),
}


def ledger_windows(scheduled: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """Three disjoint windows whose sums rebuild all three buckets' settled usage:
    `[month start, day start)`, `[day start, H)` and `[H, H+1h)`.

    Each sum is handed to `buckets.build` as one charge placed at its window's start, which
    lands it in exactly the buckets that contain the whole window.
    """
    anchor = ticks.floor_hour(scheduled)
    day = ticks.floor_day(anchor)
    month = ticks.floor_month(anchor)
    return [(month, day), (day, anchor), (anchor, anchor + ticks.HOUR)]


def settled_charges(
    windows: Sequence[tuple[dt.datetime, dt.datetime]],
    sums: Sequence[Mapping[str, int]],
) -> list[buckets.Charge]:
    """Per-window, per-source sums of the stored charge rows, fee rows included, as charges
    for `costs` (on the `FromDB` path every `current` is read from the ledger)."""
    out: list[buckets.Charge] = []
    for (start, end), per_source in zip(windows, sums, strict=True):
        if start >= end:
            continue
        for source, amount in sorted(per_source.items()):
            if amount:
                out.append(buckets.Charge(start, source, amount))
    return out


def costs(
    scheduled: dt.datetime, terms: Terms, settled: Sequence[buckets.Charge] | None
) -> tuple[list[bodies.CostBucketBody], reasons.CostsReason]:
    """The three `status.costs` buckets and their `CostsResolved` reason.

    `settled` is what the ledger holds (`settled_charges`): every `current`, the fee's
    included, is summed from it, and only `projected` comes from the fee calculator. None
    means the ledger could not be read, and the buckets are the fee calculator's alone.
    """
    if settled is None:
        built = buckets.build(scheduled, terms.fee, ())
        return buckets.to_status(built), reasons.CostsReason.FROM_CALCULATOR
    fee = models.MeterName.SUBSCRIPTION.value
    built = buckets.build(
        scheduled,
        terms.fee,
        [c for c in settled if c.source != fee],
        settled_fees=[c for c in settled if c.source == fee],
    )
    return buckets.to_status(built), reasons.CostsReason.FROM_DB


def ledger_costs_hour(status: Mapping[str, object]) -> dt.datetime | None:
    """The hour whose run wrote the costs `status` shows, when they were summed from the
    ledger (`CostsResolved=True`, `FromDB`): the start of the hour bucket. None otherwise, or
    when that start cannot be read."""
    found = conditions.in_status(status, reasons.ConditionType.COSTS_RESOLVED)
    if found is None or (found.get("status"), found.get("reason")) != (
        "True",
        reasons.CostsReason.FROM_DB.value,
    ):
        return None
    costs = status.get("costs")
    for bucket in costs if isinstance(costs, list) else ():
        if (
            isinstance(bucket, Mapping)
            and bucket.get("granularity") == models.Granularity.HOUR.value
        ):
            try:
                return views.parse_time(bucket.get("start"))
            except views.TimestampError:
                return None
    return None


def holds_ledger_costs(status: Mapping[str, object], scheduled: dt.datetime) -> bool:
    """Whether `status` already shows costs summed from the ledger for the hour of
    `scheduled` or a later one.

    Why: two runs of one hour can race, and the one whose ledger pass failed writes fee-only
    buckets. Written over the other run's, they would hide usage the ledger holds; the failed
    run leaves such costs as they are (it still fails, and says why in its record)."""
    hour = ledger_costs_hour(status)
    return hour is not None and hour >= ticks.floor_hour(scheduled)


def holds_later_ledger_costs(status: Mapping[str, object], scheduled: dt.datetime) -> bool:
    """Whether `status` already shows costs summed from the ledger for an hour after that of
    `scheduled`.

    Why: a run of an older hour (a Job retried, or one that ran long) can finish after the
    next hour's run; its costs, summed from the ledger too, are older and would replace newer
    ones until the next run. A run of the same hour still writes: it read the ledger later."""
    hour = ledger_costs_hour(status)
    return hour is not None and hour > ticks.floor_hour(scheduled)


# ---------------------------------------------------------------- the finalizer


class Release(enum.StrEnum):
    """What the run does with a deleting Subscription's finalizer, and the line it logs."""

    FAILED = "Errors recorded for subscription in this run, keeping finalizer"
    NOT_DEACTIVATED = "Subscription not yet deactivated, keeping finalizer"
    MIN_PERIODS = "MinPeriods not yet satisfied, keeping finalizer"
    NOT_SETTLED = "Charges not finalized through deactivation hour, keeping finalizer"
    RELEASE = "Removed finalizer for deleted subscription"


def finalizer_decision(
    sub: SubscriptionState,
    terms: Terms | None,
    scheduled: dt.datetime,
    boundary: dt.datetime | None,
    *,
    failed: bool,
) -> Release | None:
    """None when the Subscription is not deleting or does not carry our finalizer.

    `terms` is None when the Offering could not be read or priced (which is a failure);
    `failed` says whether anything else failed for this Subscription in this run. Charges
    count as finalized through hours before `H`, and, when usage is billed, before the
    allocation boundary too (None: every collected allocation hour is final).
    """
    if not sub.deleting or FINALIZER not in sub.finalizers:
        return None
    if failed or terms is None:
        return Release.FAILED
    need = terms.settle_hour()
    if need is None:
        return Release.NOT_DEACTIVATED
    anchor = ticks.floor_hour(scheduled)
    if terms.fee is not None and not terms.fee.min_periods_elapsed(anchor):
        return Release.MIN_PERIODS
    settled_before = anchor
    if terms.bills_usage and boundary is not None:
        settled_before = min(settled_before, boundary)
    if need >= settled_before:
        return Release.NOT_SETTLED
    return Release.RELEASE

"""Which closed hours a charge run recomputes, to book what changed as corrections.

Why: a closed period's charge rows are frozen, but the inputs they were priced from can still
change afterwards: allocation rows arrive late or are re-priced, a deactivation is back-dated,
a Subscription that failed for a while is charged again. Recomputing every closed hour on
every run would cost a month of charging per run, so the run recomputes only hours something
points at, and writes the difference as correction rows in the first open period:
- the allocation hours the database recorded as changed (`allocation_changes`), once their
  period is closed, for every usage-billing Subscription alive then;
- the hours after a Subscription's terms changed (activation, deactivation, Offering
  version), from the first instant they differ through the hour the change was seen;
- the hours of a Subscription never charged before a period closed (it was new with a
  back-dated activation, or its charges failed across the close): its charge window starts
  before the closed periods end, and it was not rechecked since they did.
Hours still in an open period wait (their charge rows stay as they are until then), so the
record of what to recheck is kept with each Subscription's terms. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeAlias

from finops.billing import ticks
from finops.collection import charge_plan

Window: TypeAlias = tuple[dt.datetime, dt.datetime]


@dataclasses.dataclass(frozen=True)
class TermsRecord:
    """What the ledger recorded of one Subscription's billing at its last charge run."""

    activated_at: dt.datetime
    deactivated_at: dt.datetime | None
    offering_version_id: int
    charged_through: dt.datetime
    """Every hour before this is charged or was rechecked: the end of the closed periods
    when it was last charged (so it moves once a period closes, not every run)."""
    recheck: Window | None = None
    """Hours to recompute once their period has closed."""


@dataclasses.dataclass(frozen=True)
class Charged:
    """One Subscription of this run, as the rechecks need it."""

    uid: str
    activated_at: dt.datetime
    deactivated_at: dt.datetime | None
    offering_version_id: int
    bills_usage: bool
    last_hour: dt.datetime | None
    window: Window | None
    """The hours this run would charge it before clipping to the open periods: a start
    before the closed periods' end is a gap that only corrections can fill."""

    def alive(self, hour: dt.datetime) -> bool:
        """Whether `hour` can carry a charge of it."""
        start = ticks.floor_hour(self.activated_at)
        return start <= hour and (self.last_hour is None or hour <= self.last_hour)


@dataclasses.dataclass(frozen=True)
class Closed:
    """The closed part of the ledger: `[first, through)`."""

    first: dt.datetime
    through: dt.datetime


@dataclasses.dataclass(frozen=True)
class Rechecks:
    """What the run recomputes now, what it records for next time, which changed allocation
    hours stay pending (open, but possibly settled already), and which are done with."""

    windows: dict[str, Window]
    records: dict[str, TermsRecord]
    pending_hours: list[dt.datetime]
    done_hours: list[dt.datetime]


def clip(windows: Mapping[str, Window], closed: dt.datetime | None) -> dict[str, Window]:
    """The charge windows with closed hours cut off (those belong to corrections now)."""
    if closed is None:
        return dict(windows)
    return {uid: (max(lo, closed), hi) for uid, (lo, hi) in windows.items() if hi > closed}


def charged(
    billed: Iterable[charge_plan.Billed],
    versions: charge_plan.VersionIds,
    windows: Mapping[str, Window],
) -> list[Charged]:
    """This run's Subscriptions as the rechecks see them."""
    return [
        Charged(
            uid=b.sub.uid,
            activated_at=b.terms.interval.activated_at,
            deactivated_at=b.terms.interval.deactivated_at,
            offering_version_id=versions.offering[b.sub.uid],
            bills_usage=b.terms.bills_usage,
            last_hour=b.terms.last_hour(),
            window=windows.get(b.sub.uid),
        )
        for b in billed
    ]


def first_difference(old: TermsRecord, new: Charged) -> dt.datetime | None:
    """The first instant from which the two terms may charge differently; None if equal."""
    if (old.activated_at, old.offering_version_id) != (new.activated_at, new.offering_version_id):
        return min(old.activated_at, new.activated_at)
    if old.deactivated_at != new.deactivated_at:
        return min(t for t in (old.deactivated_at, new.deactivated_at) if t is not None)
    return None


def _hull(a: Window | None, b: Window | None) -> Window | None:
    if a is None or a[0] >= a[1]:
        return b if b is None or b[0] < b[1] else None
    if b is None or b[0] >= b[1]:
        return a
    return (min(a[0], b[0]), max(a[1], b[1]))


def _wanted(
    sub: Charged, old: TermsRecord | None, closed: Closed | None, scheduled: dt.datetime
) -> Window | None:
    """The hours a new record of `sub` asks to recheck (before taking the closed part)."""
    through = None if closed is None else closed.through
    if old is None:
        start = ticks.floor_hour(sub.activated_at)
        return None if through is None or through <= start else (start, through)
    changed = first_difference(old, sub)
    if changed is not None:
        return (ticks.floor_hour(changed), max(scheduled, ticks.floor_hour(changed) + ticks.HOUR))
    if through is not None and sub.window is not None and sub.window[0] < through:
        start = max(sub.window[0], old.charged_through)
        return (start, through) if start < through else None
    return None


def _record(
    sub: Charged, old: TermsRecord | None, closed: Closed | None, pending: Window | None
) -> TermsRecord:
    marks = [ticks.floor_hour(sub.activated_at)]
    if old is not None:
        marks.append(old.charged_through)
    if closed is not None:
        marks.append(closed.through)
    return TermsRecord(
        sub.activated_at, sub.deactivated_at, sub.offering_version_id, max(marks), pending
    )


def _split(pending: Window | None, closed: Closed | None) -> tuple[Window | None, Window | None]:
    """(the closed part to recheck now, the open part left pending)."""
    if pending is None or closed is None:
        return None, pending
    lo, hi = pending
    now = (max(lo, closed.first), min(hi, closed.through))
    later = (max(lo, closed.through), hi) if hi > closed.through else None
    return (now if now[0] < now[1] else None), later


def plan(
    subs: Sequence[Charged],
    records: Mapping[str, TermsRecord],
    closed: Closed | None,
    scheduled: dt.datetime,
    changed_hours: Iterable[dt.datetime],
    usage_final_before: dt.datetime | None,
) -> Rechecks:
    """The rechecks of one run (see the module docstring for what asks for one)."""
    anchor = ticks.floor_hour(scheduled)
    out = Rechecks({}, {}, [], [])
    for sub in subs:
        old = records.get(sub.uid)
        pending = _hull(None if old is None else old.recheck, _wanted(sub, old, closed, anchor))
        now, later = _split(pending, closed)
        if now is not None:
            out.windows[sub.uid] = now
        out.records[sub.uid] = _record(sub, old, closed, later)
    _changed_hours(out, subs, closed, changed_hours, usage_final_before)
    return out


def changed(
    records: Mapping[str, TermsRecord], recorded: Mapping[str, TermsRecord]
) -> dict[str, TermsRecord]:
    """The new records that differ from those already recorded: in a steady hour nearly all
    are the same (how far a Subscription is charged moves only when a period closes), and
    sending 10k unchanged rows to be compared in the database took a tenth of a second."""
    return {uid: r for uid, r in records.items() if recorded.get(uid) != r}


def _changed_hours(
    out: Rechecks,
    subs: Sequence[Charged],
    closed: Closed | None,
    hours: Iterable[dt.datetime],
    usage_final_before: dt.datetime | None,
) -> None:
    """A changed allocation hour that is closed is rechecked for every usage-billing
    Subscription alive in it; one still open waits only if its usage may already be final
    (otherwise the charge run recomputes it anyway)."""
    for hour in sorted(set(hours)):
        if closed is not None and closed.first <= hour < closed.through:
            for sub in subs:
                if sub.bills_usage and sub.alive(hour):
                    window = out.windows.get(sub.uid)
                    out.windows[sub.uid] = (
                        (hour, hour + ticks.HOUR)
                        if window is None
                        else (min(window[0], hour), max(window[1], hour + ticks.HOUR))
                    )
            out.done_hours.append(hour)
        elif (
            usage_final_before is not None
            and hour < usage_final_before
            and (closed is None or hour >= closed.through)
        ):
            out.pending_hours.append(hour)
        else:
            out.done_hours.append(hour)

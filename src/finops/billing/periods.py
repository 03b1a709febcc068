"""Billing periods: calendar months that close, and the statements they are invoiced on.

Why periods close: a statement handed to a tenant must never change afterwards. A period is
a calendar month in the configured time zone (UTC by default); it closes once every charge
in it is settled and a grace time has passed after its end, measured against the charge
run's scheduled hour (never the wall clock), so every run of the same hour decides the same.
Once closed, its rows are frozen by the database; anything that later changes for it is
booked as a correction in the first period still open.

Periods are contiguous: the first one closed is the month holding the ledger's earliest
charge, and each later one starts where the last closed one ended (a changed time zone takes
effect from there, so one bridging period may be shorter than a month). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
import zoneinfo
from collections.abc import Mapping

from finops.api import environment
from finops.billing import ticks

DEFAULT_TIME_ZONE = "UTC"
DEFAULT_GRACE_HOURS = 24
_CHECKED_YEARS = range(2000, 2101)


class SettingsError(ValueError):
    """A billing-period setting that cannot be used; the message names the variable."""


@dataclasses.dataclass(frozen=True, slots=True)
class Period:
    """One billing period `[start, end)`, both aware UTC instants on whole hours."""

    start: dt.datetime
    end: dt.datetime
    label: str
    """The local year and month of its start, e.g. `2026-04` (how people name it)."""

    def contains(self, t: dt.datetime) -> bool:
        return self.start <= ticks.utc(t) < self.end


@dataclasses.dataclass(frozen=True, slots=True)
class Calendar:
    """Where billing periods start and how long they wait before closing."""

    time_zone: str = DEFAULT_TIME_ZONE
    grace: dt.timedelta = dt.timedelta(hours=DEFAULT_GRACE_HOURS)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Calendar:
        """Both settings from the environment; a bad value raises `SettingsError`."""
        zone = env.get(environment.Env.FINOPS_BILLING_TIME_ZONE, "").strip() or DEFAULT_TIME_ZONE
        raw = env.get(environment.Env.FINOPS_PERIOD_GRACE_HOURS, "").strip()
        if raw and not re.fullmatch(r"[0-9]{1,5}", raw):
            raise SettingsError(
                f"{environment.Env.FINOPS_PERIOD_GRACE_HOURS} must be a whole number of hours, "
                f"got {raw!r}"
            )
        hours = int(raw) if raw else DEFAULT_GRACE_HOURS
        check_time_zone(zone)
        return cls(zone, dt.timedelta(hours=hours))

    @property
    def zone(self) -> zoneinfo.ZoneInfo:
        return zoneinfo.ZoneInfo(self.time_zone)

    def month_start(self, t: dt.datetime) -> dt.datetime:
        """The first instant (UTC) of the local calendar month holding `t`."""
        local = ticks.utc(t).astimezone(self.zone)
        return _local_month(local.year, local.month, self.zone)

    def next_month_start(self, t: dt.datetime) -> dt.datetime:
        """The first local month start strictly after `t` (UTC)."""
        local = ticks.utc(t).astimezone(self.zone)
        year, month = divmod(local.year * 12 + local.month, 12)
        return _local_month(year, month + 1, self.zone)

    def period_from(self, start: dt.datetime) -> Period:
        """The period starting at `start` and ending at the next local month start."""
        start = ticks.utc(start)
        local = start.astimezone(self.zone)
        return Period(start, self.next_month_start(start), f"{local.year:04d}-{local.month:02d}")

    def period_of(self, hour: dt.datetime, closed_through: dt.datetime | None) -> Period:
        """The period holding `hour`: a closed one is found by its month, an open one
        starts no earlier than where the closed periods end."""
        start = self.month_start(hour)
        if closed_through is not None and hour >= closed_through > start:
            start = closed_through
        return self.period_from(start)


def _local_month(year: int, month: int, zone: zoneinfo.ZoneInfo) -> dt.datetime:
    return dt.datetime(year, month, 1, tzinfo=zone).astimezone(dt.UTC)


def check_time_zone(name: str) -> None:
    """Refuse a zone that does not exist, or whose months do not start on a whole UTC hour
    (charges are hourly, so a period must hold whole hours)."""
    try:
        zone = zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise SettingsError(
            f"{environment.Env.FINOPS_BILLING_TIME_ZONE} {name!r} is not a known IANA time zone"
        ) from None
    for year in _CHECKED_YEARS:
        for month in (1, 4, 7, 10):
            start = _local_month(year, month, zone)
            if start.minute or start.second:
                raise SettingsError(
                    f"{environment.Env.FINOPS_BILLING_TIME_ZONE} {name!r}: months there start at "
                    f"{start:%H:%M} UTC; "
                    "billing periods must start on a whole UTC hour"
                )


@dataclasses.dataclass(frozen=True, slots=True)
class LedgerFacts:
    """What the ledger says about settling, read by the charge run before it closes."""

    closed_through: dt.datetime | None
    """The end of the last closed period (None: nothing closed yet)."""
    first_hour: dt.datetime | None
    """An hour in the period of the cluster's earliest charged hour (None: no charges): only
    that period is asked for, so the ledger may answer with the start of that hour's UTC day
    when no period starts inside the day."""
    first_open: dt.datetime | None
    """The earliest hour with a charge row not yet final (None: all are final)."""
    allocation_boundary: dt.datetime | None
    """The earliest hour whose allocations may still change (None: all settled)."""


def closable(calendar: Calendar, facts: LedgerFacts, scheduled: dt.datetime) -> list[Period]:
    """The periods the run scheduled at `scheduled` closes, oldest first.

    Each must have ended at least the grace time before the scheduled hour, hold no charge
    row that is not final, and lie wholly before the allocation boundary; the first one
    that fails stops the list (periods close in order)."""
    anchor = ticks.floor_hour(scheduled)
    if facts.closed_through is not None:
        period = calendar.period_from(facts.closed_through)
    elif facts.first_hour is not None:
        period = calendar.period_of(facts.first_hour, None)
    else:
        return []
    out: list[Period] = []
    while _settled(period, facts, anchor, calendar.grace):
        out.append(period)
        period = calendar.period_from(period.end)
    return out


def _settled(period: Period, facts: LedgerFacts, anchor: dt.datetime, grace: dt.timedelta) -> bool:
    if anchor < period.end + grace:
        return False
    if facts.first_open is not None and facts.first_open < period.end:
        return False
    return facts.allocation_boundary is None or facts.allocation_boundary >= period.end


def why_open(
    calendar: Calendar, facts: LedgerFacts, scheduled: dt.datetime
) -> tuple[Period, str] | None:
    """The oldest open period that has ended, and what keeps it open (for the run's log);
    None when no ended period waits."""
    anchor = ticks.floor_hour(scheduled)
    start = facts.closed_through or facts.first_hour
    if start is None:
        return None
    period = calendar.period_of(start, facts.closed_through)
    for done in closable(calendar, facts, scheduled):
        period = calendar.period_from(done.end)
    if anchor < period.end:
        return None
    if anchor < period.end + calendar.grace:
        return period, f"in its grace time until {ticks.rfc3339(period.end + calendar.grace)}"
    if facts.first_open is not None and facts.first_open < period.end:
        return period, f"charges from {ticks.rfc3339(facts.first_open)} are not final yet"
    boundary = facts.allocation_boundary
    return period, f"allocations from {ticks.rfc3339(boundary or period.end)} are not final yet"


def invoice_id(cluster: str, namespace: str, period_start: dt.datetime, label: str) -> str:
    """The stable id of one statement: the same cluster, namespace and period always give
    the same id, and no other triple does (a digest of all three, with the period's label
    up front so people can read which month it is)."""
    key = f"{cluster}\0{namespace}\0{ticks.rfc3339(period_start)}".encode()
    return f"INV-{label}-{hashlib.sha256(key).hexdigest()[:12].upper()}"


@dataclasses.dataclass(frozen=True)
class PeriodIndex:
    """Which billing period an hour is invoiced in: a closed period as recorded when it
    closed, an open one by the calendar (starting where the closed ones end)."""

    calendar: Calendar
    closed: tuple[Period, ...] = ()

    @property
    def closed_through(self) -> dt.datetime | None:
        return self.closed[-1].end if self.closed else None

    def period_of(self, hour: dt.datetime) -> Period:
        through = self.closed_through
        if through is not None and ticks.utc(hour) < through:
            for period in reversed(self.closed):
                if period.contains(hour):
                    return period
        return self.calendar.period_of(hour, through)

    def starting(self, start: dt.datetime) -> Period:
        """The period that starts at `start` (where a correction is booked)."""
        for period in self.closed:
            if period.start == start:
                return period
        return self.calendar.period_from(start)

    def is_closed(self, period: Period) -> bool:
        through = self.closed_through
        return through is not None and period.end <= through

"""Monthly partitions of `subscription_charges`: made ahead of the rows, retired by setting.

Why partitions: a year of a large cluster is a hundred million charge rows. Split by UTC
month, a month's reads and writes touch one partition and its indexes, and a month that is
closed and old enough can leave the ledger whole (a detach, not a delete of millions of
rows). A charge run makes the partitions of the months it is about to write (rows of a month
without one land in the default partition and move in when it is made). Retention is off
unless `FINOPS_LEDGER_RETENTION_MONTHS` is set: then the partitions of months older than that
many closed months are detached (kept as tables named `retired_<partition>` for archiving)
or, with `FINOPS_LEDGER_RETENTION_ACTION=drop`, dropped. Only months whose every hour lies in
a closed billing period of every cluster in the ledger qualify.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import re
from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import sql

from finops.api import environment

_PARTITION = re.compile(r"^subscription_charges_y(\d{4})m(\d{2})$")


class RetentionSettingsError(ValueError):
    """A retention setting cannot be read; the message names the variable."""


class Action(enum.StrEnum):
    """What happens to a retired month's partition."""

    DETACH = "detach"
    DROP = "drop"


@dataclasses.dataclass(frozen=True)
class Retention:
    """How many closed months the ledger keeps (None: all of them) and what leaving means."""

    months: int | None = None
    action: Action = Action.DETACH

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Retention:
        """Parse the two settings; empty or unset months keeps everything."""
        months_name = environment.Env.FINOPS_LEDGER_RETENTION_MONTHS
        action_name = environment.Env.FINOPS_LEDGER_RETENTION_ACTION
        raw = env.get(months_name, "").strip()
        months = None
        if raw:
            if not raw.isdigit() or int(raw) < 1:
                raise RetentionSettingsError(
                    f"{months_name} must be a whole number of months (1 or more), got {raw!r}"
                )
            months = int(raw)
        action_raw = env.get(action_name, "").strip() or Action.DETACH.value
        try:
            action = Action(action_raw)
        except ValueError:
            choices = ", ".join(a.value for a in Action)
            raise RetentionSettingsError(
                f"{action_name} must be one of {choices}, got {action_raw!r}"
            ) from None
        return cls(months, action)


def month_start(instant: dt.datetime) -> dt.datetime:
    """The first instant of `instant`'s UTC month."""
    utc = instant.astimezone(dt.UTC)
    return dt.datetime(utc.year, utc.month, 1, tzinfo=dt.UTC)


def add_months(month: dt.datetime, count: int) -> dt.datetime:
    """The UTC month `count` months after (or before) the month starting at `month`."""
    index = month.year * 12 + month.month - 1 + count
    return dt.datetime(index // 12, index % 12 + 1, 1, tzinfo=dt.UTC)


def ensure(conn: psycopg.Connection[Any], *, start: dt.datetime, end: dt.datetime) -> list[str]:
    """Make the partitions of every UTC month that overlaps `[start, end)`; returns their
    names. Run it in a transaction of its own before the writes: attaching a partition locks
    the default partition briefly."""
    names: list[str] = []
    month = month_start(start)
    while month < end:
        row = conn.execute("SELECT finops_charge_partition(%s)", (month,)).fetchone()
        if row is not None and row[0] is not None:
            names.append(str(row[0]))
        month = add_months(month, 1)
    return names


def months(conn: psycopg.Connection[Any]) -> list[dt.datetime]:
    """The UTC months that have a partition of their own, in order."""
    rows = conn.execute(
        """
        SELECT c.relname FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
        WHERE h.inhparent = 'subscription_charges'::regclass
        """
    ).fetchall()
    found = []
    for (name,) in rows:
        match = _PARTITION.match(str(name))
        if match:
            found.append(dt.datetime(int(match[1]), int(match[2]), 1, tzinfo=dt.UTC))
    return sorted(found)


_CLOSED_EVERYWHERE = """
    WITH RECURSIVE c AS (
        (SELECT cluster FROM charge_days ORDER BY cluster LIMIT 1)
        UNION ALL
        SELECT (SELECT d.cluster FROM charge_days d WHERE d.cluster > c.cluster
                ORDER BY d.cluster LIMIT 1)
        FROM c WHERE c.cluster IS NOT NULL
    )
    SELECT min(finops_closed_through(cluster)),
           coalesce(bool_and(finops_closed_through(cluster) IS NOT NULL), false)
    FROM c WHERE cluster IS NOT NULL
"""


def closed_everywhere(conn: psycopg.Connection[Any]) -> dt.datetime | None:
    """The earliest end of the last closed period over every cluster with charges; None when
    some cluster has closed nothing (or there are no charges)."""
    row = conn.execute(_CLOSED_EVERYWHERE).fetchone()
    if row is None or row[0] is None or not row[1]:
        return None
    value: dt.datetime = row[0]
    return value.astimezone(dt.UTC)


def retirable(
    partitioned: list[dt.datetime], closed: dt.datetime | None, keep: int
) -> list[dt.datetime]:
    """The months to retire: whole months before the `keep` closed UTC months that end by
    `closed` (a month partly closed counts as open)."""
    if closed is None:
        return []
    cutoff = add_months(month_start(closed), -keep)
    return [m for m in partitioned if add_months(m, 1) <= cutoff]


def retire(conn: psycopg.Connection[Any], retention: Retention) -> list[dt.datetime]:
    """Apply `retention` in one transaction: each retired month's partition leaves the
    ledger and its sums go with it. Returns the months retired (none when off)."""
    if retention.months is None:
        return []
    with conn.transaction():
        chosen = retirable(months(conn), closed_everywhere(conn), retention.months)
        for month in chosen:
            _retire_one(conn, month, retention.action)
    return chosen


def _retire_one(conn: psycopg.Connection[Any], month: dt.datetime, action: Action) -> None:
    name = f"subscription_charges_y{month:%Y}m{month:%m}"
    ident = sql.Identifier(name)
    conn.execute(sql.SQL("ALTER TABLE subscription_charges DETACH PARTITION {}").format(ident))
    end = add_months(month, 1)
    conn.execute("DELETE FROM charge_days WHERE day >= %s AND day < %s", (month, end))
    conn.execute("DELETE FROM charge_namespace_days WHERE day >= %s AND day < %s", (month, end))
    conn.execute("DELETE FROM charge_months WHERE month = %s", (month,))
    if action is Action.DROP:
        conn.execute(sql.SQL("DROP TABLE {}").format(ident))
    else:
        retired = sql.Identifier(f"retired_{name}")
        conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(ident, retired))

"""The watermarks (read through the daily sums and index probes) equal the exact ones read
from every charge row (tests/oracle/watermarks.py), whatever holes and open hours there are,
and whatever time zone the session is in."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st
from psycopg import sql

from finops.store import charges as store_charges
from finops.store import mirror
from tests.db import builders
from tests.oracle import watermarks as oracle

BASE = dt.datetime(2026, 4, 28, 19, tzinfo=dt.UTC)
"""Generated hours start here and run over several UTC midnights."""
MARCH_END = dt.datetime(2026, 3, 29, 19, tzinfo=dt.UTC)
"""Hours from here run into April: a 31-day month ends, and Europe and America have just
moved their clocks, so a month stepped in a session's zone is not a UTC month."""
SPAN = 110
UIDS = ("uid-0", "uid-1", "uid-2")

_subscription = st.fixed_dictionaries(
    {
        "first": st.integers(0, 40),
        "length": st.integers(0, SPAN - 41),
        "missing": st.sets(st.integers(0, SPAN), max_size=6),
        "open_from": st.one_of(st.none(), st.integers(0, SPAN)),
        "usage_open": st.sets(st.integers(0, SPAN), max_size=2),
        "no_usage": st.sets(st.integers(0, SPAN), max_size=8),
        "relabel": st.one_of(st.none(), st.integers(0, SPAN)),
    }
)


def _versions(conn: psycopg.Connection[Any]) -> tuple[int, dict[tuple[str, int], int]]:
    offering = builders.offering_version(conn)
    versions = {}
    for uid in UIDS:
        for generation in (1, 2):
            versions[(uid, generation)] = mirror.upsert_subscription_version(
                conn,
                cluster=builders.CLUSTER,
                uid=uid,
                namespace="team-a",
                name=uid,
                generation=generation,
                resource_version=str(generation),
                spec={},
                namespace_labels={},
            )
    return offering, versions


def _rows(
    uid: str,
    sub: dict[str, Any],
    offering: int,
    versions: dict[tuple[str, int], int],
    base: dt.datetime,
) -> list[tuple[Any, ...]]:
    out = []
    for h in range(sub["first"], sub["first"] + sub["length"] + 1):
        hour = base + dt.timedelta(hours=h)
        version = versions[(uid, 2 if sub["relabel"] is not None and h >= sub["relabel"] else 1)]
        final = sub["open_from"] is None or h < sub["open_from"]
        if h not in sub["missing"]:
            out.append((uid, hour, "subscription", final, offering, version))
        if h not in sub["no_usage"]:  # an hour may have no row at all
            out.append(
                (uid, hour, "cpuHour", final and h not in sub["usage_open"], offering, version)
            )
    return out


def _examples(count: int) -> settings:
    return settings(
        max_examples=count,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


_subs = st.lists(_subscription, min_size=1, max_size=3)
_HOLE_IN_MAY = {
    "first": 30,
    "length": 50,
    "missing": {66},
    "open_from": None,
    "usage_open": set(),
    "relabel": None,
    "no_usage": set(),
}
"""Fee rows from 30 April 01:00 to 2 May 03:00 UTC (hours 30 to 80), 1 May 13:00 (66) missing."""
_since = st.one_of(st.none(), st.integers(0, SPAN))


@seed(20261207)
@_examples(200)
@given(subs=_subs, since=_since)
# The fee rows end at hour 6 and hour 7 has no row at all; the first open row is usage at 8.
# The watermark is 6, not the hour before the first open one.
@example(
    subs=[
        {
            "first": 0,
            "length": 10,
            "missing": {7, 8, 9, 10},
            "open_from": None,
            "usage_open": {8},
            "relabel": None,
            "no_usage": {7},
        }
    ],
    since=None,
)
# The bound falls early in May (06:00 on the 1st): the rows of May before it are counted and
# taken off the month's sum, and a hole later in May must still be found.
@example(
    subs=[
        {
            "first": 0,
            "length": 69,
            "missing": {65},
            "open_from": None,
            "usage_open": set(),
            "relabel": None,
            "no_usage": set(),
        }
    ],
    since=60,
)
# The bound's own hour (59, the closed periods' last) has no fee row: the span starts at the
# next fee row, found past the key lookup of the bound's hour; the second Subscription's fee
# rows begin only after the bound.
@example(
    subs=[
        {
            "first": 40,
            "length": 40,
            "missing": {59, 70},
            "open_from": None,
            "usage_open": set(),
            "relabel": None,
            "no_usage": set(),
        },
        {
            "first": 64,
            "length": 20,
            "missing": set(),
            "open_from": 80,
            "usage_open": set(),
            "relabel": None,
            "no_usage": set(),
        },
    ],
    since=60,
)
# The bound is 1 May 00:00 (53), so the span starts in April's last hour, whose rows in the
# span are that hour alone; the hole is in May. And a bound an hour later (54): the span
# starts on May's first hour, with no rows of May before it.
@example(subs=[{**_HOLE_IN_MAY, "open_from": 75}], since=53)
@example(subs=[_HOLE_IN_MAY], since=54)
def test_the_watermarks_equal_the_exact_ones(
    ledger_dsn: str, subs: list[dict[str, Any]], since: int | None
) -> None:
    _check(ledger_dsn, subs, since, BASE, None)


@seed(20261207)
@_examples(100)
@given(
    subs=_subs,
    since=_since,
    zone=st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Sydney"]),
)
# A hand-made hole at 20:00 on 29 March (UTC): in Europe/Berlin a month after 1 March
# 00:00 UTC is 31 March 23:00 UTC, and the watermark once ran past the hole to 31 March.
@example(
    subs=[
        {
            "first": 0,
            "length": 52,
            "missing": {1},
            "open_from": None,
            "usage_open": set(),
            "relabel": None,
            "no_usage": set(),
        }
    ],
    since=None,
    zone="Europe/Berlin",
)
def test_the_watermarks_do_not_depend_on_the_sessions_time_zone(
    ledger_dsn: str, subs: list[dict[str, Any]], since: int | None, zone: str
) -> None:
    _check(ledger_dsn, subs, since, MARCH_END, zone)


def _check(
    ledger_dsn: str,
    subs: list[dict[str, Any]],
    since: int | None,
    base: dt.datetime,
    zone: str | None,
) -> None:
    bound = None if since is None else base + dt.timedelta(hours=since)
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE subscription_charges")
        offering, versions = _versions(conn)
        rows = [
            r
            for uid, sub in zip(UIDS, subs, strict=False)
            for r in _rows(uid, sub, offering, versions, base)
        ]
        with conn.cursor() as cur:
            cur.executemany(
                """
                INSERT INTO subscription_charges (cluster, subscription_uid, hour, source,
                    quantity, unit_price_micros, amount_micros, currency, finalized,
                    offering_version_id, subscription_version_id)
                VALUES (%s, %s, %s, %s, 1, 1, 1, 'EUR', %s, %s, %s)
                """,
                [(builders.CLUSTER, *r) for r in rows],
            )
        args: dict[str, Any] = {
            "cluster": builders.CLUSTER,
            "subscription_uids": [*UIDS, "uid-never"],
            "since": bound,
        }
        expected = oracle.watermarks(conn, **args)
        if zone is not None:
            conn.execute(sql.SQL("SET TIME ZONE {}").format(zone))
        assert store_charges.watermarks(conn, **args) == expected

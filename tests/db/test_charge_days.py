"""The daily sums (`charge_days`) can never disagree with the charge rows, and the dashboard's
reads over them equal the exact sums of the hourly rows (tests/oracle/ledger_sums.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from finops.store import charges as store_charges
from finops.store import dashboard, mirror, partitions, spans
from tests.db import builders
from tests.oracle import ledger as oracle_ledger
from tests.oracle import ledger_sums

BASE = dt.datetime(2026, 4, 29, 20, tzinfo=dt.UTC)
"""Hours of the generated rows run from here over UTC midnights and into the next month."""
HOURS = 100
APRIL, MAY = dt.datetime(2026, 4, 1, tzinfo=dt.UTC), dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
MONTH_DAYS = [
    (APRIL, APRIL + dt.timedelta(days=29)),
    (APRIL, APRIL + dt.timedelta(days=28)),
    (MAY, MAY),
    (MAY, MAY + dt.timedelta(days=1)),
    (MAY, MAY + dt.timedelta(days=3)),
]
CLUSTERS = ("default", "other")
SOURCES = ("subscription", "cpuHour", "ramGbHour")
NAMESPACES = ("team-a", "team-b")


def _versions(conn: psycopg.Connection[Any]) -> tuple[list[int], list[int]]:
    """Two Offering versions and three Subscription versions over two namespaces."""
    offerings = [builders.offering_version(conn, generation=g) for g in (1, 2)]
    subs = [
        mirror.upsert_subscription_version(
            conn,
            cluster=cluster,
            uid=f"uid-{n}",
            namespace=NAMESPACES[n % 2],
            name=f"sub-{n}",
            generation=1,
            resource_version="1",
            spec={},
            namespace_labels={},
        )
        for n in range(3)
        for cluster in CLUSTERS
    ]
    return offerings, subs


_row = st.tuples(
    st.sampled_from(CLUSTERS),
    st.integers(0, 2),  # which Subscription
    st.integers(0, HOURS - 1),
    st.sampled_from(SOURCES),
    st.integers(0, 5_000_000),
    st.booleans(),
    st.sampled_from(("EUR", "USD")),
    st.integers(0, 1),  # which Offering version
)
_window = st.tuples(st.sampled_from(CLUSTERS), st.integers(0, HOURS), st.integers(0, HOURS))
_op = st.one_of(
    st.tuples(st.just("upsert"), st.lists(_row, min_size=1, max_size=25)),
    st.tuples(st.just("delete"), _window),
    st.tuples(st.just("update"), _window, st.integers(-3, 3), st.booleans(), st.integers(0, 1)),
    st.tuples(st.just("partition"), st.integers(0, HOURS - 1)),
    st.tuples(st.just("truncate")),
)


def _apply(
    conn: psycopg.Connection[Any],
    op: tuple[Any, ...],
    offerings: list[int],
    subs: list[int],
    spread: int = 1,
) -> None:
    kind = op[0]
    if kind == "upsert":
        batch: dict[tuple[str, int, int, str], tuple[Any, ...]] = {}
        for cluster, n, h, source, amount, final, cur, o in op[1]:
            batch[(cluster, n, h, source)] = (amount, final, cur, o)
        params = [
            (
                c,
                f"uid-{n}",
                BASE + dt.timedelta(hours=h * spread),
                s,
                amount,
                final,
                cur,
                offerings[o],
                subs[n * 2 + CLUSTERS.index(c)],
            )
            for (c, n, h, s), (amount, final, cur, o) in sorted(batch.items())
        ]
        with conn.cursor() as cur:
            cur.executemany(
                """
                INSERT INTO subscription_charges (cluster, subscription_uid, hour, source,
                    quantity, unit_price_micros, amount_micros, finalized, currency,
                    offering_version_id, subscription_version_id)
                VALUES (%s, %s, %s, %s, 1, 0, %s, %s, %s, %s, %s)
                ON CONFLICT (cluster, subscription_uid, hour, source) DO UPDATE SET
                    amount_micros = EXCLUDED.amount_micros, finalized = EXCLUDED.finalized,
                    currency = EXCLUDED.currency,
                    offering_version_id = EXCLUDED.offering_version_id
                """,
                params,
            )
        return
    if kind == "delete" or kind == "update":
        cluster, a, b = op[1]
        lo, hi = BASE + dt.timedelta(hours=min(a, b)), BASE + dt.timedelta(hours=max(a, b))
        if kind == "delete":
            conn.execute(
                "DELETE FROM subscription_charges WHERE cluster = %s AND hour >= %s AND hour < %s",
                (cluster, lo, hi),
            )
            return
        conn.execute(
            """
            UPDATE subscription_charges SET amount_micros = amount_micros + %s + 3,
                finalized = %s, offering_version_id = %s
            WHERE cluster = %s AND hour >= %s AND hour < %s
            """,
            (op[2], op[3], offerings[op[4]], cluster, lo, hi),
        )
        return
    if kind == "partition":
        month = BASE + dt.timedelta(hours=op[1])
        partitions.ensure(conn, start=month, end=month + dt.timedelta(hours=1))
        return
    conn.execute("TRUNCATE subscription_charges")


@seed(20261205)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_op, min_size=1, max_size=8))
def test_the_daily_sums_always_equal_the_rows_they_sum(
    ledger_dsn: str, ops: list[tuple[Any, ...]]
) -> None:
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE subscription_charges")
        offerings, subs = _versions(conn)
        for op in ops:
            _apply(conn, op, offerings, subs)
            assert ledger_sums.kept_day_sums(conn) == ledger_sums.day_sums(conn), op
        uids = [f"uid-{n}" for n in range(3)]
        for cluster in CLUSTERS:
            for month, day in MONTH_DAYS:
                # The read-back of a charge run at the day's first hour, inside it and at its
                # last (rows after it are those of a replayed hour).
                for at in (day, day + dt.timedelta(hours=5), day + dt.timedelta(hours=23)):
                    sums = store_charges.bucket_sums(
                        conn, cluster=cluster, subscription_uids=uids, hour=at
                    )
                    exact = [
                        oracle_ledger.sums(
                            conn, cluster=cluster, subscription_uids=uids, start=a, end=b
                        )
                        for a, b in ((month, day), (day, at), (at, at + dt.timedelta(hours=1)))
                    ]
                    assert list(sums) == [
                        {
                            u: kept
                            for u, per in w.items()
                            if (kept := {s: a for s, a in per.items() if a})
                        }
                        for w in exact
                    ]


@seed(20261207)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_op, min_size=1, max_size=8), commit=st.booleans())
def test_a_transactions_writes_reach_the_sums_at_its_commit_and_only_then(
    ledger_dsn: str, ops: list[tuple[Any, ...]], commit: bool
) -> None:
    """Several writing statements in one transaction (what a charge run does): another
    session sees the sums of before until the commit, then the sums of every row the
    transaction left (a row inserted and deleted again leaves no empty sum); a rollback
    leaves them as they were. Nothing stays pending either way."""
    with (
        psycopg.connect(ledger_dsn, autocommit=True) as conn,
        psycopg.connect(ledger_dsn, autocommit=True) as other,
    ):
        conn.execute("TRUNCATE subscription_charges")
        offerings, subs = _versions(conn)
        _apply(
            conn, ("upsert", [("default", 0, 3, "cpuHour", 10, False, "EUR", 0)]), offerings, subs
        )
        before = ledger_sums.kept_day_sums(conn)
        try:
            with conn.transaction():
                for op in ops:
                    _apply(conn, op, offerings, subs)
                if not any(op[0] in ("truncate", "partition") for op in ops):
                    # (those lock the ledger against readers until the transaction ends)
                    assert ledger_sums.kept_day_sums(other) == before == ledger_sums.day_sums(other)
                if not commit:
                    raise _RolledBack
        except _RolledBack:
            pass
        kept = ledger_sums.kept_day_sums(other)
        assert kept == ledger_sums.day_sums(other), ops
        assert kept == before or commit
        assert all(row[-1] > 0 for table in kept for row in table)
        assert conn.execute("SELECT count(*) FROM charge_sums_pending").fetchone() == (0,)


class _RolledBack(Exception):
    """Leaves the transaction of the test above by rolling it back."""


def test_a_statement_that_fails_leaves_the_daily_sums_as_they_were(
    conn: psycopg.Connection[Any],
) -> None:
    offerings, subs = _versions(conn)
    _apply(conn, ("upsert", [("default", 0, 3, "cpuHour", 10, False, "EUR", 0)]), offerings, subs)
    conn.commit()
    before = ledger_sums.kept_day_sums(conn)
    try:
        with conn.transaction():
            _apply(
                conn,
                ("upsert", [("default", 0, 4, "cpuHour", 99, False, "EUR", 0)]),
                offerings,
                subs,
            )
            conn.execute("SELECT 1/0")
    except psycopg.errors.DivisionByZero:
        pass
    assert ledger_sums.kept_day_sums(conn) == before == ledger_sums.day_sums(conn)


@seed(20261206)
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=st.lists(_row, min_size=1, max_size=40),
    start=st.integers(0, HOURS),
    length=st.integers(0, HOURS),
    by_subscription=st.booleans(),
    namespaces=st.sampled_from([NAMESPACES, NAMESPACES[:1], NAMESPACES[1:]]),
    spread=st.sampled_from([1, 29]),  # 29: rows over four months, windows of whole months
)
def test_the_dashboards_daily_reads_equal_the_sums_of_the_hourly_rows(
    ledger_dsn: str,
    rows: list[tuple[Any, ...]],
    start: int,
    length: int,
    by_subscription: bool,
    namespaces: tuple[str, ...],
    spread: int,
) -> None:
    lo = BASE + dt.timedelta(hours=start * spread)
    hi = lo + dt.timedelta(hours=length * spread)
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE subscription_charges")
        offerings, subs = _versions(conn)
        _apply(conn, ("upsert", rows), offerings, subs, spread)
        group = dashboard.GroupBy.SUBSCRIPTION if by_subscription else dashboard.GroupBy.SOURCE
        points = dashboard.cost_series(
            conn,
            cluster="default",
            namespaces=namespaces,
            start=lo,
            end=hi,
            step=dashboard.Step.DAY,
            group_by=group,
        )
        assert [(p.bucket, p.key, p.currency, p.amount_micros) for p in points] == (
            ledger_sums.daily_series(
                conn,
                cluster="default",
                namespaces=namespaces,
                start=lo,
                end=hi,
                by_subscription=by_subscription,
            )
        )
        got = dashboard.cost_breakdown(
            conn, cluster="default", namespaces=namespaces, start=lo, end=hi
        )
        assert [
            (
                r.namespace,
                r.subscription,
                r.offering_namespace,
                r.offering,
                r.source,
                r.currency,
                r.total_micros,
                r.finalized_micros,
            )
            for r in got
        ] == ledger_sums.breakdown(conn, cluster="default", namespaces=namespaces, start=lo, end=hi)


def test_whole_months_are_the_utc_months_inside_the_whole_days() -> None:
    may, june, july = (dt.datetime(2026, m, 1, tzinfo=dt.UTC) for m in (5, 6, 7))
    assert spans.whole_months(may, july) == (may, july)
    assert spans.whole_months(may + dt.timedelta(days=1), july) == (june, july)
    assert spans.whole_months(may + dt.timedelta(days=1), june + dt.timedelta(days=3)) == (
        june + dt.timedelta(days=3),
        june + dt.timedelta(days=3),
    )


def test_whole_days_are_the_utc_days_inside_the_window() -> None:
    day = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    assert spans.whole_days(day, day + dt.timedelta(days=3)) == (
        day,
        day + dt.timedelta(days=3),
    )
    lo, hi = day + dt.timedelta(hours=5), day + dt.timedelta(days=2, hours=1)
    assert spans.whole_days(lo, hi) == (day + dt.timedelta(days=1), day + dt.timedelta(days=2))
    assert spans.whole_days(lo, lo + dt.timedelta(hours=3)) == (
        lo + dt.timedelta(hours=3),
        lo + dt.timedelta(hours=3),
    )


def _hot_updates(conn: psycopg.Connection[Any], table: str) -> tuple[int, int]:
    """(updates, heap-only updates) of `table` this backend has not reported yet."""
    row = conn.execute(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s",
        (table,),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_hourly_runs_update_the_month_sums_in_place(conn: psycopg.Connection[Any]) -> None:
    """The hourly pattern (promote the open hour, write the next one) changes each month's and
    day's sum in two statements; the sums take both changes in one update at commit
    (migration 0026), in place on their page (migration 0023), so no run adds an index entry
    for them, the first or a later one."""
    offering = builders.offering_version(conn)
    for n in range(600):  # a few full pages of sums
        builders.subscription_version(conn, uid=f"page-{n}")
    write = """
        INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,
            unit_price_micros, amount_micros, finalized, currency, offering_version_id,
            subscription_version_id)
        SELECT v.cluster, v.uid, %(hour)s, 'subscription', 1, 0, 7, false, 'USD',
               %(offering)s, v.id
        FROM subscription_versions v ORDER BY v.uid
    """
    promote = "UPDATE subscription_charges SET finalized = true WHERE hour = %(hour)s"
    partitions.ensure(conn, start=BASE, end=BASE + dt.timedelta(hours=4))
    conn.execute(write, {"hour": BASE, "offering": offering})
    conn.commit()
    for k in range(1, 4):
        before, hour = BASE + dt.timedelta(hours=k - 1), BASE + dt.timedelta(hours=k)
        # The counts are the backend's, kept until it reports them: differences, read inside
        # the run's transaction (nothing is reported in the middle of one).
        months_0, months_hot_0 = _hot_updates(conn, "charge_months")
        days_0, days_hot_0 = _hot_updates(conn, "charge_days")
        conn.execute(promote, {"hour": before})
        conn.execute(write, {"hour": hour, "offering": offering})
        # What commit does first: the transaction's changes added to the sums.
        conn.execute("SET CONSTRAINTS charge_sums_at_commit IMMEDIATE")
        months, months_hot = _hot_updates(conn, "charge_months")
        days, days_hot = _hot_updates(conn, "charge_days")
        conn.commit()
        months, months_hot = months - months_0, months_hot - months_hot_0
        days, days_hot = days - days_0, days_hot - days_hot_0
        assert months == 600 and months_hot == months, f"run {k}"
        assert days == 600 and days_hot == days, f"run {k}"
    sums = conn.execute("SELECT sum(amount_micros), sum(charge_rows) FROM charge_months")
    assert sums.fetchone() == (7 * 600 * 4, 600 * 4)

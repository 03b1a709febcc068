"""Monthly partitions of the charge ledger: made ahead, filled from the default partition,
retired only when closed and older than the retention setting."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import psycopg
import pytest

from finops.api import environment
from finops.store import partitions
from tests.db import builders
from tests.oracle import ledger_sums

JAN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _month(n: int) -> dt.datetime:
    return partitions.add_months(JAN, n)


def _fill(conn: psycopg.Connection[Any], cluster: str, months: int, *, final_months: int) -> None:
    """Two rows a day over `months` months from January 2026; the first `final_months`
    months finalized."""
    offering = builders.offering_version(conn)
    version = builders.subscription_version(conn)
    conn.execute(
        """
        INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,
            unit_price_micros, amount_micros, currency, finalized, offering_version_id,
            subscription_version_id)
        SELECT %s, 'sub-uid-1', h, s, 1, 5, 5, 'EUR', h < %s, %s, %s
        FROM generate_series(%s::timestamptz, %s::timestamptz - interval '1 hour',
                             interval '12 hours') h,
             (VALUES ('subscription'), ('cpuHour')) x(s)
        """,
        (cluster, _month(final_months), offering, version, JAN, _month(months)),
    )


def _close(conn: psycopg.Connection[Any], cluster: str, months: int) -> None:
    for n in range(months):
        conn.execute(
            """
            INSERT INTO billing_periods (cluster, period_start, period_end, label, time_zone,
                closed_by_run) VALUES (%s, %s, %s, %s, 'UTC', %s)
            """,
            (cluster, _month(n), _month(n + 1), f"{_month(n):%Y-%m}", _month(n + 1)),
        )


def _where(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT tableoid::regclass::text, count(*) FROM subscription_charges GROUP BY 1"
    ).fetchall()
    return {str(t): int(n) for t, n in rows}


def test_a_months_partition_takes_that_months_rows_from_the_default_partition(
    conn: psycopg.Connection[Any],
) -> None:
    _fill(conn, builders.CLUSTER, 3, final_months=0)
    conn.commit()  # the sums of the rows written are added at commit
    before = conn.execute("SELECT * FROM subscription_charges ORDER BY 1, 2, 3, 4").fetchall()
    days = ledger_sums.kept_day_sums(conn)
    made = partitions.ensure(conn, start=_month(1), end=_month(1) + dt.timedelta(hours=1))
    conn.commit()
    assert made == ["subscription_charges_y2026m02"]
    assert _where(conn) == {"subscription_charges_default": 248, made[0]: 112}
    assert partitions.ensure(conn, start=_month(1), end=_month(2)) == made  # already there
    after = conn.execute("SELECT * FROM subscription_charges ORDER BY 1, 2, 3, 4").fetchall()
    assert after == before
    assert ledger_sums.kept_day_sums(conn) == days == ledger_sums.day_sums(conn)
    assert partitions.months(conn) == [_month(1)]


def test_a_month_made_meanwhile_by_another_run_is_found_not_made_again(ledger_dsn: str) -> None:
    """Two runs that both miss a month's partition: the second waits for the first, then must
    see the partition the first committed meanwhile (not fail with "already exists")."""
    month = _month(10)
    with (
        psycopg.connect(ledger_dsn) as first,
        psycopg.connect(ledger_dsn, autocommit=True) as second,
        psycopg.connect(ledger_dsn, autocommit=True) as probe,
    ):
        pid = second.info.backend_pid
        made = partitions.ensure(first, start=month, end=month + dt.timedelta(hours=1))
        outcome: list[object] = []

        def run() -> None:
            try:
                with second.transaction():
                    outcome.append(
                        partitions.ensure(second, start=month, end=month + dt.timedelta(hours=1))
                    )
            except psycopg.Error as exc:
                outcome.append(exc)

        waiting = threading.Thread(target=run)
        waiting.start()
        deadline = time.monotonic() + 30
        while not probe.execute(
            "SELECT count(*) > 0 FROM pg_locks WHERE pid = %s AND NOT granted", (pid,)
        ).fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline, "the second run never waited for the first"
            time.sleep(0.01)
        first.commit()
        waiting.join(timeout=30)
    assert outcome == [made] == [["subscription_charges_y2026m11"]]


def test_retention_retires_only_closed_months_older_than_the_setting(
    conn: psycopg.Connection[Any],
) -> None:
    _fill(conn, builders.CLUSTER, 4, final_months=3)
    partitions.ensure(conn, start=JAN, end=_month(4))
    _close(conn, builders.CLUSTER, 3)  # January to March closed, April open
    conn.commit()
    off = partitions.retire(conn, partitions.Retention())
    assert off == []
    retired = partitions.retire(conn, partitions.Retention(months=1))
    # Keep one closed month (March): January and February leave the ledger.
    assert retired == [JAN, _month(1)]
    assert partitions.months(conn) == [_month(2), _month(3)]
    assert conn.execute("SELECT min(hour) FROM subscription_charges").fetchone() == (_month(2),)
    assert conn.execute(
        "SELECT count(*) FROM retired_subscription_charges_y2026m01"
    ).fetchone() == (124,)
    assert ledger_sums.kept_day_sums(conn) == ledger_sums.day_sums(conn)
    assert partitions.retire(conn, partitions.Retention(months=1)) == []


def test_a_cluster_that_closed_nothing_holds_every_month(conn: psycopg.Connection[Any]) -> None:
    _fill(conn, builders.CLUSTER, 4, final_months=3)
    _fill(conn, "other", 1, final_months=0)
    partitions.ensure(conn, start=JAN, end=_month(4))
    _close(conn, builders.CLUSTER, 3)
    conn.commit()
    assert partitions.retire(conn, partitions.Retention(months=1)) == []
    assert partitions.months(conn) == [JAN, _month(1), _month(2), _month(3)]


def test_retention_can_drop_instead_of_detaching(conn: psycopg.Connection[Any]) -> None:
    _fill(conn, builders.CLUSTER, 3, final_months=3)
    partitions.ensure(conn, start=JAN, end=_month(3))
    _close(conn, builders.CLUSTER, 3)
    conn.commit()
    dropped = partitions.retire(conn, partitions.Retention(2, partitions.Action.DROP))
    assert dropped == [JAN]
    assert conn.execute(
        "SELECT to_regclass('subscription_charges_y2026m01'),"
        " to_regclass('retired_subscription_charges_y2026m01')"
    ).fetchone() == (None, None)
    assert ledger_sums.kept_day_sums(conn) == ledger_sums.day_sums(conn)


def test_retention_settings_are_read_and_checked_by_name() -> None:
    months, action = (
        environment.Env.FINOPS_LEDGER_RETENTION_MONTHS,
        environment.Env.FINOPS_LEDGER_RETENTION_ACTION,
    )
    assert partitions.Retention.from_env({}) == partitions.Retention(None)
    assert partitions.Retention.from_env({months: "13", action: "drop"}) == partitions.Retention(
        13, partitions.Action.DROP
    )
    with pytest.raises(partitions.RetentionSettingsError, match=months):
        partitions.Retention.from_env({months: "0"})
    with pytest.raises(partitions.RetentionSettingsError, match=action):
        partitions.Retention.from_env({months: "3", action: "archive"})


def test_months_without_closed_periods_are_never_retirable() -> None:
    months = [JAN, _month(1), _month(2)]
    assert partitions.retirable(months, None, 1) == []
    assert partitions.retirable(months, _month(2), 1) == [JAN]
    # A period that ends mid-month (a calendar off UTC) counts that month as open.
    assert partitions.retirable(months, _month(2) + dt.timedelta(hours=5), 1) == [JAN]
    assert partitions.retirable(months, _month(2) - dt.timedelta(hours=1), 1) == []

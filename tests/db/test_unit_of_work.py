"""The ledger's unit of work: nothing is kept unless committed, also with two writers at once."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest

from finops.store import pool, unit
from tests.db import builders
from tests.db.builders import CLUSTER, hour
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger


def _fees(conn: pool.Connection, hours: int) -> list[charge_rows.ChargeRow]:
    with unit.begin(conn) as work:
        offering = builders.offering_version(conn)
        subscription = builders.subscription_version(conn)
        work.commit()
    return [
        charge_rows.ChargeRow(
            cluster=CLUSTER,
            subscription_uid="sub-uid-1",
            hour=hour(h),
            source="subscription",
            quantity=Decimal(1),
            unit_price_micros=1_000_000,
            amount_micros=1_000_000,
            currency="USD",
            finalized=True,
            offering_version_id=offering,
            subscription_version_id=subscription,
        )
        for h in range(hours)
    ]


def _count(conn: pool.Connection) -> int:
    row = conn.execute("SELECT count(*) FROM subscription_charges").fetchone()
    assert row is not None
    return int(row[0])


def test_a_block_without_commit_leaves_the_ledger_untouched(ledger_dsn: str) -> None:
    with unit.session(ledger_dsn) as conn:
        rows = _fees(conn, 3)
        with unit.begin(conn) as work:
            assert oracle_ledger.upsert(work.conn, rows) == 3
        assert _count(conn) == 0


def test_a_committed_block_is_seen_by_another_session(ledger_dsn: str) -> None:
    with unit.session(ledger_dsn) as conn, unit.session(ledger_dsn) as other:
        rows = _fees(conn, 3)
        with unit.begin(conn) as work:
            oracle_ledger.upsert(work.conn, rows)
            assert _count(other) == 0
            work.commit()
        assert _count(other) == 3


def test_an_exception_after_commit_still_rolls_everything_back(ledger_dsn: str) -> None:
    with unit.session(ledger_dsn) as conn:
        rows = _fees(conn, 2)
        with pytest.raises(RuntimeError, match="late failure"), unit.begin(conn) as work:
            oracle_ledger.upsert(work.conn, rows)
            work.commit()
            raise RuntimeError("late failure")
        assert _count(conn) == 0


def test_two_concurrent_writers_keep_only_the_committed_one(ledger_dsn: str) -> None:
    """Writer A upserts and then abandons its unit; writer B, running at the same time on its
    own connection, does not see A's rows, upserts the same keys (waiting on A's row locks if
    A has not ended yet) and commits: the ledger holds exactly B's rows."""
    with unit.session(ledger_dsn) as setup:
        rows = _fees(setup, 4)
    a_wrote, b_read = threading.Event(), threading.Event()
    seen_by_b: list[int] = []
    written_by_b: list[int] = []
    failures: list[BaseException] = []

    def writer_a() -> None:
        try:
            with unit.session(ledger_dsn) as conn, unit.begin(conn) as work:
                oracle_ledger.upsert(work.conn, rows)
                a_wrote.set()
                b_read.wait()
        except BaseException as exc:  # surfaced by the assertion below
            failures.append(exc)
            a_wrote.set()

    def writer_b() -> None:
        try:
            a_wrote.wait()
            with unit.session(ledger_dsn) as conn, unit.begin(conn) as work:
                seen_by_b.append(_count(conn))
                b_read.set()
                written_by_b.append(oracle_ledger.upsert(work.conn, rows))
                work.commit()
        except BaseException as exc:
            failures.append(exc)
            b_read.set()

    threads = [threading.Thread(target=writer_a), threading.Thread(target=writer_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert seen_by_b == [0]
    assert written_by_b == [4]
    with unit.session(ledger_dsn) as conn:
        assert _count(conn) == 4


def _jit(conn: pool.Connection) -> str:
    row = conn.execute("SELECT current_setting('jit')").fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize("session_value", ["on", "off"])
def test_planned_afresh_turns_jit_and_prepared_statements_off_and_restores_them(
    ledger_dsn: str, session_value: str
) -> None:
    with unit.session(ledger_dsn) as conn:
        conn.execute(f"SET jit = {session_value}")
        threshold = conn.prepare_threshold
        with unit.planned_afresh(conn):
            assert _jit(conn) == "off"
            for _ in range(8):  # more than psycopg's threshold for preparing one
                conn.execute("SELECT count(*) FROM schema_migrations WHERE version > %s", (0,))
            assert _prepared(conn) == 0
        assert _jit(conn) == session_value
        assert conn.prepare_threshold == threshold is not None
        with pytest.raises(RuntimeError), unit.planned_afresh(conn), unit.begin(conn) as work:
            work.conn.execute("SELECT 1")
            raise RuntimeError("a failed write")
        assert _jit(conn) == session_value
        assert conn.prepare_threshold == threshold


def _prepared(conn: pool.Connection) -> int:
    row = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    assert row is not None
    return int(row[0])

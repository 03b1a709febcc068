"""provider_allocations and pricebooks: exact storage, idempotent replays, finalization."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from finops.billing import allocation
from finops.store import allocations
from tests.db import builders
from tests.db.builders import CLUSTER, alloc, hour
from tests.oracle import ledger as oracle_ledger


def ingest(conn: psycopg.Connection[Any], rows: list[allocation.AllocationRow], **kw: Any) -> int:
    book = builders.pricebook(conn)
    options = {"pricebook_id": book, "currency": "USD", "finalized": False, **kw}
    written = oracle_ledger.ingest(conn, rows, **options)
    conn.commit()
    return written


def whole_day() -> list[allocation.AllocationRow]:
    return [
        alloc(f"team-a/web-{pod}/app", at=h, cpu=f"0.{h:02d}{pod}")
        for h in range(24)
        for pod in range(5)
    ]


class TestExactStorage:
    def test_every_field_of_every_row_reads_back_exactly(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        rows = [
            alloc("team-a/web-1/app", at=0),
            alloc(
                "team-b/db-0/pg", at=0, namespace="team-b", labels={}, gpu_hours=Decimal("1E-20")
            ),
            alloc("team-a/web-1/app", at=1, cpu="123456789012345678.123456789"),
        ]
        ingest(conn, rows)
        stored = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(2))
        assert sorted((s.row for s in stored), key=repr) == sorted(rows, key=repr)
        assert {(s.currency, s.is_finalized) for s in stored} == {("USD", False)}

    def test_numeric_scale_survives_the_round_trip(self, conn: psycopg.Connection[Any]) -> None:
        ingest(conn, [alloc(cpu="0.2500")])
        (stored,) = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(1))
        assert str(stored.row.cpu_core_hours) == "0.2500"

    def test_times_come_back_in_utc_whatever_offset_went_in(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        plus_two = dt.timezone(dt.timedelta(hours=2))
        row = alloc(at=0)
        shifted = dataclasses.replace(
            row,
            hour=row.hour.astimezone(plus_two),
            start=row.start.astimezone(plus_two),
            end=row.end.astimezone(plus_two),
        )
        ingest(conn, [shifted])
        (stored,) = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(1))
        assert stored.row == row
        assert stored.row.hour.utcoffset() == dt.timedelta(0)

    def test_naive_times_are_refused(self, conn: psycopg.Connection[Any]) -> None:
        naive = dataclasses.replace(alloc(), hour=dt.datetime(2026, 4, 1, 9))
        with pytest.raises(ValueError, match="timezone-aware"):
            ingest(conn, [naive])

    def test_an_hour_that_is_not_on_the_hour_is_refused_by_the_table(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        off = dataclasses.replace(alloc(), hour=hour(0) + dt.timedelta(minutes=30))
        with pytest.raises(psycopg.errors.CheckViolation):
            ingest(conn, [off])

    def test_reading_can_be_limited_to_namespaces(self, conn: psycopg.Connection[Any]) -> None:
        ingest(conn, [alloc("a", namespace="team-a"), alloc("b", namespace="team-b")])
        stored = oracle_ledger.read(
            conn, cluster=CLUSTER, start=hour(0), end=hour(1), namespaces=["team-b"]
        )
        assert [s.row.name for s in stored] == ["b"]


class TestIdempotentIngestion:
    def test_replaying_the_same_batch_leaves_the_table_byte_identical(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        rows = whole_day()
        first = ingest(conn, rows)
        before = builders.table_contents(conn, "provider_allocations")
        ctids = conn.execute("SELECT ctid::text FROM provider_allocations ORDER BY 1").fetchall()
        second = ingest(conn, list(reversed(rows)))
        assert first == len(rows)
        assert second == 0
        assert builders.table_contents(conn, "provider_allocations") == before
        # No-op conflicts do not even write a new row version.
        assert (
            conn.execute("SELECT ctid::text FROM provider_allocations ORDER BY 1").fetchall()
            == ctids
        )

    def test_a_replayed_hour_with_new_figures_overwrites_instead_of_duplicating(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        ingest(conn, [alloc(cpu="0.25")])
        written = ingest(conn, [alloc(cpu="0.75")])
        stored = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(1))
        assert written == 1
        assert [s.row.cpu_core_hours for s in stored] == [Decimal("0.75")]

    def test_duplicate_keys_in_one_batch_collapse_to_the_last(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        written = ingest(conn, [alloc(cpu="0.1"), alloc(cpu="0.2"), alloc(cpu="0.3")])
        stored = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(1))
        assert written == 1
        assert [s.row.cpu_core_hours for s in stored] == [Decimal("0.3")]

    def test_ingestion_joins_the_callers_transaction(self, conn: psycopg.Connection[Any]) -> None:
        book = builders.pricebook(conn)
        conn.commit()
        oracle_ledger.ingest(
            conn, [alloc(at=0)], pricebook_id=book, currency="USD", finalized=False
        )
        oracle_ledger.ingest(conn, [alloc(at=1)], pricebook_id=book, currency="USD", finalized=True)
        in_tx = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(2))
        conn.rollback()
        assert len(in_tx) == 2
        assert oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(2)) == []

    def test_two_writers_with_overlapping_batches_both_succeed(self, ledger_dsn: str) -> None:
        with psycopg.connect(ledger_dsn) as setup:
            book = builders.pricebook(setup)
        rows = whole_day()
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def writer(batch: list[allocation.AllocationRow]) -> None:
            try:
                with psycopg.connect(ledger_dsn) as own:
                    barrier.wait(timeout=10)
                    oracle_ledger.ingest(
                        own, batch, pricebook_id=book, currency="USD", finalized=False
                    )
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=writer, args=(rows,)),
            threading.Thread(target=writer, args=(list(reversed(rows)),)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        with psycopg.connect(ledger_dsn) as check:
            count = check.execute("SELECT count(*) FROM provider_allocations").fetchone()
        assert count == (len(rows),)


class TestFinalization:
    def test_a_finalized_row_is_never_changed_by_a_later_write(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        ingest(conn, [alloc(cpu="0.25")], finalized=True)
        written = ingest(conn, [alloc(cpu="9.99")], finalized=False)
        (stored,) = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(1))
        assert written == 0
        assert (stored.row.cpu_core_hours, stored.is_finalized) == (Decimal("0.25"), True)

    def test_an_open_row_is_promoted_when_written_finalized(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        ingest(conn, [alloc(cpu="0.25")], finalized=False)
        ingest(conn, [alloc(cpu="0.30")], finalized=True)
        (stored,) = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(1))
        assert (stored.row.cpu_core_hours, stored.is_finalized) == (Decimal("0.30"), True)

    def test_finalizing_before_an_hour_settles_only_older_rows_of_that_cluster(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        ingest(conn, [alloc(at=h) for h in range(4)])
        ingest(conn, [alloc(at=0, cluster="other")])
        changed = allocations.finalize_before(conn, cluster=CLUSTER, before=hour(2))
        conn.commit()
        stored = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(4))
        other = oracle_ledger.read(conn, cluster="other", start=hour(0), end=hour(4))
        assert changed == 2
        assert [(s.row.hour, s.is_finalized) for s in stored] == [
            (hour(0), True),
            (hour(1), True),
            (hour(2), False),
            (hour(3), False),
        ]
        assert [s.is_finalized for s in other] == [False]

    def test_fully_finalized_hours_are_the_ones_a_run_may_skip(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        ingest(conn, [alloc("a", at=0), alloc("a", at=1)], finalized=True)
        ingest(conn, [alloc("b", at=1), alloc("b", at=2)], finalized=False)
        done = allocations.finalized_hours(conn, cluster=CLUSTER, start=hour(0), end=hour(5))
        assert done == {hour(0)}

    def test_the_boundary_is_the_earliest_hour_with_open_rows(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        assert allocations.allocation_boundary(conn, cluster=CLUSTER) is None
        ingest(conn, [alloc(at=0), alloc(at=1)], finalized=True)
        assert allocations.allocation_boundary(conn, cluster=CLUSTER) is None
        ingest(conn, [alloc("late", at=1), alloc(at=3)], finalized=False)
        assert allocations.allocation_boundary(conn, cluster=CLUSTER) == hour(1)
        allocations.finalize_before(conn, cluster=CLUSTER, before=hour(3))
        assert allocations.allocation_boundary(conn, cluster=CLUSTER) == hour(3)
        assert allocations.allocation_boundary(conn, cluster="elsewhere") is None


class TestPriceBooks:
    def test_the_same_book_and_rates_map_to_one_row(self, conn: psycopg.Connection[Any]) -> None:
        first = builders.pricebook(conn)
        again = builders.pricebook(conn)
        (stored,) = oracle_ledger.pricebooks(conn, [first]).values()
        assert first == again
        assert stored.currency == "USD"
        assert stored.rates == {k: builders.RATES.get(k, 0) for k in allocations.RATE_COLUMNS}

    def test_changing_a_rate_adds_a_row_and_keeps_the_old_prices(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        old = builders.pricebook(conn)
        ingest(conn, [alloc(at=0)], pricebook_id=old)
        new = builders.pricebook(conn, {**builders.RATES, "cpuHour": 45_000})
        books = oracle_ledger.pricebooks(conn, [old, new])
        (stored,) = oracle_ledger.read(conn, cluster=CLUSTER, start=hour(0), end=hour(1))
        assert new != old
        assert (books[old].rates["cpuHour"], books[new].rates["cpuHour"]) == (31_000, 45_000)
        assert stored.pricebook_id == old

    def test_pricebook_rows_cannot_be_updated(self, conn: psycopg.Connection[Any]) -> None:
        book = builders.pricebook(conn)
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="immutable"):
            conn.execute("UPDATE pricebooks SET cpu_hour_micros = 1 WHERE id = %s", (book,))

    @pytest.mark.parametrize(
        "rates", [{"cpuHour": -1}, {"cpuHour": 1.5}, {"bogusHour": 1}, {"cpuHour": True}]
    )
    def test_rates_must_be_known_non_negative_integer_micros(
        self, conn: psycopg.Connection[Any], rates: dict[str, Any]
    ) -> None:
        with pytest.raises(ValueError):
            builders.pricebook(conn, rates)

    def test_allocations_must_point_at_an_existing_pricebook(
        self, conn: psycopg.Connection[Any]
    ) -> None:
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            oracle_ledger.ingest(conn, [alloc()], pricebook_id=0, currency="USD", finalized=False)

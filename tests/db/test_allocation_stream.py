"""The allocation run's streamed write (`open_stream`/`stage`/`merge`) leaves the very ledger
`ingest` (the per-hour write every earlier release used) leaves, row for row and byte for byte.

Two ledgers take the same runs, one through each path: new rows, replays, changed values,
finalized rows that must not move, and text that `COPY` must escape.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from finops.billing import allocation
from finops.opencost import fastparse, parse
from finops.store import allocations, migrate
from finops_devenv import postgres
from tests.db import builders
from tests.db.builders import alloc, hour
from tests.oracle import ledger as oracle_ledger

Run = list[tuple[bool, list[allocation.AllocationRow]]]  # (finalized, rows) per hour


@pytest.fixture
def ledgers(pg_server: postgres.PostgresCluster) -> Iterator[tuple[str, str]]:
    dsns = (pg_server.create_database(), pg_server.create_database())
    for dsn in dsns:
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate.apply(conn)
    yield dsns
    for dsn in dsns:
        pg_server.drop_database(str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]))


def by_ingest(conn: psycopg.Connection[Any], run: Run) -> int:
    book = builders.pricebook(conn)
    written = sum(
        oracle_ledger.ingest(conn, rows, pricebook_id=book, currency="USD", finalized=final)
        for final, rows in run
    )
    conn.commit()
    return written


def by_stream(conn: psycopg.Connection[Any], run: Run) -> int:
    book = builders.pricebook(conn)
    allocations.open_stream(conn)
    written = 0
    for final, rows in run:
        # In batches, as shards arrive: out of key order.
        lines = [allocation.row_line(fastparse.as_tuple(r)) + "\n" for r in reversed(rows)]
        for i in range(0, len(lines), 2):
            data = "".join(lines[i : i + 2]).encode()
            allocations.stage_text(conn, allocations.with_finalized(data, finalized=final))
        written += allocations.merge(conn, pricebook_id=book, currency="USD")
    conn.commit()
    return written


def dump(conn: psycopg.Connection[Any]) -> list[str]:
    """Every row as PostgreSQL prints it (numeric scale, jsonb, timestamps included)."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT t::text FROM provider_allocations t ORDER BY cluster, hour, namespace, name"
        )
    ]


def same_ledger(dsns: tuple[str, str], runs: list[Run]) -> None:
    with psycopg.connect(dsns[0]) as old, psycopg.connect(dsns[1]) as new:
        for run in runs:
            assert by_stream(new, run) == by_ingest(old, run)
            assert dump(new) == dump(old)


def test_new_rows_replays_changes_and_finalized_rows_match_ingest(
    ledgers: tuple[str, str],
) -> None:
    first: Run = [
        (True, [alloc(f"team-a/web-{p}/app", at=0, cpu=f"0.{p}") for p in range(5)]),
        (False, [alloc(f"team-a/web-{p}/app", at=1) for p in range(5)]),
        (False, [alloc("team-b/db-0/pg", at=2, namespace="team-b", labels={})]),
    ]
    changed: Run = [
        (False, [alloc(f"team-a/web-{p}/app", at=0, cpu="9") for p in range(5)]),  # final
        (True, [alloc(f"team-a/web-{p}/app", at=1, cpu=f"0.{p}50") for p in range(3)]),
        (False, [alloc("team-b/db-0/pg", at=2, namespace="team-b", labels={})]),  # replay
    ]
    same_ledger(ledgers, [first, first, changed, changed])
    with psycopg.connect(ledgers[1]) as conn:
        assert len(dump(conn)) == 11


awkward_text = st.one_of(
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=8),
    st.sampled_from(["a\tb", "a\nb", "a\rb", "a\\b", "\\.", '"q"', "ü€", "\\N"]),
)
quantities = st.one_of(
    st.decimals(min_value=0, max_value=10**15, allow_nan=False, places=7),
    st.sampled_from(
        [Decimal("1E+5"), Decimal("0E-7"), Decimal("-0.0"), Decimal(0), Decimal("2.50")]
    ),
)


@st.composite
def runs(draw: st.DrawFn) -> list[Run]:
    out: list[Run] = []
    for _ in range(draw(st.integers(1, 3))):
        run: Run = []
        for at in draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True)):
            names = draw(st.lists(st.sampled_from(["a", "b", "c\td", "e\\f"]), unique=True))
            rows = [
                dataclasses.replace(
                    alloc(f"ns/{name}", at=at, namespace=draw(st.sampled_from(["ns", "n\ts"]))),
                    pod=draw(awkward_text),
                    labels=draw(st.dictionaries(awkward_text, awkward_text, max_size=2)),
                    cpu_core_hours=draw(quantities),
                    ram_byte_hours=draw(quantities),
                    start=hour(at) + dt.timedelta(minutes=draw(st.integers(0, 60))),
                )
                for name in names
            ]
            run.append((draw(st.booleans()), rows))
        out.append(run)
    return out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(runs())
def test_any_sequence_of_runs_leaves_the_ledger_ingest_leaves(
    ledgers: tuple[str, str], sequence: list[Run]
) -> None:
    for dsn in ledgers:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM provider_allocations")
    same_ledger(ledgers, sequence)


def test_a_run_that_commits_the_hour_first_turns_the_fresh_insert_into_the_upsert(
    ledgers: tuple[str, str],
) -> None:
    """The hour is new when the merge looks, but a concurrent run commits it before the
    merge's plain INSERT gets its keys: the merge waits, then upserts over that run's rows,
    leaving what `ingest` leaves when the two runs go one after the other."""
    theirs: Run = [(False, [alloc(f"team-a/web-{p}/app", at=0) for p in range(4)])]
    mine: Run = [(False, [alloc(f"team-a/web-{p}/app", at=0, cpu="0.75") for p in range(1, 6)])]
    with psycopg.connect(ledgers[0]) as old:
        expected = [by_ingest(old, theirs), by_ingest(old, mine)]
    with (
        psycopg.connect(ledgers[1]) as other,
        psycopg.connect(ledgers[1]) as conn,
        psycopg.connect(ledgers[1], autocommit=True) as watch,
    ):
        book = builders.pricebook(conn)
        conn.commit()
        oracle_ledger.ingest(
            other, theirs[0][1], pricebook_id=book, currency="USD", finalized=False
        )
        written: list[int] = []
        merging = threading.Thread(target=lambda: written.append(by_stream(conn, mine)))
        merging.start()
        waiting = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
        while watch.execute(waiting, (conn.info.backend_pid,)).fetchone() != (True,):
            assert merging.is_alive(), "the merge finished without waiting for the other run"
        other.commit()
        merging.join()
        assert written == expected[1:]
        with psycopg.connect(ledgers[0]) as old:
            assert dump(conn) == dump(old)


# --------------------------------------------------------- the run's path: body → COPY lines

LINE_NUMBERS = st.one_of(
    st.decimals(min_value=0, max_value=10**15, allow_nan=False, places=7).map(str),
    st.integers(0, 10**25).map(str),
    st.sampled_from(
        ["0", "-0", "0.0", "-0.0", "2.50", "1e5", "1E-7", "0.0000001", "0.000000", "7e+2", "null"]
    ),
)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bool, bytes]:
    """One hour's OpenCost body (numbers as raw JSON text) and whether the hour is final."""
    items = []
    for name in draw(st.lists(st.sampled_from(["a", "b", "c\td", "e\\f"]), unique=True)):
        numbers = [draw(LINE_NUMBERS) for _ in range(3)]
        item = {
            "properties": {
                "namespace": "ns",
                "pod": draw(awkward_text),
                "labels": draw(st.dictionaries(awkward_text, awkward_text, max_size=2)),
            },
            "start": "2026-10-03T10:05:00Z",
            "end": "2026-10-03T11:00:00Z",
        }
        text = json.dumps({"ns/" + name: item})
        fields = ",".join(
            f'"{key}":{value}'
            for key, value in zip(("minutes", "cpuCoreHours", "ramByteHours"), numbers, strict=True)
        )
        items.append(text[:-2] + "," + fields + "}}")
    body = '{"code":200,"data":[' + (",".join(items) or "{}") + "]}"
    return draw(st.booleans()), body.encode()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(bodies(), min_size=1, max_size=3))
def test_bodies_written_as_copy_lines_leave_the_ledger_ingest_leaves(
    ledgers: tuple[str, str], hours: list[tuple[bool, bytes]]
) -> None:
    """What the run stores (`fastparse.lines` → `with_finalized` → `stage_text` → `merge`) is
    what `ingest` stores for the exact parser's rows of the same bodies."""
    at = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)
    decoded = [
        (final, parse.rows(parse.decode(body), cluster="c", aggregation="pod", hour=at))
        for final, body in hours
    ]
    with psycopg.connect(ledgers[0]) as old, psycopg.connect(ledgers[1]) as new:
        for conn in (old, new):
            conn.execute("DELETE FROM provider_allocations")
        expected = by_ingest(old, decoded)
        book = builders.pricebook(new)
        allocations.open_stream(new)
        written = 0
        for final, body in hours:
            found = fastparse.lines(body, cluster="c", aggregation="pod", hour=at)
            allocations.stage_text(new, allocations.with_finalized(found.text, finalized=final))
            written += allocations.merge(new, pricebook_id=book, currency="USD")
        new.commit()
        assert written == expected
        assert dump(new) == dump(old)

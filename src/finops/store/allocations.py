"""`provider_allocations` and `pricebooks`: what the allocation job writes, the charge job reads.

Every function takes a `psycopg.Connection`, joins the caller's transaction and never
commits, so a job decides what commits together.

Finalized rows are settled history: an upsert never changes a row that is already
finalized, and finalization never goes backwards. Ingestion is one `COPY` into a session
temp table plus one `INSERT … ON CONFLICT DO UPDATE`; a conflicting row is only rewritten
when its values differ, so replaying a batch leaves the table as it was.

The allocation run streams instead (`open_stream`, `stage_text`, `merge`): each batch of row
lines is `COPY`ed into a session temp table as it arrives, and each hour is merged by the
same set-based upsert, so no more than a batch of rows is ever held in Python. An hour the
ledger holds no row of yet is written by a plain `INSERT` (it changes exactly the rows the
upsert would).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg
from psycopg import pq

from finops.billing import allocation, ticks

RATE_COLUMNS: dict[str, str] = {
    "cpuHour": "cpu_hour_micros",
    "spotCPUHour": "spot_cpu_hour_micros",
    "ramGbHour": "ram_gb_hour_micros",
    "spotRAMGbHour": "spot_ram_gb_hour_micros",
    "pvGbHour": "pv_gb_hour_micros",
    "gpuHour": "gpu_hour_micros",
    "networkGiB": "network_gib_micros",
}
"""PriceBook rate field (as in `spec.rates`) → `pricebooks` column holding it in micros."""

# AllocationRow field → column, in table order. `start`/`end` are renamed (`end` is reserved).
_ROW_COLUMNS: dict[str, str] = {
    f.name: {"start": "start_time", "end": "end_time"}.get(f.name, f.name)
    for f in dataclasses.fields(allocation.AllocationRow)
}
_KEY = ("cluster", "hour", "namespace", "name", "aggregation")
_STAGING = "finops_allocation_staging"
_STREAM = "finops_allocation_stream"
_STAMP = ("pricebook_id", "currency", "is_finalized")
MERGE_WORK_MEM = "96MB"


def rates_digest(currency: str, rates: Mapping[str, int]) -> str:
    """The rates version: one digest of the currency and every rate (unset counts as 0)."""
    canonical = {"currency": currency, **{k: int(rates.get(k, 0)) for k in RATE_COLUMNS}}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()


def ensure_pricebook(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespace: str,
    name: str,
    uid: str,
    currency: str,
    rates: Mapping[str, int],
    generation: int = 0,
) -> int:
    """Id of the row for this book and these rates, inserting it the first time it is seen.

    Rows are never updated: a changed rate makes a new row, so allocations collected before
    the change keep pointing at the prices they were collected with.
    """
    unknown = set(rates) - set(RATE_COLUMNS)
    if unknown:
        raise ValueError(f"unknown PriceBook rates: {sorted(unknown)}")
    for key, value in rates.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"rate {key!r} must be a non-negative integer of micros")
    digest = rates_digest(currency, rates)
    columns = ", ".join(RATE_COLUMNS.values())
    values = [int(rates.get(k, 0)) for k in RATE_COLUMNS]
    inserted = conn.execute(
        f"""
        INSERT INTO pricebooks (cluster, book_namespace, book_name, book_uid, rates_digest,
                                book_generation, currency, {columns})
        VALUES (%s, %s, %s, %s, %s, %s, %s, {", ".join(["%s"] * len(values))})
        ON CONFLICT (cluster, book_namespace, book_name, book_uid, rates_digest) DO NOTHING
        RETURNING id
        """.encode(),
        (cluster, namespace, name, uid, digest, generation, currency, *values),
    ).fetchone()
    if inserted is not None:
        return int(inserted[0])
    existing = conn.execute(
        """
        SELECT id FROM pricebooks
        WHERE cluster = %s AND book_namespace = %s AND book_name = %s AND book_uid = %s
          AND rates_digest = %s
        """,
        (cluster, namespace, name, uid, digest),
    ).fetchone()
    if existing is None:  # pragma: no cover - the conflict guarantees the row exists
        raise RuntimeError("pricebook row vanished between insert and select")
    return int(existing[0])


def _upsert_sql(source: str, finalized: str, order: str) -> bytes:
    """Upsert every row of `source` stamped with a PriceBook (`%s, %s`) and `finalized`.

    A finalized row in the table is left untouched; any other is rewritten only when a value
    differs, so a replay changes nothing (and its row count says so).
    """
    compared = [c for c in (*_ROW_COLUMNS.values(), *_STAMP) if c not in _KEY]
    assignments = ", ".join(f"{c} = EXCLUDED.{c}" for c in compared)
    mine = ", ".join(f"provider_allocations.{c}" for c in compared)
    theirs = ", ".join(f"EXCLUDED.{c}" for c in compared)
    return (
        _insert_sql(source, finalized, order)
        + f"""
        ON CONFLICT ({", ".join(_KEY)}) DO UPDATE SET {assignments}
        WHERE NOT provider_allocations.is_finalized
          AND ({mine}) IS DISTINCT FROM ({theirs})
        """.encode()
    )


def _insert_sql(source: str, finalized: str, order: str) -> bytes:
    """Insert every row of `source` stamped with a PriceBook (`%s, %s`) and `finalized`."""
    columns = ", ".join(_ROW_COLUMNS.values())
    return f"""
        INSERT INTO provider_allocations ({columns}, {", ".join(_STAMP)})
        SELECT {columns}, %s, %s, {finalized} FROM {source} {order}
        """.encode()


def open_stream(conn: psycopg.Connection[Any]) -> None:
    """An empty session temp table for `stage_text` (created once per session, emptied here).

    Call it inside the caller's transaction: rows staged there vanish at its end.
    """
    conn.execute(
        f"""
        CREATE TEMP TABLE IF NOT EXISTS {_STREAM} ON COMMIT DELETE ROWS AS
        SELECT {", ".join(_ROW_COLUMNS.values())}, is_finalized
        FROM provider_allocations WITH NO DATA
        """.encode()
    )
    conn.execute(f"TRUNCATE {_STREAM}".encode())
    # `merge` sorts an hour's rows (tens of MB at 50k rows): in memory, not in temp files.
    conn.execute("SELECT set_config('work_mem', %s, true)", (MERGE_WORK_MEM,))


def with_finalized(lines: bytes, *, finalized: bool) -> bytes:
    """Row lines (`allocation.row_line`, each ended by a newline) as `COPY` text for
    `stage_text`: each line gets the `is_finalized` column.

    Why text lines: psycopg dumps a `Decimal` to binary `numeric` through `Decimal.as_tuple()`
    in Python, which costs more than `str()`; PostgreSQL parses the text in its own process,
    and a few hundred bytes a row let batches wait in a queue cheaply. A raw newline in
    escaped `COPY` text only ever ends a line, so one replace does it.
    """
    return lines.replace(b"\n", b"\tt\n" if finalized else b"\tf\n")


def stage_text(conn: psycopg.Connection[Any], data: bytes) -> None:
    """`COPY` text from `with_finalized` into the stream table (opened by `open_stream`).
    Keys must be unique until the next `merge`."""
    if data:
        columns = ", ".join(_ROW_COLUMNS.values())
        sql = f"COPY {_STREAM} ({columns}, is_finalized) FROM STDIN".encode()
        with conn.cursor() as cur, cur.copy(sql) as copy:
            copy.write(data)


def merge(conn: psycopg.Connection[Any], *, pricebook_id: int, currency: str) -> int:
    """Upsert everything staged since `open_stream` (as `ingest` would) and empty the stream;
    return how many rows changed. Rows go in key order, so concurrent runs cannot deadlock."""
    params = (pricebook_id, currency)
    with conn.cursor() as cur:
        changed = _insert_fresh(cur, params) if _hours_are_new(cur) else None
        if changed is None:
            cur.execute(_upsert_sql(_STREAM, "is_finalized", _ORDER), params)
            changed = cur.rowcount
        cur.execute(f"TRUNCATE {_STREAM}".encode())
    return changed


_ORDER = f"ORDER BY {', '.join(_KEY)}"
_SAVEPOINT = "finops_allocation_fresh"


def _hours_are_new(cur: psycopg.Cursor[Any]) -> bool:
    """Whether the ledger holds no row of any (cluster, hour) in the stream: the first
    collection of an hour, which a plain INSERT can write."""
    cur.execute(
        f"""
        SELECT NOT EXISTS (
            SELECT 1 FROM (SELECT DISTINCT cluster, hour FROM {_STREAM}) s
            WHERE EXISTS (SELECT 1 FROM provider_allocations p
                          WHERE p.cluster = s.cluster AND p.hour = s.hour))
        """.encode()
    )
    row = cur.fetchone()
    return bool(row and row[0])


def _insert_fresh(cur: psycopg.Cursor[Any], params: tuple[int, str]) -> int | None:
    """Insert the stream as new rows; None (and nothing written) if a key already exists.

    Why: `ON CONFLICT` costs a speculative insertion per row, about half of an hour's merge
    when nothing conflicts. A concurrent run may commit the same hour after `_hours_are_new`
    looked; the primary key then refuses the insert and the savepoint undoes it, so the
    caller's upsert writes the hour exactly as it would have.
    """
    cur.execute(f"SAVEPOINT {_SAVEPOINT}".encode())
    try:
        cur.execute(_insert_sql(_STREAM, "is_finalized", _ORDER), params)
    except psycopg.errors.UniqueViolation:
        cur.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}".encode())
        return None
    written = cur.rowcount
    cur.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}".encode())
    return written


@contextlib.contextmanager
def _atomic(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """All-or-nothing inside the caller's transaction, never committing on its own.

    An idle non-autocommit connection opens its implicit transaction for the caller to
    commit; an open one gets a savepoint; autocommit gets a transaction of its own.
    """
    if not conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        yield
        return
    with conn.transaction():
        yield


def finalize_before(conn: psycopg.Connection[Any], *, cluster: str, before: dt.datetime) -> int:
    """Mark every non-finalized row of hours before `before` finalized; return the count."""
    ticks.require_aware(before=before)
    cur = conn.execute(
        """
        UPDATE provider_allocations SET is_finalized = true
        WHERE cluster = %s AND hour < %s AND NOT is_finalized
        """,
        (cluster, before),
    )
    return cur.rowcount


def finalized_hours(
    conn: psycopg.Connection[Any], *, cluster: str, start: dt.datetime, end: dt.datetime
) -> set[dt.datetime]:
    """Hours in [start, end) that have rows and no non-finalized row (the job skips these)."""
    ticks.require_aware(start=start, end=end)
    rows = conn.execute(
        """
        SELECT hour FROM provider_allocations
        WHERE cluster = %s AND hour >= %s AND hour < %s
        GROUP BY hour HAVING bool_and(is_finalized)
        """,
        (cluster, start, end),
    ).fetchall()
    return {_utc(r[0]) for r in rows}


def allocation_boundary(conn: psycopg.Connection[Any], *, cluster: str) -> dt.datetime | None:
    """Earliest hour that still has non-finalized allocation rows; None when all are settled."""
    row = conn.execute(
        "SELECT min(hour) FROM provider_allocations WHERE cluster = %s AND NOT is_finalized",
        (cluster,),
    ).fetchone()
    return None if row is None or row[0] is None else _utc(row[0])


def _utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC)

"""Allocation ingestion throughput against a raw `COPY` of the same rows.

Why a ratio: absolute rows/s depend on the machine; ingest ÷ raw says how much the staging
table, the upsert and the key index cost on top of the cheapest possible load. Both sides
build the same Python values and commit; each figure is the best of `--repeat` runs into an
emptied table. A replay (every row conflicting, nothing changing) is timed as well.

This is the exact reference path (`tests/oracle/ledger.py`'s `ingest`: parsed rows, staging, one
merge), which the tests hold the allocation job's fast path to; the job itself is timed by
`benchmarks.allocation_run`. Growth: `--scales` multiplies `--rows`, each size in a database
of its own, and the cost per row is printed at each.

    .venv/bin/python -m benchmarks.ledger_ingest            # throw-away cluster, ×1/×2/×4
    .venv/bin/python -m benchmarks.ledger_ingest --dsn ... --scales 1  # an existing empty db
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import operator
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from decimal import Decimal

import psycopg
from psycopg.types.json import Jsonb
from tests.oracle import ledger as oracle_ledger

from finops.billing import allocation
from finops.store import allocations, migrate
from finops_devenv import postgres

START = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
FIELDS = [f.name for f in dataclasses.fields(allocation.AllocationRow)]
COLUMNS = [{"start": "start_time", "end": "end_time"}.get(f, f) for f in FIELDS]


def generate(count: int, hours: int = 24) -> list[allocation.AllocationRow]:
    """`count` distinct rows spread over `hours` hours, with realistic exact quantities."""
    per_hour = -(-count // hours)
    rows = []
    for i in range(count):
        at = START + dt.timedelta(hours=i // per_hour)
        pod = i % per_hour
        namespace = f"team-{pod % 60:02d}"
        rows.append(
            allocation.AllocationRow(
                cluster="default",
                name=f"{namespace}/web-{pod}/app",
                namespace=namespace,
                aggregation="namespace,pod,container",
                hour=at,
                start=at,
                end=at + dt.timedelta(hours=1),
                minutes=Decimal(60),
                controller_kind="deployment",
                controller_name=f"web-{pod // 3}",
                pod=f"web-{pod}",
                container="app",
                node=f"node-{pod % 12}",
                labels={"app": "web", "stakater.com/tenant": f"tenant-{pod % 7}"},
                cpu_core_request_average=Decimal("0.5"),
                cpu_core_usage_average=Decimal(f"0.{pod % 997:03d}17"),
                cpu_core_hours=Decimal(f"0.{pod % 991:03d}29"),
                ram_byte_request_average=Decimal(536870912),
                ram_byte_usage_average=Decimal(f"{268435456 + pod}.5"),
                ram_byte_hours=Decimal(f"{268435456 + pod}.25"),
                pv_byte_hours=Decimal(1073741824 * (pod % 3)),
                network_transfer_bytes=Decimal(f"{pod * 1024}.5"),
                network_receive_bytes=Decimal(pod * 2048),
            )
        )
    return rows


def timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def best_of(repeat: int, prepare: Callable[[], None], action: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        prepare()
        times.append(timed(action))
    return min(times)


def run(dsn: str, count: int, repeat: int) -> dict[str, float]:
    rows = generate(count)
    with psycopg.connect(dsn, autocommit=True) as setup:
        migrate.apply(setup)
    with psycopg.connect(dsn) as conn:
        book = allocations.ensure_pricebook(
            conn,
            cluster="default",
            namespace="bench",
            name="bench",
            uid="bench",
            currency="USD",
            rates={"cpuHour": 31_000},
        )
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS bare_copy AS "
            f"SELECT {', '.join(COLUMNS)} FROM provider_allocations WITH NO DATA".encode()
        )
        conn.commit()

        def ingest() -> None:
            oracle_ledger.ingest(conn, rows, pricebook_id=book, currency="USD", finalized=False)
            conn.commit()

        def raw_copy() -> None:
            with (
                conn.cursor() as cur,
                cur.copy(f"COPY bare_copy ({', '.join(COLUMNS)}) FROM STDIN".encode()) as copy,
            ):
                labels_at = FIELDS.index("labels")
                fields_of = operator.attrgetter(*FIELDS)
                for row in rows:
                    values = list(fields_of(row))
                    values[labels_at] = Jsonb(dict(row.labels))
                    copy.write_row(values)
            conn.commit()

        def empty(table: str) -> Callable[[], None]:
            def prepare() -> None:
                conn.execute(f"TRUNCATE {table}".encode())
                conn.commit()

            return prepare

        raw = best_of(repeat, empty("bare_copy"), raw_copy)
        fresh = best_of(repeat, empty("provider_allocations"), ingest)
        replay = best_of(repeat, lambda: None, ingest)
        stored = conn.execute("SELECT count(*) FROM provider_allocations").fetchone()
        assert stored == (count,), stored
    return {"raw": count / raw, "ingest": count / fresh, "replay": count / replay}


def report(count: int, figures: dict[str, float]) -> Iterator[str]:
    per_row = 1e6 / figures["ingest"]
    yield f"rows: {count:,} ({per_row:.1f} µs per fresh row ingested)"
    yield f"raw COPY into a bare table:   {figures['raw']:>10,.0f} rows/s"
    yield f"ledger ingest (fresh rows):   {figures['ingest']:>10,.0f} rows/s"
    yield f"ledger ingest (replay):       {figures['replay']:>10,.0f} rows/s"
    yield f"ratio ingest/raw:             {figures['ingest'] / figures['raw']:>10.2f}"
    yield f"ratio replay/raw:             {figures['replay'] / figures['raw']:>10.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=50_000, help="at scale 1")
    parser.add_argument("--scales", default="1,2,4", help="comma-separated multipliers")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dsn", help="an existing empty database (only with one scale)")
    args = parser.parse_args(argv)
    scales = [int(s) for s in args.scales.split(",") if s.strip()]
    if args.dsn and len(scales) != 1:
        parser.error("--dsn takes one scale: each size needs an empty database")
    per_row: list[tuple[int, float]] = []
    with ExitStack() as stack:
        cluster = None if args.dsn else stack.enter_context(postgres.PostgresCluster())
        for scale in scales:
            dsn = args.dsn or cluster.create_database(f"ledger_bench_{scale}")  # type: ignore[union-attr]
            count = args.rows * scale
            figures = run(dsn, count, args.repeat)
            print(f"-- scale ×{scale}")
            for line in report(count, figures):
                print(line, flush=True)
            per_row.append((scale, 1e6 / figures["ingest"]))
    if len(per_row) > 1:
        print("-- growth")
        for scale, micros in per_row:
            print(f"×{scale}: {micros:.1f} µs per fresh row")
        (last, last_micros), (first, first_micros) = per_row[-1], per_row[0]
        print(f"µs per row, ×{last} / ×{first}: {last_micros / first_micros:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The FOCUS export of a month of ~8M charge rows: rows/s and peak RSS, CLI and gateway,
against `COPY (SELECT …) TO STDOUT` of the same columns.

What is timed: `finops export focus` as its own process writing CSV to a pipe the benchmark
drains (its peak RSS is the process's `VmHWM`), and `GET /api/v1/focus?format=csv` of a real
`finops-gateway` process (ENABLE_AUTH=false) read to the end (the gateway's `VmHWM`). Both
outputs are hashed: they must be the same bytes. The baseline, in the same run: the export's
own query (`finops.store.focus`, the same joins, columns, filter and order) run as
`COPY (…) TO STDOUT` and read to the end by the benchmark, the cheapest way the same rows can
leave PostgreSQL. Targets at the month: peak RSS ≤ 200 MB, rows/s ≥ 0.5× the COPY's.

The ledger: April 2025 for ~1,850 Subscriptions × 6 sources × every hour (8.0M rows), loaded
as `benchmarks.ledger_year` loads a month. Sizes: the first quarter, half and the whole month
(×1, ×2, ×4 rows), so a row should cost the same at each. The throw-away PostgreSQL lives
under `.cache/` (git-ignored) and is removed at the end.

    .venv/bin/python -m benchmarks.focus_export                   # 2M, 4M, 8M rows
    .venv/bin/python -m benchmarks.focus_export --namespaces 25   # small
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import hashlib
import os
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

import psycopg
from benchmarks import gateway as gw
from benchmarks import ledger_year as ly
from benchmarks import machine

from finops.billing import focus
from finops.store import focus as focus_store
from finops.store import focus_csv, migrate
from finops_devenv import postgres

MONTH = dt.datetime(2025, 4, 1, tzinfo=dt.UTC)
HOURS = 720
RSS_TARGET_MB = 200.0
RATE_TARGET = 0.5


def peak_rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


class _Watch(threading.Thread):
    """The last `VmHWM` read of a process while it lives (read again just before it ends)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                self.peak = max(self.peak, peak_rss_mb(self.pid))
            time.sleep(0.2)


@dataclasses.dataclass
class Export:
    seconds: float
    lines: int
    digest: str
    peak_mb: float


def cli(dsn: str, start: dt.datetime, end: dt.datetime) -> Export:
    """`finops export focus` to a pipe read here; lines, bytes' digest, the process's VmHWM."""
    command = [
        sys.executable,
        "-m",
        "finops.cli",
        "export",
        "focus",
        "--dsn",
        dsn,
        "--cluster",
        ly.CLUSTER,
        "--from",
        start.isoformat(),
        "--to",
        end.isoformat(),
    ]
    began = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watch = _Watch(proc.pid)
    watch.start()
    digest, lines = hashlib.sha256(), 0
    assert proc.stdout is not None
    for chunk in iter(lambda: proc.stdout.read(1 << 20), b""):  # type: ignore[union-attr]
        digest.update(chunk)
        lines += chunk.count(b"\n")
    with contextlib.suppress(OSError, ValueError):
        watch.peak = max(watch.peak, peak_rss_mb(proc.pid))
    _, status, usage = os.wait4(proc.pid, 0)
    watch.stop.set()
    seconds = time.perf_counter() - began
    if status != 0:
        raise RuntimeError(f"finops export focus failed: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
    peak = max(watch.peak, usage.ru_maxrss / 1024)
    return Export(seconds, lines - 1, digest.hexdigest(), peak)


def route(dsn: str, start: dt.datetime, end: dt.datetime) -> Export:
    """`GET /api/v1/focus?format=csv` read to the end from a fresh gateway process."""
    with gw.gateway_process(dsn, ly.CLUSTER, timeout=600) as (client, pid):
        watch = _Watch(pid)
        watch.start()
        digest, lines = hashlib.sha256(), 0
        began = time.perf_counter()
        params = {"from": start.isoformat(), "to": end.isoformat(), "format": "csv"}
        with client.stream("GET", "/api/v1/focus", params=params) as response:
            if response.status_code != 200:
                raise RuntimeError(f"/api/v1/focus: {response.status_code}")
            for chunk in response.iter_raw(1 << 20):
                digest.update(chunk)
                lines += chunk.count(b"\n")
        seconds = time.perf_counter() - began
        watch.stop.set()
        peak = max(watch.peak, peak_rss_mb(pid))
    return Export(seconds, lines - 1, digest.hexdigest(), peak)


def _window(start: dt.datetime, end: dt.datetime) -> focus_csv.Window:
    """The export statements' parameters for the whole cluster's settled rows."""
    window = focus_store.export_window(ly.CLUSTER, start, end)
    return focus_csv.Window(**window, provider=focus.DEFAULT_PROVIDER)


def copy_baseline(dsn: str, start: dt.datetime, end: dt.datetime) -> tuple[float, int]:
    """The export's own query as `COPY (…) TO STDOUT`, read to the end: seconds, rows."""
    params = _window(start, end)
    rows = 0
    with psycopg.connect(dsn) as conn:
        query = psycopg.ClientCursor(conn).mogrify(focus_store.export_query(), params)
        began = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY ({query}) TO STDOUT".encode()) as copy:
            for chunk in copy:
                rows += bytes(chunk).count(b"\n")
        return time.perf_counter() - began, rows


def _export(result: tuple[int, float, Export, Export], pick: int) -> Export:
    return result[2] if pick == 2 else result[3]


def phases(dsn: str, start: dt.datetime, end: dt.datetime) -> dict[str, float]:
    """Where the export's time goes, in this process: the key tables worked out in Python
    (seconds, once per export), and the statement that makes the FOCUS rows drained as
    `COPY` (µs per row), against which the CLI's and gateway's pass-through is the rest."""
    window = _window(start, end)
    rows = 0
    with psycopg.connect(dsn) as conn:
        index = focus_store.period_index(conn, cluster=ly.CLUSTER)
        focus_csv.plan(conn)
        (part,) = focus_csv.by_period(window, index)
        began = time.perf_counter()
        params = {**part, **focus_csv.key_tables(conn, part, index)}
        keys = time.perf_counter() - began
        query = f"COPY ({focus_csv.rows_statement(None)}) TO STDOUT {focus_csv.COPY_OPTIONS}"
        began = time.perf_counter()
        with conn.cursor() as cur, cur.copy(query, params) as copy:
            for _ in copy:
                rows += 1
        made = time.perf_counter() - began
    return {"keys_s": keys, "focus_copy_us": 1e6 * made / max(rows, 1)}


def build(dsn: str, namespaces: int) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate.apply(conn)
        subs = ly.versions(conn, namespaces)
        row = conn.execute("SELECT id FROM offering_versions").fetchone()
        blocks = ly.hour_blocks(subs, int(row[0]) if row else 1)
        return ly.load_month(conn, MONTH, blocks)


def report(label: str, rows: int, e: Export, copy_rate: float) -> str:
    rate = rows / e.seconds
    return (
        f"  {label:8s} {e.seconds:7.1f} s  {rate:9,.0f} rows/s  ({rate / copy_rate:.2f}× COPY)"
        f"  peak RSS {e.peak_mb:6.1f} MB  {1e6 / rate:6.1f} µs/row"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--namespaces", type=int, default=463, help="4 Subscriptions each")
    parser.add_argument("--base-dir", default=".cache/bench-focus")
    args = parser.parse_args(argv)
    base = pathlib.Path(args.base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    print(f"load at start: {machine.loadavg()}", flush=True)
    results: list[tuple[int, float, Export, Export]] = []
    with postgres.PostgresCluster(base_dir=base) as cluster:
        dsn = cluster.create_database("focus_export")
        began = time.perf_counter()
        total = build(dsn, args.namespaces)
        print(f"month of {total:,} charge rows built in {time.perf_counter() - began:.0f} s")
        for quarters in (1, 2, 4):
            end = MONTH + dt.timedelta(hours=HOURS * quarters // 4)
            load = machine.loadavg()
            copy_seconds, rows = copy_baseline(dsn, MONTH, end)
            copy_rate = rows / copy_seconds
            by_cli = cli(dsn, MONTH, end)
            by_route = route(dsn, MONTH, end)
            print(
                f"×{quarters}: {rows:,} rows ({HOURS * quarters // 4} hours); "
                f"load {load} → {machine.loadavg()}"
            )
            print(f"  COPY     {copy_seconds:7.1f} s  {copy_rate:9,.0f} rows/s", flush=True)
            print(report("CLI", rows, by_cli, copy_rate))
            print(report("gateway", rows, by_route, copy_rate))
            same = by_cli.digest == by_route.digest and by_cli.lines == by_route.lines == rows
            print(
                f"  CLI and gateway wrote the same {by_cli.lines:,} rows, byte for byte: "
                f"{'yes' if same else 'NO'}",
                flush=True,
            )
            results.append((rows, copy_rate, by_cli, by_route))
            if quarters == 1:
                shares = phases(dsn, MONTH, end)
                print(
                    f"  by phase (in process): key tables {shares['keys_s']:.2f} s once, the "
                    f"FOCUS rows made by PostgreSQL and drained as COPY "
                    f"{shares['focus_copy_us']:.1f} µs/row, against COPY of the charge columns "
                    f"{1e6 / copy_rate:.1f} µs/row; the CLI's and gateway's rest is pass-through",
                    flush=True,
                )
    rows, copy_rate, by_cli, by_route = results[-1]
    print(f"\nat {rows:,} rows (a month):")
    for label, e in (("CLI", by_cli), ("gateway", by_route)):
        ratio = rows / e.seconds / copy_rate
        rss = "met" if e.peak_mb <= RSS_TARGET_MB else "not met"
        rate = "met" if ratio >= RATE_TARGET else "not met"
        print(
            f"  {label:8s} peak RSS {e.peak_mb:.1f} MB (target <= {RSS_TARGET_MB:.0f}: {rss}); "
            f"{ratio:.2f}× COPY's rows/s (target >= {RATE_TARGET}: {rate})"
        )
    for label, pick in (("CLI", 2), ("gateway", 3)):
        per_row = [r[0] / _export(r, pick).seconds for r in results]
        shown = "/".join(f"{v:,.0f}" for v in per_row)
        print(
            f"  growth {label} rows/s ×1/×2/×4: {shown} (×4 / ×1 = {per_row[-1] / per_row[0]:.2f})"
        )
    print(f"load at end: {machine.loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

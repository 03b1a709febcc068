"""A year of charges, ~100M rows, in the partitioned ledger: a tenant's month and the
organisation's month through a real gateway, p99 over 200 requests each.

What is timed, against a real `finops-gateway` process (ENABLE_AUTH=false, so no Kubernetes
review is in the clock), one request at a time over a kept-alive connection:
- one tenant's month by meter: `GET /api/v1/namespaces/{ns}/costs` for a random namespace;
- the organisation's month, what the dashboard's "All" shows: `GET /api/v1/cost-series`
  (every namespace, by day and source) and `GET /api/v1/cost-breakdown` (every namespace,
  Subscription and source), both answered from the daily sums for whole days.
Baselines in the same run: the `/healthz` round trip of the same process (the floor any route
pays) and the organisation's month summed from the hourly rows (the exact reference query of
tests/oracle/ledger_sums.py: what the route cost before the daily sums), a few requests only.

The ledger: ~2,000 Subscriptions (four per namespace) × 6 sources × every hour of 2025, one
month partition at a time: rows made here in the order charge runs lay them (hour by hour) and
loaded with `COPY` into the month's table, its indexes built, attached to the ledger, and its
daily, monthly and per-namespace sums added (the same sums the ledger's triggers keep; one
day's and one month's are checked against the rows). Growth: the same ledger measured after
3, 6 and 12 months are loaded (×1, ×2, ×4 rows),
always for the same month (February), so a request should cost the same at each size.

The throw-away PostgreSQL lives under `.cache/` (git-ignored; ~30 GB at full size) and is
removed at the end. Its shared buffers are raised to 1 GB, as any server holding a ledger this
size would be configured.

    .venv/bin/python -m benchmarks.ledger_year                    # ~105M rows
    .venv/bin/python -m benchmarks.ledger_year --namespaces 20    # small: ~4M rows
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import pathlib
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import psycopg
from benchmarks import gateway as gw
from benchmarks import machine
from tests.oracle import ledger_sums

from finops.store import migrate, partitions, reads, spans
from finops_devenv import postgres

CLUSTER = gw.CLUSTER
YEAR = 2025
SUBS_PER_NAMESPACE = 4
SOURCES = ("subscription", "cpuHour", "gpuHour", "ramGbHour", "pvGbHour", "networkGb")
MONTH = (dt.datetime(YEAR, 2, 1, tzinfo=dt.UTC), dt.datetime(YEAR, 3, 1, tzinfo=dt.UTC))
OPEN_FROM = dt.datetime(YEAR, 12, 1, tzinfo=dt.UTC)
COLUMNS = (
    "cluster, subscription_uid, hour, source, quantity, unit_price_micros, amount_micros,"
    " currency, finalized, offering_version_id, subscription_version_id"
)


def hours_of(month: dt.datetime) -> Iterator[dt.datetime]:
    hour, end = month, partitions.add_months(month, 1)
    while hour < end:
        yield hour
        hour += dt.timedelta(hours=1)


def versions(conn: psycopg.Connection[Any], namespaces: int) -> list[tuple[int, str]]:
    """One Offering version and a version per Subscription: (id, uid) in id order."""
    conn.execute(
        "INSERT INTO offering_versions (cluster, uid, namespace, name, generation,"
        " resource_version, spec) VALUES (%s, 'off', 'finops', 'platform', 1, '1', '{}')",
        (CLUSTER,),
    )
    conn.execute(
        """
        INSERT INTO subscription_versions (cluster, uid, namespace, name, generation,
            resource_version, spec, namespace_labels)
        SELECT %s, 'sub-' || n || '-' || s, 'team-' || lpad(n::text, 4, '0'), 'app-' || s,
               1, '1', '{}', jsonb_build_object('stakater.com/tenant', 'tenant-' || n)
        FROM generate_series(0, %s - 1) n, generate_series(0, %s - 1) s ORDER BY n, s
        """,
        (CLUSTER, namespaces, SUBS_PER_NAMESPACE),
    )
    rows = conn.execute(
        "SELECT id, uid FROM subscription_versions WHERE cluster = %s ORDER BY id", (CLUSTER,)
    ).fetchall()
    return [(int(i), str(u)) for i, u in rows]


def hour_blocks(subs: Sequence[tuple[int, str]], offering: int) -> list[str]:
    """COPY text of one hour of every Subscription's six rows, per hour of the day (a daily
    rhythm), with `@H` for the hour and `@F` for the finalized flag."""
    picker = random.Random(7)
    base = {(vid, s): picker.randint(1_000, 900_000) for vid, _ in subs for s in SOURCES}
    blocks = []
    for hod in range(24):
        rhythm = 2 if 8 <= hod < 20 else 1
        lines = []
        for vid, uid in subs:
            for source in SOURCES:
                price = base[(vid, source)]
                qty = rhythm if source != "subscription" else 1
                lines.append(
                    f"{CLUSTER}\t{uid}\t@H\t{source}\t{qty}\t{price}\t{qty * price}\tUSD"
                    f"\t@F\t{offering}\t{vid}\n"
                )
        blocks.append("".join(lines))
    return blocks


def load_month(conn: psycopg.Connection[Any], month: dt.datetime, blocks: list[str]) -> int:
    """One month partition: COPY, indexes, attach, daily sums. Returns the rows loaded."""
    part = f"subscription_charges_y{month:%Y}m{month:%m}"
    end = partitions.add_months(month, 1)
    final = "t" if month < OPEN_FROM else "f"
    conn.execute(
        f"CREATE TABLE {part} (LIKE subscription_charges INCLUDING DEFAULTS"
        " INCLUDING CONSTRAINTS)".encode()
    )
    with conn.cursor() as cur, cur.copy(f"COPY {part} ({COLUMNS}) FROM STDIN".encode()) as copy:
        for hour in hours_of(month):
            stamp = hour.strftime("%Y-%m-%d %H:00:00+00")
            copy.write(blocks[hour.hour].replace("@H", stamp).replace("@F", final))
    conn.execute(
        f"ALTER TABLE {part} ADD PRIMARY KEY (cluster, subscription_uid, hour, source)".encode()
    )
    conn.execute(
        f"CREATE INDEX {part}_open ON {part} (cluster, subscription_uid, hour)"
        " WHERE NOT finalized".encode()
    )
    conn.execute(
        f"CREATE INDEX {part}_by_version_hour ON {part} (subscription_version_id, hour)"
        " INCLUDE (cluster, subscription_uid, source, currency, amount_micros,"
        " finalized)".encode()
    )
    bounds = f"FROM ('{month.isoformat()}') TO ('{end.isoformat()}')"
    check = f"hour >= '{month.isoformat()}' AND hour < '{end.isoformat()}'"
    conn.execute(f"ALTER TABLE {part} ADD CONSTRAINT {part}_range CHECK ({check})".encode())

    conn.execute(
        f"ALTER TABLE subscription_charges ATTACH PARTITION {part} FOR VALUES {bounds}".encode()
    )
    conn.execute(f"ALTER TABLE {part} DROP CONSTRAINT {part}_range".encode())
    conn.execute(
        f"""
        INSERT INTO charge_days
        SELECT cluster, date_trunc('day', hour, 'UTC'), subscription_version_id,
               offering_version_id, source, currency, sum(amount_micros),
               coalesce(sum(amount_micros) FILTER (WHERE finalized), 0), count(*)
        FROM {part} GROUP BY 1, 2, 3, 4, 5, 6
        """.encode()
    )
    conn.execute(
        """
        INSERT INTO charge_months
        SELECT cluster, date_trunc('month', day, 'UTC'), subscription_version_id,
               offering_version_id, source, currency, sum(amount_micros),
               sum(finalized_micros), sum(charge_rows)
        FROM charge_days WHERE day >= %s AND day < %s GROUP BY 1, 2, 3, 4, 5, 6
        """,
        (month, end),
    )
    conn.execute(
        """
        INSERT INTO charge_namespace_days
        SELECT d.cluster, d.day, v.namespace, d.source, d.currency, sum(d.amount_micros),
               sum(d.finalized_micros), sum(d.charge_rows)
        FROM charge_days d JOIN subscription_versions v ON v.id = d.subscription_version_id
        WHERE d.day >= %s AND d.day < %s GROUP BY 1, 2, 3, 4, 5
        """,
        (month, end),
    )
    conn.execute("ANALYZE charge_days, charge_months, charge_namespace_days")
    conn.execute(f"VACUUM (ANALYZE) {part}".encode())
    row = conn.execute(f"SELECT count(*) FROM {part}".encode()).fetchone()
    return int(row[0]) if row else 0


def sums_agree(conn: psycopg.Connection[Any], day: dt.datetime) -> bool:
    """Do the daily sums of `day` and the monthly sums of its month equal the sums of the
    hourly rows?"""
    month = day.replace(day=1)
    raw_month = conn.execute(
        "SELECT subscription_version_id, source, sum(amount_micros), count(*)"
        " FROM subscription_charges WHERE hour >= %s AND hour < %s GROUP BY 1, 2 ORDER BY 1, 2",
        (month, partitions.add_months(month, 1)),
    ).fetchall()
    kept_month = conn.execute(
        "SELECT subscription_version_id, source, amount_micros, charge_rows FROM charge_months"
        " WHERE month = %s ORDER BY 1, 2",
        (month,),
    ).fetchall()
    raw = conn.execute(
        """
        SELECT subscription_version_id, source, sum(amount_micros), count(*)
        FROM subscription_charges WHERE hour >= %s AND hour < %s GROUP BY 1, 2 ORDER BY 1, 2
        """,
        (day, day + dt.timedelta(days=1)),
    ).fetchall()
    kept = conn.execute(
        "SELECT subscription_version_id, source, amount_micros, charge_rows FROM charge_days"
        " WHERE day = %s ORDER BY 1, 2",
        (day,),
    ).fetchall()
    return bool(raw) and raw == kept and raw_month == kept_month


@dataclasses.dataclass
class Figures:
    """One size's request times in seconds."""

    months: int
    rows: int
    tenant: list[float]
    series: list[float]
    breakdown: list[float]
    healthz: list[float]
    raw_series: list[float]
    load: str


def p99(values: Sequence[float]) -> float:
    return gw.p99(values)


def window() -> dict[str, str]:
    return {"from": MONTH[0].isoformat(), "to": MONTH[1].isoformat()}


def measure(
    conn: psycopg.Connection[Any],
    client: httpx.Client,
    namespaces: int,
    requests: int,
    baseline: int,
    seed: int,
) -> tuple[list[float], list[float], list[float], list[float], list[float]]:
    picker = random.Random(seed)
    tenants = [f"team-{picker.randrange(namespaces):04d}" for _ in range(requests)]

    def ok(response: httpx.Response) -> None:
        if response.status_code != 200:
            raise RuntimeError(f"{response.request.url}: {response.status_code} {response.text}")

    def tenant(ns: str) -> None:
        ok(client.get(f"/api/v1/namespaces/{ns}/costs", params=window()))

    def series(_: str) -> None:
        ok(client.get("/api/v1/cost-series", params={**window(), "step": "day"}))

    def breakdown(_: str) -> None:
        ok(client.get("/api/v1/cost-breakdown", params=window()))

    def healthz(_: str) -> None:
        ok(client.get("/healthz"))

    every = [f"team-{n:04d}" for n in range(namespaces)]

    def raw(_: str) -> None:
        ledger_sums.daily_series(
            conn,
            cluster=CLUSTER,
            namespaces=every,
            start=MONTH[0],
            end=MONTH[1],
            by_subscription=False,
        )

    calls: list[Callable[[str], None]] = [tenant, series, breakdown, healthz]
    out = [gw.latencies(call, tenants) for call in calls]
    rows = gw.latencies(raw, tenants[:baseline])
    return out[0], out[1], out[2], out[3], rows


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def report(f: Figures) -> Iterator[str]:
    yield (f"×{f.months // 3}: {f.rows:,} charge rows ({f.months} months loaded); load {f.load}")
    for label, values in (
        ("tenant's month (costs)", f.tenant),
        ("organisation by day (series)", f.series),
        ("organisation by Subscription (breakdown)", f.breakdown),
        ("/healthz", f.healthz),
        ("organisation by day from the hourly rows", f.raw_series),
    ):
        yield (
            f"  {label:44s} p50 {ms(statistics.median(values))}  p99 {ms(p99(values))}"
            f"  ({len(values)} requests)"
        )


def summary(figures: Sequence[Figures]) -> Iterator[str]:
    last = figures[-1]
    yield ""
    yield f"at {last.rows:,} rows (load {last.load}):"
    lines = (
        ("tenant's month p99", p99(last.tenant), 0.050),
        ("organisation's month by day p99", p99(last.series), 0.300),
        ("organisation's month by Subscription p99", p99(last.breakdown), 0.300),
    )
    for label, value, target in lines:
        verdict = "met" if value <= target else "NOT met"
        yield f"  {label:42s} {ms(value)}  (target <= {target * 1000:.0f} ms: {verdict})"
    yield (
        "  ratio hourly rows / daily sums, org by day p50: "
        f"{statistics.median(last.raw_series) / statistics.median(last.series):.1f}"
    )
    yield f"  ratio tenant p99 / healthz p99: {p99(last.tenant) / p99(last.healthz):.1f}"
    sizes = "/".join(f"{f.rows / 1e6:.1f}M" for f in figures)
    picks: list[tuple[str, Callable[[Figures], list[float]]]] = [
        ("tenant p99", lambda f: f.tenant),
        ("org by day p99", lambda f: f.series),
        ("org breakdown p99", lambda f: f.breakdown),
        ("org by day from rows p50", lambda f: f.raw_series),
    ]
    for label, pick in picks:
        values = [p99(pick(f)) if "p99" in label else statistics.median(pick(f)) for f in figures]
        shown = "/".join(ms(v).strip() for v in values)
        growth = values[-1] / values[0]
        yield f"  growth {label} at {sizes}: {shown} (×4 / ×1 = {growth:.2f})"


def run(dsn: str, namespaces: int, requests: int, baseline: int, seed: int) -> Iterator[str]:
    figures: list[Figures] = []
    total = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate.apply(conn)
        subs = versions(conn, namespaces)
        offering_row = conn.execute("SELECT id FROM offering_versions").fetchone()
        blocks = hour_blocks(subs, int(offering_row[0]) if offering_row else 1)
        loaded = 0
        with gw.gateway(dsn) as client:
            for months in (3, 6, 12):
                began = time.perf_counter()
                while loaded < months:
                    month = dt.datetime(YEAR, loaded + 1, 1, tzinfo=dt.UTC)
                    total += load_month(conn, month, blocks)
                    loaded += 1
                built = time.perf_counter() - began
                agree = sums_agree(conn, MONTH[0] + dt.timedelta(days=9))
                yield (
                    f"(loaded to {loaded} months in {built:.0f} s; the sums of one day and of "
                    f"its month equal their rows: {'yes' if agree else 'NO'})"
                )
                load = machine.loadavg()
                t, s, b, h, r = measure(conn, client, namespaces, requests, baseline, seed)
                figures.append(
                    Figures(months, total, t, s, b, h, r, f"{load} → {machine.loadavg()}")
                )
                yield from report(figures[-1])
            yield from summary(figures)
            yield ""
            yield "EXPLAIN (ANALYZE, BUFFERS) of a tenant's month at full size:"
            plan = conn.execute(
                b"EXPLAIN (ANALYZE, BUFFERS) " + reads.NAMESPACE_SUMS.encode(),
                spans.params(CLUSTER, *MONTH, namespace="team-0001"),
            ).fetchall()
            yield from (f"  {r[0]}" for r in plan)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--namespaces", type=int, default=500, help="4 Subscriptions each")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--baseline-requests", type=int, default=5, help="summed from hourly rows (slow)"
    )
    parser.add_argument("--seed", type=int, default=26)
    parser.add_argument(
        "--base-dir", default=".cache/bench-ledger", help="where the throw-away cluster lives"
    )
    args = parser.parse_args(argv)
    base = pathlib.Path(args.base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    print(f"load at start: {machine.loadavg()}", flush=True)
    with postgres.PostgresCluster(base_dir=base) as cluster:
        with psycopg.connect(cluster.admin_dsn, autocommit=True) as admin:
            for setting, value in (
                ("shared_buffers", "1GB"),
                ("maintenance_work_mem", "1GB"),
                ("max_wal_size", "2GB"),  # the disk is shared: WAL kept small
                ("checkpoint_timeout", "30min"),
            ):
                admin.execute(f"ALTER SYSTEM SET {setting} = '{value}'".encode())
        cluster.stop_server()
        cluster.start_server()
        dsn = cluster.create_database("ledger_year")
        for line in run(dsn, args.namespaces, args.requests, args.baseline_requests, args.seed):
            print(line, flush=True)
    print(f"load at end: {machine.loadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

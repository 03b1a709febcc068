"""The gateway's costs route over a large ledger: one tenant's month by meter, p99 of 200.

What is timed: `GET /api/v1/namespaces/{ns}/costs?from=…&to=…` against a real `finops-gateway`
process (ENABLE_AUTH=false, so no Kubernetes review is in the clock) answering from a ledger of
millions of hourly charge rows, one request at a time over a kept-alive connection, each for a
tenant picked at random; separately the store query behind it (`reads.namespace_costs`) on a
direct connection, so the HTTP share is visible.

Why a ratio against the schema without the index: the absolute p99 depends on the machine, but
how much migration 0004's covering `(subscription_version_id, hour)` index saves is measured side
by side in the same run, on the same rows, by dropping it and restoring the single-column index
main had (fewer requests there: each takes seconds at 10M rows). The `/healthz` round trip of
the same process is printed too: the floor no route can beat.

The ledger: a year of hours, four Subscriptions per namespace (each relabelled mid-month, so two
versions), all six sources every hour, written hour by hour as the charge run would lay them
out. Growth: the ledger is built at three sizes (×1, ×2, ×4 namespaces) while one tenant's month
stays the same size, so a request should cost the same at each: it reads its own rows, not the
ledger.

    .venv/bin/python -m benchmarks.gateway                 # 2.5M, 5M, 10M rows, throw-away cluster
    .venv/bin/python -m benchmarks.gateway --namespaces 4  # small: 0.2M, 0.4M, 0.8M rows
    .venv/bin/python -m benchmarks.gateway --dsn ...       # an existing empty database
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from typing import Any

import httpx
import psycopg

from finops.store import migrate, reads
from finops_devenv import ports, postgres

CLUSTER = "bench"
FIRST = dt.datetime(2025, 4, 1, tzinfo=dt.UTC)
MONTH = (dt.datetime(2025, 10, 1, tzinfo=dt.UTC), dt.datetime(2025, 11, 1, tzinfo=dt.UTC))
RELABEL = dt.datetime(2025, 10, 15, tzinfo=dt.UTC)
SUBSCRIPTIONS = 4
SOURCES = 6
INDEX = "subscription_charges_by_version_hour"
OLD_INDEX = "subscription_charges_by_version"

_VERSIONS = """
    INSERT INTO subscription_versions (cluster, uid, namespace, name, generation,
        resource_version, spec, namespace_labels, subscription_labels)
    SELECT %(cluster)s, 'sub-' || n || '-' || s, 'team-' || lpad(n::text, 4, '0'), 'app-' || s,
           1, '1', '{}', jsonb_build_object('stakater.com/tenant', 'tenant-' || n),
           jsonb_build_object('app', 'app-' || s, 'rev', r::text)
    FROM generate_series(0, %(namespaces)s - 1) n, generate_series(0, %(subs)s - 1) s,
         generate_series(1, 2) r
    ORDER BY n, s, r
"""

# Hour by hour, every Subscription's six rows together: the layout hourly charge runs leave.
_CHARGES = """
    INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,
        unit_price_micros, amount_micros, currency, finalized, offering_version_id,
        subscription_version_id)
    SELECT %(cluster)s, v.uid, h, m.source, q.quantity, m.price,
           round(q.quantity * m.price)::bigint, 'USD', h < %(open)s, %(offering)s, v.id
    FROM generate_series(%(first)s::timestamptz, %(last)s::timestamptz, interval '1 hour') h
    CROSS JOIN LATERAL (
        SELECT id, uid FROM subscription_versions
        WHERE cluster = %(cluster)s
          AND subscription_labels ->> 'rev' = CASE WHEN h < %(relabel)s THEN '1' ELSE '2' END
        ORDER BY id) v
    CROSS JOIN (VALUES ('subscription', 1, 1000), ('cpuHour', 2, 31000), ('gpuHour', 3, 900000),
                       ('ramGbHour', 4, 4000), ('pvGbHour', 5, 120), ('networkGb', 6, 20000))
               AS m (source, k, price)
    CROSS JOIN LATERAL (
        SELECT ((v.id * 7919 + extract(epoch FROM h)::bigint / 3600 * 31 + m.k * 17) %% 4001)
               / 1000.0 AS quantity) q
"""


@dataclasses.dataclass(frozen=True)
class Size:
    namespaces: int
    hours: int

    @property
    def rows(self) -> int:
        return self.namespaces * SUBSCRIPTIONS * SOURCES * self.hours


def generate(conn: psycopg.Connection[Any], size: Size) -> int:
    """Empty the ledger and write `size` into it, a month of hours per statement."""
    conn.execute("TRUNCATE subscription_charges, subscription_versions, offering_versions")
    offering = conn.execute(
        "INSERT INTO offering_versions (cluster, uid, namespace, name, generation,"
        " resource_version, spec) VALUES (%s, 'offering-1', 'catalog', 'standard', 1, '1', '{}')"
        " RETURNING id",
        (CLUSTER,),
    ).fetchone()
    assert offering is not None
    conn.execute(
        _VERSIONS, {"cluster": CLUSTER, "namespaces": size.namespaces, "subs": SUBSCRIPTIONS}
    )
    end = FIRST + dt.timedelta(hours=size.hours)
    at = FIRST
    while at < end:
        upto = min(at + dt.timedelta(days=31), end)
        params = {
            "cluster": CLUSTER,
            "first": at,
            "last": upto - dt.timedelta(hours=1),
            "open": end - dt.timedelta(hours=2),
            "relabel": RELABEL,
            "offering": offering[0],
        }
        conn.execute(_CHARGES, params)
        at = upto
    # Past months are settled and never rewritten: autovacuum would have marked them visible.
    conn.execute("VACUUM (FREEZE, ANALYZE) subscription_charges")
    conn.execute("ANALYZE subscription_versions")
    row = conn.execute("SELECT count(*) FROM subscription_charges").fetchone()
    assert row is not None
    return int(row[0])


def use_main_schema(conn: psycopg.Connection[Any], main: bool) -> None:
    """Swap between main's single-column index and migration 0004's composite one."""
    if main:
        conn.execute(f"DROP INDEX IF EXISTS {INDEX}")
        conn.execute(f"CREATE INDEX {OLD_INDEX} ON subscription_charges (subscription_version_id)")
    else:
        conn.execute(f"DROP INDEX IF EXISTS {OLD_INDEX}")
        conn.execute(
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON subscription_charges"
            " (subscription_version_id, hour)"
            " INCLUDE (cluster, subscription_uid, source, currency, amount_micros, finalized)"
        )
    conn.execute("ANALYZE subscription_charges")


def tenants(size: Size, count: int, seed: int) -> list[str]:
    picker = random.Random(seed)
    return [f"team-{picker.randrange(size.namespaces):04d}" for _ in range(count)]


def latencies(call: Callable[[str], object], namespaces: Sequence[str]) -> list[float]:
    """Seconds per call, one at a time, after three warm-up calls that are not counted."""
    for namespace in namespaces[:3]:
        call(namespace)
    out = []
    for namespace in namespaces:
        began = time.perf_counter()
        call(namespace)
        out.append(time.perf_counter() - began)
    return out


def p99(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


@contextlib.contextmanager
def gateway(dsn: str) -> Iterator[httpx.Client]:
    """A real `finops-gateway` process on a free port, auth off; a kept-alive client to it."""
    with gateway_process(dsn, CLUSTER) as (client, _):
        yield client


@contextlib.contextmanager
def gateway_process(
    dsn: str, cluster: str, timeout: float = 60
) -> Iterator[tuple[httpx.Client, int]]:
    """`gateway`, for `cluster`, with the process id (whose memory a benchmark may read)."""
    port = ports.free_port()
    env = dict(os.environ, PG_CONNECTION_STRING=dsn, PORT=str(port), CLUSTER_ID=cluster)
    env["ENABLE_AUTH"] = "false"
    proc = subprocess.Popen(
        [sys.executable, "-m", "finops.gateway.app"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=timeout) as client:
            deadline = time.monotonic() + 60
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the gateway exited with {proc.returncode}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/healthz").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("the gateway did not become healthy in 60 s")
                time.sleep(0.2)
            yield client, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def explain(conn: psycopg.Connection[Any], namespace: str) -> list[str]:
    """The costs query's plan with actual times and buffers, as the store runs it."""
    # reads.namespace_costs is the statement; it is quoted here so EXPLAIN sees it verbatim.
    rows = conn.execute(
        b"EXPLAIN (ANALYZE, BUFFERS) " + reads.NAMESPACE_COSTS.encode(),
        (CLUSTER, CLUSTER, namespace, *MONTH),
    ).fetchall()
    return [str(r[0]) for r in rows]


@dataclasses.dataclass
class Figures:
    """One size's timings in seconds; `main_*` with main's index instead of 0004's."""

    size: Size
    rows: int
    month_rows: int
    items: int
    http: list[float]
    store: list[float]
    healthz: list[float]
    main_http: list[float]
    main_store: list[float]
    plan: list[str]
    main_plan: list[str]


def timings(
    conn: psycopg.Connection[Any], client: httpx.Client, picks: Sequence[str]
) -> tuple[list[float], list[float]]:
    """The costs route over HTTP and the store query behind it, for each tenant in `picks`."""
    window = {"from": MONTH[0].isoformat(), "to": MONTH[1].isoformat()}

    def route(namespace: str) -> None:
        resp = client.get(f"/api/v1/namespaces/{namespace}/costs", params=window)
        resp.raise_for_status()

    def query(namespace: str) -> None:
        reads.namespace_costs(
            conn, cluster=CLUSTER, namespace=namespace, start=MONTH[0], end=MONTH[1]
        )

    return latencies(route, picks), latencies(query, picks)


def measure(
    conn: psycopg.Connection[Any],
    client: httpx.Client,
    size: Size,
    picks: Sequence[str],
    baseline: int,
) -> Figures:
    """Build `size`; time every pick on 0004's index, then the first `baseline` picks on main's
    (seconds each there, so fewer); restore 0004 for the next size."""
    rows = generate(conn, size)
    use_main_schema(conn, main=False)
    items = client.get(
        f"/api/v1/namespaces/{picks[0]}/costs",
        params={"from": MONTH[0].isoformat(), "to": MONTH[1].isoformat()},
    ).json()["items"]
    month = conn.execute(
        "SELECT count(*) FROM subscription_charges c JOIN subscription_versions v"
        " ON v.id = c.subscription_version_id WHERE v.namespace = %s"
        " AND c.hour >= %s AND c.hour < %s",
        (picks[0], *MONTH),
    ).fetchone()
    assert month is not None
    http, store = timings(conn, client, picks)
    healthz = latencies(lambda _: client.get("/healthz").raise_for_status(), picks)
    plan = explain(conn, picks[0])
    use_main_schema(conn, main=True)
    main_http, main_store = timings(conn, client, picks[:baseline])
    main_plan = explain(conn, picks[0])
    use_main_schema(conn, main=False)
    return Figures(
        size,
        rows,
        int(month[0]),
        len(items),
        http,
        store,
        healthz,
        main_http,
        main_store,
        plan,
        main_plan,
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def pair(label: str, values: Sequence[float], main: Sequence[float] | None = None) -> str:
    line = f"  {label:<20}p50 {ms(statistics.median(values))}  p99 {ms(p99(values))}"
    return line if main is None else f"{line}   main's schema p99 {ms(p99(main))}"


def size_report(f: Figures, scale: float) -> Iterator[str]:
    """One size: both timings with and without 0004, the floor, and the cost per row."""
    yield (
        f"×{scale:g}: {f.rows:,} charge rows ({f.size.namespaces} namespaces × "
        f"{SUBSCRIPTIONS} Subscriptions × {SOURCES} sources × {f.size.hours:,} h); "
        f"a tenant's month sums {f.month_rows:,} rows into {f.items} items"
    )
    yield pair("costs route (HTTP)", f.http, f.main_http)
    yield pair("store query", f.store, f.main_store)
    yield pair("/healthz", f.healthz)
    yield (
        f"  per request (p99): {p99(f.http) * 1e6 / f.month_rows:.2f} µs per summed row, "
        f"{p99(f.http) * 1e9 / f.rows:.1f} µs per million ledger rows"
    )


def summary(figures: Sequence[Figures], requests: int, baseline: int) -> Iterator[str]:
    """Ratios and the target at the largest size, growth across sizes, then both plans."""
    base, top = figures[0], figures[-1]
    scale = top.size.namespaces / base.size.namespaces
    figure = {
        "costs route p99": ms(p99(top.http)),
        "ratio main's schema / 0004, p99 (HTTP)": f"{p99(top.main_http) / p99(top.http):8.1f}",
        "ratio main's schema / 0004, p99 (SQL)": f"{p99(top.main_store) / p99(top.store):8.1f}",
        "ratio costs p99 / healthz p99": f"{p99(top.http) / p99(top.healthz):8.1f}",
        f"growth: p99 at ×{scale:g} / p99 at ×1": f"{p99(top.http) / p99(base.http):8.2f}",
        "target p99 <= 150 ms": "     met" if p99(top.http) <= 0.150 else " NOT met",
    }
    yield ""
    yield (
        f"at {top.rows:,} rows, {requests} requests ({baseline} on main's schema), each a "
        "random tenant's month by meter:"
    )
    yield from (f"  {k + ':':<42}{v}" for k, v in figure.items())
    yield ""
    yield f"EXPLAIN (ANALYZE, BUFFERS) of the costs query at {top.rows:,} rows, migration 0004:"
    yield from (f"  {line}" for line in top.plan)
    yield ""
    yield "the same on main's schema (single-column index on subscription_version_id):"
    yield from (f"  {line}" for line in top.main_plan)


def run(
    dsn: str, namespaces: int, hours: int, requests: int, baseline: int, seed: int
) -> Iterator[str]:
    """Build, measure and report each size in turn (printed as it comes), then the summary."""
    sizes = [Size(max(1, namespaces // d), hours) for d in (4, 2, 1)]
    figures: list[Figures] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate.apply(conn)
        with gateway(dsn) as client:
            for size in sizes:
                began = time.perf_counter()
                picks = tenants(size, requests, seed)
                figures.append(measure(conn, client, size, picks, baseline))
                yield from size_report(figures[-1], size.namespaces / sizes[0].namespaces)
                yield f"  (built and measured in {time.perf_counter() - began:.0f} s)"
    yield from summary(figures, requests, baseline)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--namespaces", type=int, default=48, help="at the largest size")
    parser.add_argument("--hours", type=int, default=365 * 24)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument(
        "--baseline-requests", type=int, default=40, help="on main's schema (seconds each)"
    )
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--dsn", help="an existing empty database (default: throw-away cluster)")
    args = parser.parse_args(argv)
    if args.namespaces < 4 or args.namespaces % 4:
        parser.error("--namespaces must be a multiple of 4 (the sizes are ×1, ×2, ×4)")
    if args.hours < 5136:
        parser.error("--hours must reach past the month measured (at least 5136)")
    with ExitStack() as stack:
        dsn: str | None = args.dsn
        if dsn is None:
            cluster = stack.enter_context(postgres.PostgresCluster())
            dsn = cluster.create_database("gateway_bench")
        for line in run(
            dsn, args.namespaces, args.hours, args.requests, args.baseline_requests, args.seed
        ):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

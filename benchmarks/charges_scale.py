"""Charge collection at scale: up to 10k Subscriptions × 24 hours over 1M allocation rows.

Why this floor: the contract's minimum for a first run is to price every selected allocation
row exactly and write the charge rows. The floor is one hand-written SQL script doing just
that for this benchmark's Offering: the Subscriptions loaded by COPY, the usage-source match
(each Subscription's namespace), the active-interval trimming of the first hour, integer
micros with one half-even rounding per row, and the fee rows, `INSERT … SELECT`ed into the
real ledger table (its partitions, indexes and triggers) in one transaction. The run does that
and its bookkeeping (watermarks, version mirrors, margins of any Offering, the stale-row
merge, billing periods, the buckets' sums read back); run ÷ floor is what the bookkeeping and
the generality cost. The floor's rows are checked equal to the run's, so both do the same
work. The Kubernetes side (listing, status patches) is not timed: the ledger pass
`finops.jobs.charges.charge` is called directly with the Subscriptions a run would have read.

Rows are generated straight into `provider_allocations` by SQL. Each Subscription bills a fee
(HourBoundary) plus cpuHour and ramGbHour with margins on its own namespace. Timed: the first
run (every row new), a replay of the same hour (nothing changes), and the floor (into the same
ledger emptied again). Targets: first run ≤ 1.25× the floor, replay ≤ 0.5× the floor. Growth:
the run is repeated at each of `--scales` (Subscriptions and rows multiplied, a fresh database
each) and prints the cost per Subscription, which should stay flat; the default sizes end at
the issue's 10k Subscriptions over 1M rows.

    .venv/bin/python -m benchmarks.charges_scale                          # ×1, ×2, ×4 of 2.5k
    .venv/bin/python -m benchmarks.charges_scale --subscriptions 250 --rows 25000  # smaller
    .venv/bin/python -m benchmarks.charges_scale --scales 1 --dsn ...     # an existing empty db
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from typing import Any

import psycopg
from benchmarks import machine

from finops.api import bodies
from finops.collection import charge_plan, charges
from finops.jobs import charges as job
from finops.jobs import periods as periods_job
from finops.store import allocations, charge_sql, migrate
from finops_devenv import postgres

CLUSTER = "bench"
SCHEDULED = dt.datetime(2026, 4, 2, 0, tzinfo=dt.UTC)
HOURS = 24
OFFERING: bodies.OfferingBody = {
    "apiVersion": "finops.stakater.com/v1alpha1",
    "kind": "Offering",
    "metadata": {"uid": "offering-1", "namespace": "bench", "name": "base", "generation": 1},
    "spec": {
        "pricing": {
            "subscriptionFee": {
                "priceMicros": 1_000_000,
                "tickAlignment": "HourBoundary",
                "period": "1",
            },
            "resourcePricing": [
                {"name": "cpuHour", "margins": {"factorMilli": 1150}},
                {"name": "ramGbHour", "margins": {"absoluteMicros": 200}},
            ],
        }
    },
}


def generate(conn: psycopg.Connection[Any], subscriptions: int, rows: int) -> int:
    """`rows` allocation rows over HOURS finalized hours plus the scheduled one, spread over
    one namespace per Subscription, priced by one book."""
    book = allocations.ensure_pricebook(
        conn,
        cluster=CLUSTER,
        namespace="bench",
        name="bench",
        uid="bench",
        currency="USD",
        rates={"cpuHour": 31_000, "ramGbHour": 4_000},
    )
    hours = HOURS + 1
    pods = max(1, rows // (hours * subscriptions))
    conn.execute(
        """
        INSERT INTO provider_allocations (cluster, hour, namespace, name, aggregation,
            start_time, end_time, minutes, controller_kind, controller_name, pod,
            cpu_core_usage_average, ram_byte_usage_average, pricebook_id, currency,
            is_finalized)
        SELECT %(cluster)s, h, 'ns-' || s, 'ns-' || s || '/web-' || p, 'namespace,pod',
               h, h + interval '1 hour', 60, 'deployment', 'web', 'web-' || p,
               ((s * 7 + p * 13) %% 997) / 1000.0 + 0.00017,
               268435456 + s * 31 + p + 0.5, %(book)s, 'USD', h < %(scheduled)s
        FROM generate_series(%(first)s::timestamptz, %(scheduled)s::timestamptz,
                             interval '1 hour') AS h,
             generate_series(0, %(subs)s - 1) AS s,
             generate_series(0, %(pods)s - 1) AS p
        """,
        {
            "cluster": CLUSTER,
            "book": book,
            "scheduled": SCHEDULED,
            "first": SCHEDULED - dt.timedelta(hours=HOURS),
            "subs": subscriptions,
            "pods": pods,
        },
    )
    conn.execute("ANALYZE provider_allocations")
    row = conn.execute("SELECT count(*) FROM provider_allocations").fetchone()
    assert row is not None
    return int(row[0])


def billed(
    subscriptions: int, activated_at: str = "2026-04-01T00:20:00Z"
) -> list[charge_plan.Billed]:
    """Subscriptions `sub-N` of the Offering, each with its own namespace `ns-N` as the one
    usage source, activated at `activated_at`."""
    activated = dt.datetime.fromisoformat(activated_at).astimezone(dt.UTC)
    out = []
    for i in range(subscriptions):
        obj = {
            "metadata": {
                "uid": f"sub-{i}",
                "namespace": "bench",
                "name": f"sub-{i}",
                "generation": 1,
                "resourceVersion": "1",
            },
            "spec": {
                "offeringRef": {"name": "base", "namespace": "bench"},
                "usageSources": [{"namespace": f"ns-{i}"}],
            },
            "status": {"activatedAt": activated},
        }
        state = charges.SubscriptionState.from_object(obj)
        terms = charges.terms_for(state, OFFERING["spec"])
        out.append(
            charge_plan.Billed(state, terms, OFFERING, {"stakater.com/tenant": f"t-{i % 50}"})
        )
    return out


FLOOR_SUBS = """
    CREATE TEMP TABLE floor_subs (uid text, namespace text, activated timestamptz,
                                  ov bigint, sv bigint) ON COMMIT DROP
"""

# Per Subscription-hour-PriceBook: each meter's usage weighted by the microseconds of its span
# inside the active interval, then one row per meter with the quantity, unit price and amount
# each rounded once, half to even; the fee's hours (trimmed to the active interval), with
# amounts in whole micros; all in key order into the ledger.
FLOOR = """
    INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,
        unit_price_micros, amount_micros, currency, finalized, offering_version_id,
        subscription_version_id, pricebook_id, covers_start, covers_end)
    WITH spans AS (
        SELECT s.uid, s.ov, s.sv, a.hour, a.pricebook_id AS book, a.currency,
               sum(greatest(a.cpu_core_usage_average, 0) * w.us) AS cpu,
               sum(greatest(a.ram_byte_usage_average, 0) * w.us) AS ram
        FROM floor_subs s
        JOIN provider_allocations a ON a.cluster = %(cluster)s AND a.namespace = s.namespace
             AND a.hour >= date_trunc('hour', s.activated) AND a.hour <= %(scheduled)s
        CROSS JOIN LATERAL (
            SELECT (extract(epoch FROM a.end_time)
                    - extract(epoch FROM greatest(a.start_time, s.activated))) * 1000000 AS us
        ) w
        WHERE w.us > 0
        GROUP BY 1, 2, 3, 4, 5, 6
    ), metered AS (
        SELECT u.uid, u.ov, u.sv, u.hour, u.book, u.currency, m.source, m.x, m.den, m.price
        FROM spans u JOIN pricebooks p ON p.id = u.book CROSS JOIN LATERAL (VALUES
            ('cpuHour', u.cpu, 3600000000::numeric, p.cpu_hour_micros * 1150::numeric),
            ('ramGbHour', u.ram, 3865470566400000000::numeric,
             (p.ram_gb_hour_micros + 200) * 1000::numeric)
        ) m (source, x, den, price)
    )
    SELECT * FROM (
        SELECT %(cluster)s, uid, hour, source,
               finops_half_even(x * 1000000000000, den) * 0.000000000001,
               CASE WHEN x = 0 THEN 0 ELSE finops_half_even(x * price, 1000 * x) END,
               finops_half_even(x * price, den * 1000), currency, hour < %(scheduled)s,
               ov, sv, book, NULL::timestamptz, NULL::timestamptz
        FROM metered
        UNION ALL
        SELECT %(cluster)s, s.uid, h, 'subscription', 1, %(fee)s,
               div(%(fee)s * (extract(epoch FROM h + interval '1 hour')
                              - extract(epoch FROM greatest(h, s.activated))), 3600),
               'USD', h < %(scheduled)s, s.ov, s.sv, NULL, greatest(h, s.activated),
               h + interval '1 hour'
        FROM floor_subs s,
             generate_series(date_trunc('hour', s.activated), %(scheduled)s, interval '1 hour') h
    ) r
    ORDER BY 2, 3, 4
"""


def timed(action: Any) -> tuple[float, Any]:
    began = time.perf_counter()
    result = action()
    return time.perf_counter() - began, result


TRIALS = 3
"""Trials per size, interleaved (floor, first run, replay): the medians are printed, as the
machine is shared and one timing moves with its load."""

FIRST_TARGET = 1.25
REPLAY_TARGET = 0.5
"""A first run within 1.25× the floor, a replay (nothing changes) within half of it."""

_VERSIONS = """
    WITH o AS (
        INSERT INTO offering_versions (cluster, uid, namespace, name, generation,
            resource_version, spec)
        VALUES (%(cluster)s, 'offering-1', 'bench', 'base', 1, '1', '{}') RETURNING id
    ), v AS (
        INSERT INTO subscription_versions (cluster, uid, namespace, name, generation,
            resource_version, spec)
        SELECT %(cluster)s, uid, 'bench', uid, 1, '1', '{}' FROM floor_subs ORDER BY uid
        RETURNING id, uid
    )
    UPDATE floor_subs f SET ov = o.id, sv = v.id FROM o, v WHERE v.uid = f.uid
"""

FINGERPRINT = """
    SELECT count(*), coalesce(sum(amount_micros), 0), coalesce(sum(hashtextextended(format(
        '%%s|%%s|%%s|%%s|%%s|%%s|%%s|%%s|%%s|%%s', subscription_uid, hour, source, quantity,
        unit_price_micros, amount_micros, currency, finalized, covers_start, covers_end), 0)
        ::numeric), 0)
    FROM subscription_charges
"""
"""Count, total and a sum of row hashes of every charge row but its version ids (which
differ between the floor's ledger and the run's)."""


WRITE = "price and write the rows"
PHASES = (
    (job, "_read", "read inputs (watermarks, versions, boundary)"),
    (charge_plan, "tables", "plan the fee runs and usage terms"),
    (job, "_make_partitions", "month partitions"),
    (job, "_write", WRITE),
    (periods_job, "settle", "billing periods (close, recheck, terms)"),
    (job, "read_settled", "read back the buckets' sums"),
)
STATEMENTS = "the write's statements"
WRITE_STEPS = (
    (charge_sql, "write", STATEMENTS, WRITE),
    (charge_sql, "_merge", "merge into the ledger", STATEMENTS),
)
"""(module, function, label, the step it is timed inside): in "price and write the rows" the
statements (of which the merge of rows the ledger holds or held: stale open rows deleted,
existing keys found, upserts), and the rest of the phase, which is the commit that applies
the sums."""


@contextlib.contextmanager
def phase_clock() -> Iterator[dict[str, float]]:
    """Seconds spent in each step of `job.charge` while the block runs (the steps are wrapped
    for the benchmark only, and restored after). A phase is counted only where it is not
    inside another (billing periods plan their corrections with `charge_plan.tables` too), and
    the write's steps only inside the write phase, so the phases add up to the run."""
    spent: dict[str, float] = {}
    saved = []
    inside: list[str] = []

    def timed(original: Any, label: str, within: str | None) -> Any:
        def timed_step(*args: Any, **kwargs: Any) -> Any:
            if (inside[-1] if inside else None) != within:
                return original(*args, **kwargs)
            began = time.perf_counter()
            inside.append(label)
            try:
                return original(*args, **kwargs)
            finally:
                inside.pop()
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - began

        return timed_step

    steps: list[tuple[Any, str, str, str | None]] = [(*step, None) for step in PHASES]
    for module, name, label, within in [*steps, *WRITE_STEPS]:
        original = getattr(module, name)
        saved.append((module, name, original))
        setattr(module, name, timed(original, label, within))
    try:
        yield spent
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)


def phase_lines(title: str, total: float, spent: dict[str, float]) -> list[str]:
    shown = ", ".join(f"{label} {spent.get(label, 0.0):.2f} s" for _, _, label in PHASES)
    rest = total - sum(spent.get(label, 0.0) for _, _, label in PHASES)
    statements, merge = (spent.get(label, 0.0) for _, _, label, _ in WRITE_STEPS)
    commit = spent.get(WRITE, 0.0) - statements
    return [
        f"  {title} by phase: {shown}, other {rest:.2f} s",
        f"    writing: usage priced and rows staged or inserted {statements - merge:.2f} s,"
        f" merged into the ledger {merge:.2f} s, commit (the sums applied) {commit:.2f} s",
    ]


def floor(
    conn: psycopg.Connection[Any],
    subs: Sequence[charge_plan.Billed],
    scheduled: dt.datetime = SCHEDULED,
) -> int:
    """The floor in one transaction: Subscriptions by COPY, their version rows, every charge
    row `INSERT … SELECT`ed into the ledger. Returns the rows written."""
    with conn.transaction():
        # The session settings the run's write takes (no JIT compilation, its memory for
        # sums), so neither side gains from a setting the other does not have.
        conn.execute("SET LOCAL jit = off")
        conn.execute(f"SET LOCAL work_mem = '{charge_sql.WORK_MEM}'")
        conn.execute(FLOOR_SUBS)
        with (
            conn.cursor() as cur,
            cur.copy("COPY floor_subs (uid, namespace, activated) FROM STDIN") as copy,
        ):
            for b in subs:
                copy.write_row(
                    (b.sub.uid, f"ns-{b.sub.uid.removeprefix('sub-')}", b.sub.activated_at)
                )
        conn.execute(_VERSIONS, {"cluster": CLUSTER})
        params = {"cluster": CLUSTER, "scheduled": scheduled, "fee": 1_000_000}
        return conn.execute(FLOOR, params).rowcount


LEDGER = (
    "subscription_charges, charge_terms, charge_corrections, billing_periods,"
    " billing_calendars, subscription_versions, offering_versions"
)
"""Everything the floor or a charge run writes (the ledger's sums are emptied with it by its
TRUNCATE trigger); the allocation rows and PriceBooks stay."""


def reset(conn: psycopg.Connection[Any]) -> None:
    """The database as generated: the ledger emptied, the changed allocation hours as the
    allocation writes left them (a run forgets those it has charged), a checkpoint taken."""
    conn.execute(f"TRUNCATE {LEDGER} CASCADE")
    conn.execute("DELETE FROM allocation_changes")
    conn.execute("INSERT INTO allocation_changes SELECT * FROM bench_allocation_changes")
    # The previous step's dirty pages written now, not during the next timed step.
    conn.execute("CHECKPOINT")


@dataclasses.dataclass
class Trial:
    """One trial: the floor, a first run and its replay, each from the state they need."""

    floor: float
    first: float
    replay: float
    first_phases: dict[str, float]
    replay_phases: dict[str, float]
    same: bool
    written: int
    floor_rows: int


def trial(conn: psycopg.Connection[Any], subs: Sequence[charge_plan.Billed]) -> Trial:
    """The floor on an empty ledger, then the run's first run on an empty ledger and a
    replay of the same hour; their rows are compared."""
    reset(conn)
    floor_time, floor_rows = timed(lambda: floor(conn, subs))
    floor_print = conn.execute(FINGERPRINT).fetchone()
    reset(conn)

    def charge() -> job.LedgerResult:
        return job.charge(conn, cluster=CLUSTER, scheduled=SCHEDULED, billed=subs)

    with phase_clock() as first_phases:
        first, result = timed(charge)
    run_print = conn.execute(FINGERPRINT).fetchone()
    with phase_clock() as replay_phases:
        replay, again = timed(charge)
    assert again.rows_written == 0, "a replayed hour must change nothing"
    return Trial(
        floor_time,
        first,
        replay,
        dict(first_phases),
        dict(replay_phases),
        floor_print == run_print,
        result.rows_written,
        floor_rows,
    )


def run(
    dsn: str, subscriptions: int, rows: int, trials: int = TRIALS
) -> tuple[list[str], float, float, float]:
    """The printed lines, the first run's and the replay's ratio to the floor (medians of
    `trials` interleaved trials), and ms per Subscription of the median first run."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate.apply(conn)
        count = generate(conn, subscriptions, rows)
        conn.execute("CREATE TABLE bench_allocation_changes AS SELECT * FROM allocation_changes")
        subs = billed(subscriptions)
        done = [trial(conn, subs) for _ in range(trials)]
    floor_time = statistics.median(t.floor for t in done)
    first = statistics.median(t.first for t in done)
    replay = statistics.median(t.replay for t in done)
    middle = min(done, key=lambda t: abs(t.first - first))
    same = all(t.same for t in done)
    per_sub = 1000 * first / subscriptions
    ratio, replay_ratio = first / floor_time, replay / floor_time
    each = "; ".join(
        f"{t.floor:.2f}/{t.first:.2f}/{t.replay:.2f} s ({t.first / t.floor:.2f}×)" for t in done
    )
    lines = [
        f"subscriptions: {subscriptions:,}, hours: {HOURS} + the scheduled hour",
        f"allocation rows: {count:,}; charge rows written: {middle.written:,} by the run, "
        f"{middle.floor_rows:,} by the floor; the same rows: {'yes' if same else 'NO'}",
        f"trials (floor/first/replay): {each}",
        f"charge run, first (all rows new):  {first:8.2f} s ({per_sub:.2f} ms per Subscription)",
        f"charge run, replay (no change):    {replay:8.2f} s",
        f"floor (exact INSERT … SELECT):     {floor_time:8.2f} s",
        f"ratio first run / floor:           {ratio:8.2f}"
        f"  (target <= {FIRST_TARGET}: {'met' if ratio <= FIRST_TARGET else 'not met'})",
        f"ratio replay / floor:              {replay_ratio:8.2f}"
        f"  (target <= {REPLAY_TARGET}: {'met' if replay_ratio <= REPLAY_TARGET else 'not met'})",
    ]
    lines += phase_lines("first run", middle.first, middle.first_phases)
    lines += phase_lines("replay", middle.replay, middle.replay_phases)
    return lines, ratio, replay_ratio, per_sub


def add_server_settings(parser: argparse.ArgumentParser) -> None:
    """`--pg-setting KEY=VALUE` (repeatable): a setting of the benchmark's own PostgreSQL,
    e.g. `shared_buffers=1GB` to measure the ledger on a server sized for it."""
    parser.add_argument(
        "--pg-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server setting of the benchmark's PostgreSQL (repeatable)",
    )


def server_settings(parser: argparse.ArgumentParser, values: Sequence[str]) -> dict[str, str]:
    """The `--pg-setting` values as a mapping, printed so the figures say what they ran on."""
    settings: dict[str, str] = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not (sep and key.strip() and setting.strip()):
            parser.error(f"--pg-setting {value!r}: expected KEY=VALUE, e.g. shared_buffers=1GB")
        settings[key.strip()] = setting.strip()
    shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "none (the server's defaults)"
    print(f"PostgreSQL settings given: {shown}", flush=True)
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--subscriptions", type=int, default=2_500, help="at scale 1")
    parser.add_argument("--rows", type=int, default=250_000, help="at scale 1")
    parser.add_argument("--scales", default="1,2,4", help="comma-separated multipliers")
    parser.add_argument("--dsn", help="an existing empty database (only with one scale)")
    parser.add_argument("--trials", type=int, default=TRIALS, help="per size; medians shown")
    add_server_settings(parser)
    args = parser.parse_args(argv)
    scales = [int(s) for s in args.scales.split(",") if s.strip()]
    if args.dsn and len(scales) != 1:
        parser.error("--dsn takes one scale: each size needs an empty database")
    if args.dsn and args.pg_setting:
        parser.error("--pg-setting applies to the benchmark's own PostgreSQL, not to --dsn")
    results = []
    print(f"load at start: {machine.loadavg()}", flush=True)
    settings = server_settings(parser, args.pg_setting)
    with ExitStack() as stack:
        cluster = (
            None if args.dsn else stack.enter_context(postgres.PostgresCluster(settings=settings))
        )
        for scale in scales:
            dsn = args.dsn or cluster.create_database(f"charges_bench_{scale}")  # type: ignore[union-attr]
            print(f"-- scale ×{scale} (load {machine.loadavg()})")
            lines, ratio, replay, per_sub = run(
                dsn, args.subscriptions * scale, args.rows * scale, args.trials
            )
            results.append((scale, ratio, replay, per_sub))
            for line in lines:
                print(line, flush=True)
    print("-- growth")
    for scale, ratio, replay, per_sub in results:
        print(
            f"×{scale}: {per_sub:6.2f} ms per Subscription, first run {ratio:5.2f}× floor, "
            f"replay {replay:5.2f}× floor"
        )
    if len(results) > 1:
        growth = results[-1][3] / results[0][3]
        print(f"ms per Subscription, ×{results[-1][0]} / ×{results[0][0]}: {growth:.2f}")
    print(f"load at end: {machine.loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

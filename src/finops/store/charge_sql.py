"""The set-based write of a charge run: usage summed in SQL, fee runs expanded, one merge.

Why: pricing every allocation row as a Python object made a run of 10k Subscriptions over 1M
allocation rows 40× slower than one SQL aggregate over the same rows. Here the database sums
each (Subscription, hour, meter) exactly in `numeric` (values × covered microseconds × the
row's margined price in thousandths of a micro, all whole-number products), in one grouping
per (Subscription, hour) with the run's meters side by side (a grouping per meter row cost a
fifth more), and rounds once per charge row, half to even (`finops_half_even`, migration
0003). The rare rows a Subscription's active interval trims for `pvGbHour` / `networkGb`
have shares that are not finite decimals; they are summed as exact fractions
(`finops_fraction_sum`). The result must equal `tests/oracle/usage.py` (the exact Python
oracle) to the micro: a property test holds both to it.

One unit of work (the caller's transaction), under an advisory lock that serialises the
cluster's charge writes: the run's tables go to temporary tables by binary COPY
(Subscriptions, their sources and margins, the fee rows in runs). A Subscription the ledger
holds no row for from the start of its window on (a first run, a backfill) is fresh: its fee
and usage rows go into the ledger in one INSERT in key order, with no staging copy. The others'
usage rows are staged next to their fee rows, their stale open rows are deleted, the staged
rows the ledger already holds are merged by INSERT … ON CONFLICT and the rest by a plain
INSERT (the lock keeps anything from inserting them in between).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import psycopg

from finops.billing import usage
from finops.collection import charge_plan
from finops.store import charges

QUANTITY_PLACES = 12
WORK_MEM = "256MB"
"""Memory for the run's sums (one hash entry per Subscription-hour): spilling them to disk
costs more than the whole aggregate."""


@dataclasses.dataclass(frozen=True)
class WriteCounts:
    """What one write did."""

    written: int
    deleted: int
    usage_rows: int


_TEMP = """
    CREATE TEMP TABLE charge_subs (
        uid text, lo timestamptz, hi timestamptz, activated timestamptz,
        deactivated timestamptz, offering_version_id bigint, subscription_version_id bigint,
        fresh boolean NOT NULL DEFAULT false
    ) ON COMMIT DROP;
    CREATE TEMP TABLE charge_sources (
        uid text, namespace text, resource_type text, name text) ON COMMIT DROP;
    CREATE TEMP TABLE charge_meters (
        uid text, meter text, factor_milli bigint, absolute_micros bigint) ON COMMIT DROP;
    CREATE TEMP TABLE charge_ns_windows (
        namespace text, lo timestamptz, hi timestamptz) ON COMMIT DROP;
    CREATE TEMP TABLE charge_pairs (
        uid text, namespace text, lo timestamptz, hi timestamptz, whole boolean, fresh boolean
    ) ON COMMIT DROP;
    CREATE TEMP TABLE charge_levels (hour timestamptz, aggregation text) ON COMMIT DROP;
    CREATE TEMP TABLE charge_hour_currency (
        hour timestamptz, currency text, pricebook_id bigint) ON COMMIT DROP;
    CREATE TEMP TABLE charge_stage (LIKE subscription_charges) ON COMMIT DROP;
    CREATE TEMP TABLE charge_fee_runs (
        subscription_uid text, hour timestamptz, hours int, quantity numeric,
        unit_price_micros bigint, amount_micros bigint, currency text, finalized boolean,
        offering_version_id bigint, subscription_version_id bigint,
        covers_start timestamptz, covers_end timestamptz, fresh boolean
    ) ON COMMIT DROP;
"""

_SUB_TYPES = ["text", "timestamptz", "timestamptz", "timestamptz", "timestamptz", "int8", "int8"]
_STAGE_COLUMNS = ", ".join(charges.COLUMNS)
_STAGE_TYPES = [
    "text",
    "text",
    "timestamptz",
    "text",
    "numeric",
    "int8",
    "int8",
    "text",
    "bool",
    "int8",
    "int8",
    "int8",
    "timestamptz",
    "timestamptz",
]


def _copy(
    conn: psycopg.Connection[Any], table: str, columns: str, types: list[str], rows: Any
) -> None:
    statement = f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)".encode()
    with conn.cursor() as cur, cur.copy(statement) as copy:
        copy.set_types(types)
        for row in rows:
            copy.write_row(row)


def _load(conn: psycopg.Connection[Any], cluster: str, tables: charge_plan.Tables) -> None:
    """The run's tables into temporary tables, by binary COPY."""
    conn.execute(_TEMP.encode())
    cols = "uid, lo, hi, activated, deactivated, offering_version_id, subscription_version_id"
    _copy(conn, "charge_subs", cols, _SUB_TYPES, tables.subscriptions)
    _copy(
        conn, "charge_sources", "uid, namespace, resource_type, name", ["text"] * 4, tables.sources
    )
    _copy(
        conn,
        "charge_meters",
        "uid, meter, factor_milli, absolute_micros",
        ["text", "text", "int8", "int8"],
        tables.meters,
    )
    _copy(
        conn,
        "charge_ns_windows",
        "namespace, lo, hi",
        ["text", "timestamptz", "timestamptz"],
        ((ns, lo, hi) for ns, (lo, hi) in tables.usage.per_namespace.items()),
    )
    conn.execute("ANALYZE charge_subs; ANALYZE charge_sources; ANALYZE charge_meters")


# A Subscription is fresh when the ledger holds none of its rows from the start of its window
# on (one primary-key range probe each): every row this run writes for it is then new, so it
# goes straight into the ledger. Asked under `_LOCK`, so no charge run of the cluster can add
# one of its rows before commit.
_FRESH = """
    UPDATE charge_subs w SET fresh = NOT EXISTS (
        SELECT 1 FROM subscription_charges c
        WHERE c.cluster = %(cluster)s AND c.subscription_uid = w.uid AND c.hour >= w.lo)
    RETURNING uid, fresh
"""


# The fee rows are copied as the plan made them, in runs (`charge_plan.FeeRun`): an hourly fee
# over a day is one row to send, not 24. The database expands each run into its rows (hour and
# service one hour further each); the cluster and the source, the same in every row, are added
# there too.
_FEE_RUN_COLUMNS = (
    "subscription_uid, hour, hours, quantity, unit_price_micros, amount_micros, currency,"
    " finalized, offering_version_id, subscription_version_id, covers_start, covers_end, fresh"
)
_FEE_RUN_TYPE = {
    **dict(zip(charges.COLUMNS, _STAGE_TYPES, strict=True)),
    "hours": "int4",
    "fresh": "bool",
}
_FEE_RUN_TYPES = [_FEE_RUN_TYPE[c] for c in _FEE_RUN_COLUMNS.split(", ")]
_FEE_ROWS = """
    SELECT %(cluster)s::text, r.subscription_uid, r.hour + k.k * interval '1 hour',
           'subscription'::text, r.quantity, r.unit_price_micros, r.amount_micros, r.currency,
           r.finalized, r.offering_version_id, r.subscription_version_id, NULL::bigint,
           r.covers_start + k.k * interval '1 hour', r.covers_end + k.k * interval '1 hour'
    FROM charge_fee_runs r CROSS JOIN LATERAL generate_series(0, r.hours - 1) k(k)
    WHERE r.fresh = {fresh}
"""
"""The fee rows of the fresh Subscriptions' runs (`fresh` true) or of the others', in the
ledger's column order (`charges.COLUMNS`; a fee row has no PriceBook)."""
_STAGE_FEES = f"""
    INSERT INTO charge_stage ({_STAGE_COLUMNS}) {_FEE_ROWS.format(fresh="false")}
"""


def _copy_fees(
    conn: psycopg.Connection[Any], cluster: str, tables: charge_plan.Tables, touched: set[str]
) -> int:
    """The fee runs by binary COPY, each marked fresh unless its Subscription is `touched`;
    the others' rows are expanded into the staging table for the merge, the fresh ones reach
    the ledger with the usage rows, in one ordered INSERT. Returns how many rows are fresh."""
    _copy(
        conn,
        "charge_fee_runs",
        _FEE_RUN_COLUMNS,
        _FEE_RUN_TYPES,
        ((*run, run[0] not in touched) for run in tables.fees),
    )
    if touched:
        conn.execute(_STAGE_FEES.encode(), {"cluster": cluster})
    return sum(run[2] for run in tables.fees if run[0] not in touched)


# The finest aggregation of each hour of the usage windows (most dimensions, then by name).
_LEVELS = """
    INSERT INTO charge_levels
    WITH levels AS (
        SELECT DISTINCT ON (hour) hour, aggregation FROM (
            SELECT DISTINCT a.hour, a.aggregation FROM provider_allocations a
            WHERE a.cluster = %(cluster)s AND a.hour >= %(usage_lo)s::timestamptz
              AND a.hour < %(usage_hi)s::timestamptz
        ) present
        ORDER BY hour, cardinality(string_to_array(aggregation, ',')) DESC, aggregation
    )
    SELECT hour, aggregation FROM levels
"""

# The currency and PriceBook rates of each hour: those of its first row (by namespace, name)
# among the rows the run's usage windows read, as `charge_plan.hour_currencies` picks them.
_CURRENCIES = """
    INSERT INTO charge_hour_currency
    SELECT l.hour, f.currency, f.pricebook_id FROM charge_levels l, LATERAL (
        SELECT a.currency, a.pricebook_id FROM provider_allocations a
        WHERE a.cluster = %(cluster)s AND a.hour = l.hour AND a.aggregation = l.aggregation
          AND (EXISTS (SELECT 1 FROM charge_ns_windows w WHERE w.namespace = a.namespace
                       AND l.hour >= w.lo AND l.hour < w.hi)
               OR (l.hour >= %(any_lo)s::timestamptz AND l.hour < %(any_hi)s::timestamptz))
        ORDER BY a.namespace, a.name LIMIT 1
    ) f
"""

# `sources.UsageSource.matches` of source `c` on allocation row `a`.
_MATCH = """
    (c.namespace = '' OR c.namespace = a.namespace)
    AND CASE WHEN c.resource_type = 'Pod' THEN c.name = '' OR a.pod = c.name
        ELSE (c.resource_type = '' OR lower(a.controller_kind) = lower(c.resource_type))
             AND (c.name = '' OR a.controller_name = c.name) END
"""

_ALLOCATION = """
    a.hour, a.start_time, a.end_time, a.pricebook_id, a.cpu_core_usage_average,
    a.gpu_usage_average, a.ram_byte_usage_average, a.pv_byte_hours,
    a.network_transfer_bytes + a.network_receive_bytes AS moved
"""

# Each (Subscription, namespace) a source of it names, with its window and whether one of
# those sources selects the whole namespace (Subscriptions with a source naming no namespace
# are matched over every row instead).
_PAIRS = """
    INSERT INTO charge_pairs
    SELECT c.uid, c.namespace, s.lo, s.hi,
           bool_or(c.name = '' AND c.resource_type IN ('', 'Pod')), s.fresh
    FROM charge_sources c JOIN charge_subs s USING (uid)
    WHERE c.uid NOT IN (SELECT uid FROM charge_sources WHERE namespace = '')
    GROUP BY c.uid, c.namespace, s.lo, s.hi, s.fresh
"""

# The hours every usage window lies in, as constants: the planner then reads the allocation
# rows by the primary key's (cluster, hour) range instead of scanning the whole history of the
# table (a join on the windows alone gives it no bound; with nested loops off it scanned every
# allocation row of every hourly run, a cost that grew with the history kept).
_WINDOW = "a.hour >= %(usage_lo)s::timestamptz AND a.hour < %(usage_hi)s::timestamptz"

# Each (Subscription, allocation row) its sources select, at most once: of the fresh
# Subscriptions or of the others (`fresh`), as the statement writes to the ledger or stages.
_MATCHED = f"""
    matched AS (
        SELECT p.uid, {_ALLOCATION}
        FROM charge_pairs p
        JOIN provider_allocations a ON a.namespace = p.namespace
             AND a.hour >= p.lo AND a.hour < p.hi
        JOIN charge_levels l ON l.hour = a.hour AND l.aggregation = a.aggregation
        WHERE a.cluster = %(cluster)s AND {_WINDOW} AND p.fresh = %(fresh)s AND (p.whole OR EXISTS (
            SELECT 1 FROM charge_sources c
            WHERE c.uid = p.uid AND c.namespace = p.namespace AND {_MATCH}))
        UNION ALL
        SELECT s.uid, {_ALLOCATION}
        FROM charge_subs s
        JOIN provider_allocations a ON a.cluster = %(cluster)s AND {_WINDOW}
             AND a.hour >= s.lo AND a.hour < s.hi
        JOIN charge_levels l ON l.hour = a.hour AND l.aggregation = a.aggregation
        WHERE s.fresh = %(fresh)s
          AND s.uid IN (SELECT uid FROM charge_sources WHERE namespace = '')
          AND EXISTS (SELECT 1 FROM charge_sources c WHERE c.uid = s.uid AND {_MATCH})
    )
"""

# The selected rows summed per (Subscription, hour, PriceBook, row span) before any price or
# share applies: the price and the share of the active interval are the same for all of
# them, so each row costs only its clamped values (`max(value, 0)`) and a sum.
_GROUPED = """
    grouped AS (
        SELECT uid, hour, pricebook_id, start_time, end_time, count(*) AS n,
               {signals}
        FROM matched GROUP BY uid, hour, pricebook_id, start_time, end_time
    )
"""

_SIGNALS = {
    "cpu": "greatest(cpu_core_usage_average, 0)",
    "gpu": "greatest(gpu_usage_average, 0)",
    "ram": "greatest(ram_byte_usage_average, 0)",
    "pv": "greatest(pv_byte_hours, 0)",
    "net": "greatest(moved, 0)",
}


@dataclasses.dataclass(frozen=True)
class _Meter:
    """How the aggregate prices one meter: the span signal it reads, its PriceBook rate,
    whether a trimmed span's share of it is an exact fraction (the per-row meters), and the
    parameter holding its fixed denominator (as the oracle in `tests/oracle/usage.py` keeps it)."""

    signal: str
    rate: str
    per_row: bool
    den: str


_METERS = {
    "cpuHour": _Meter("cpu", "cpu_hour_micros", False, "per_hour"),
    "gpuHour": _Meter("gpu", "gpu_hour_micros", False, "per_hour"),
    "ramGbHour": _Meter("ram", "ram_gb_hour_micros", False, "per_hour_gib"),
    "pvGbHour": _Meter("pv", "pv_gb_hour_micros", True, "gib"),
    "networkGb": _Meter("net", "network_gib_micros", True, "gib"),
}

# Coverage of each span as the usage rules measure it, in microseconds (epochs are exact
# numerics); `w` weighs the per-hour meters (an instant row weighs nothing); spans with no
# part in the active interval are not billed. The test is a CASE (len is never negative), not
# `(len > 0 AND cov > 0) OR (len = 0 AND instant_in)`: from that OR the planner derived a
# filter on len alone and computed it from the epochs of every allocation row it scanned.
# The span also takes its Subscription's version ids and its hour's currency here, once per
# span, and carries them through the grouping (they are the same for the whole group): the
# charge rows then need no join after the roundings.
_COVERED = """
    covered AS (
        SELECT g.*, greatest(0, (extract(epoch FROM g.end_time)
                                 - extract(epoch FROM g.start_time)) * 1000000) AS len,
               greatest(0, (extract(epoch FROM least(g.end_time,
                                                     coalesce(s.deactivated, g.end_time)))
                            - extract(epoch FROM greatest(g.start_time, s.activated)))
                           * 1000000) AS cov,
               g.start_time >= s.activated
                   AND (s.deactivated IS NULL OR g.start_time < s.deactivated) AS instant_in,
               s.offering_version_id AS ov, s.subscription_version_id AS sv,
               coalesce(hc.currency, %(fee_currency)s) AS currency, hc.pricebook_id AS book
        FROM grouped g JOIN charge_subs s USING (uid)
        LEFT JOIN charge_hour_currency hc ON hc.hour = g.hour
    ), billed AS (
        SELECT c.*, CASE WHEN c.len = 0 THEN 0 ELSE c.cov END AS w, c.cov <> c.len AS trimmed
        FROM covered c
        WHERE CASE WHEN c.len = 0 THEN c.instant_in ELSE c.cov > 0 END
    )
"""


def _margins(meters: dict[str, _Meter]) -> str:
    """Each Subscription's meters side by side: priced or not, factor and absolute margin."""
    cols = ",\n".join(
        f"bool_or(meter = '{name}') AS {m.signal}_on, "
        f"coalesce(max(factor_milli) FILTER (WHERE meter = '{name}'), 1000) AS {m.signal}_f, "
        f"coalesce(max(absolute_micros) FILTER (WHERE meter = '{name}'), 0) AS {m.signal}_a"
        for name, m in meters.items()
    )
    return f"margins AS (SELECT uid, {cols} FROM charge_meters GROUP BY uid)"


def _priced(meters: dict[str, _Meter]) -> str:
    """Per span, each meter's margined price in thousandths of a micro (NULL where the meter
    is not priced or its rate is zero) and its quantity: x on the meter's fixed denominator,
    or, for a per-row meter of a trimmed span, y over len."""
    cols = []
    for m in meters.values():
        s, rate = m.signal, f"p.{m.rate}"
        cols.append(
            f"CASE WHEN mm.{s}_on AND {rate} > 0 THEN greatest({rate} * mm.{s}_f"
            f" + mm.{s}_a * 1000, 0) END AS {s}_price"
        )
        if m.per_row:
            cols.append(f"CASE WHEN NOT g.trimmed THEN g.{s} END AS {s}_x")
            cols.append(f"CASE WHEN g.trimmed THEN g.{s} * g.cov END AS {s}_y")
        else:
            cols.append(f"g.{s} * g.w AS {s}_x")
    return f"""priced AS (
        SELECT g.uid, g.hour, g.ov, g.sv, g.currency, g.book, g.len, {", ".join(cols)}
        FROM billed g JOIN margins mm USING (uid) JOIN pricebooks p ON p.id = g.pricebook_id
    )"""


def _sums(meters: dict[str, _Meter]) -> str:
    """One group per (Subscription, hour) with every meter's sums side by side, then one row
    per priced meter (the exact-fraction arrays only for a per-row meter's trimmed spans)."""
    cols, rows = [], []
    for name, m in meters.items():
        s = m.signal
        on = f"{s}_price IS NOT NULL"
        cols.append(
            f"bool_or({on}) AS {s}_on, coalesce(sum({s}_x) FILTER (WHERE {on}), 0) AS {s}_r,"
            f" coalesce(sum({s}_x * {s}_price), 0) AS {s}_ra"
        )
        arrays = "NULL::numeric[], NULL::numeric[], NULL::numeric[]"
        if m.per_row:
            trim = f"FILTER (WHERE {on} AND {s}_y IS NOT NULL)"
            cols.append(
                f"array_agg({s}_y) {trim} AS {s}_ys, array_agg({s}_y * {s}_price) {trim}"
                f" AS {s}_yas, array_agg(len) {trim} AS {s}_lens"
            )
            arrays = f"t.{s}_ys, t.{s}_yas, t.{s}_lens"
        rows.append(f"('{name}', %({m.den})s::numeric, t.{s}_on, t.{s}_r, t.{s}_ra, {arrays})")
    return f"""sums AS (
        SELECT uid, hour, ov, sv, currency, book, {", ".join(cols)} FROM priced
        GROUP BY uid, hour, ov, sv, currency, book
    ), unpivoted AS (
        SELECT t.uid, t.hour, t.ov, t.sv, t.currency, t.book, v.* FROM sums t CROSS JOIN LATERAL (
            VALUES {", ".join(rows)}) v (meter, den, priced, r, ra, ys, yas, lens)
        WHERE v.priced
    )"""


_EXACT = """
    fractions AS (
        SELECT s.*,
               CASE WHEN s.ys IS NULL THEN 1 ELSE (finops_fraction_sum(s.ys, s.lens)).d END AS d,
               CASE WHEN s.ys IS NULL THEN 0 ELSE (finops_fraction_sum(s.ys, s.lens)).n END AS fq,
               CASE WHEN s.ys IS NULL THEN 0 ELSE (finops_fraction_sum(s.yas, s.lens)).n END AS fa
        FROM unpivoted s
    ), exact AS (
        SELECT f.uid, f.hour, f.ov, f.sv, f.currency, f.book, f.meter, f.den, f.d,
               f.r * f.d + f.fq AS q, f.ra * f.d + f.fa AS a
        FROM fractions f
    )
"""

# Each rounding's operands and whole quotient, computed once per row: the subqueries are
# kept (OFFSET 0) so the planner does not pull them up and repeat a division per reference.
_DIVIDED = """
    divided AS (
        SELECT e.*, div(e.nq, e.dq) AS tq, div(e.a, e.da) AS ta,
               CASE WHEN e.q <> 0 THEN div(e.a, e.du) END AS tu
        FROM (SELECT e.*, e.q * %(places)s AS nq, e.den * e.d AS dq,
                     e.den * e.d * 1000 AS da, 1000 * e.q AS du
              FROM exact e OFFSET 0) e
        OFFSET 0
    )
"""


def _half_even(t: str, num: str, den: str) -> str:
    """`finops_half_even(num, den)` (migration 0003) given its whole quotient `t`: the
    remainder comes from one multiplication and is compared once, where the function's
    `CASE` took up to two more divisions (a third of the usage statement's rounding time)."""
    return (
        f"({t} + CASE sign(2 * ({num} - {t} * {den}) - {den})"
        f" WHEN 1 THEN 1 WHEN 0 THEN mod({t}, 2) ELSE 0 END)"
    )


# Quantity q / (den·d), amount a / (den·d·1000), unit price a / (1000·q): each rounded once,
# half to even.
_USAGE = f"""
    WITH {_MATCHED}, {{grouped}}, {_COVERED}, {{margins}}, {{priced}}, {{sums}}, {_EXACT},
         {_DIVIDED}
    SELECT %(cluster)s, e.uid, e.hour, e.meter,
           {_half_even("e.tq", "e.nq", "e.dq")} * 0.000000000001,
           CASE WHEN e.q = 0 THEN 0 ELSE {_half_even("e.tu", "e.a", "e.du")} END,
           {_half_even("e.ta", "e.a", "e.da")},
           e.currency,
           e.hour < %(scheduled)s::timestamptz AND (%(boundary)s::timestamptz IS NULL
                                       OR e.hour < %(boundary)s::timestamptz),
           e.ov, e.sv, e.book, NULL::timestamptz, NULL::timestamptz
    FROM divided e
"""


# The rows of fresh Subscriptions, usage and fees, go into the ledger in one INSERT in key
# order: each index then grows at its right edge. Fee rows copied first and usage rows
# inserted between them afterwards split index pages in the middle, leaving them half full:
# at 10k Subscriptions the ledger's indexes then outgrew the server's shared buffers.
_FRESH_ROWS = f"""
    INSERT INTO subscription_charges ({_STAGE_COLUMNS})
    SELECT * FROM ({{usage}} UNION ALL {_FEE_ROWS.format(fresh="true")}) r
    ORDER BY 2, 3, 4
"""
_FRESH_FEES = f"""
    INSERT INTO subscription_charges ({_STAGE_COLUMNS})
    SELECT * FROM ({_FEE_ROWS.format(fresh="true")}) r ORDER BY 2, 3
"""


def _usage_statement(tables: charge_plan.Tables, *, fresh: bool) -> str:
    """The usage rows over only the meters the run prices (and the signals they read): of
    the fresh Subscriptions with their fee rows into the ledger, or of the others into the
    staging table."""
    names = {meter for _, meter, _, _ in tables.meters}
    meters = {name: m for name, m in _METERS.items() if name in names}
    wanted = {m.signal for m in meters.values()}
    signals = ",\n".join(
        f"sum({expr}) AS {name}" if name in wanted else f"NULL::numeric AS {name}"
        for name, expr in _SIGNALS.items()
    )
    usage = _USAGE.format(
        grouped=_GROUPED.format(signals=signals),
        margins=_margins(meters),
        priced=_priced(meters),
        sums=_sums(meters),
    )
    if fresh:
        return _FRESH_ROWS.format(usage=usage)
    return f"INSERT INTO charge_stage ({_STAGE_COLUMNS}) {usage}"


_DELETE_STALE = """
    DELETE FROM subscription_charges c USING charge_subs w
    WHERE NOT w.fresh AND c.cluster = %(cluster)s AND c.subscription_uid = w.uid
      AND c.hour >= w.lo AND c.hour < w.hi AND NOT c.finalized
      AND NOT EXISTS (
          SELECT 1 FROM charge_stage s WHERE s.subscription_uid = c.subscription_uid
             AND s.hour = c.hour AND s.source = c.source)
"""

# The keys of the staged rows the ledger already holds, found by one range scan of the
# primary key per Subscription (its first to last staged hour): on a first run the ranges
# are empty, on a replay they are the few open hours.
_EXISTING = """
    INSERT INTO charge_existing
    SELECT c.subscription_uid, c.hour, c.source
    FROM (SELECT subscription_uid, min(hour) AS lo, max(hour) AS hi
          FROM charge_stage GROUP BY subscription_uid) r
    JOIN subscription_charges c ON c.cluster = %(cluster)s
         AND c.subscription_uid = r.subscription_uid AND c.hour >= r.lo AND c.hour <= r.hi
"""

_IS_EXISTING = """
    EXISTS (SELECT 1 FROM charge_existing e WHERE e.subscription_uid = s.subscription_uid
            AND e.hour = s.hour AND e.source = s.source)
"""

# Rows already in the ledger: updated only where open and different. Key order: writers
# lock conflicting rows in the same order (no deadlock).
_MERGE = f"""
    INSERT INTO subscription_charges ({_STAGE_COLUMNS})
    SELECT {_STAGE_COLUMNS} FROM charge_stage s WHERE {_IS_EXISTING}
    ORDER BY cluster, subscription_uid, hour, source
    ON CONFLICT (cluster, subscription_uid, hour, source) DO UPDATE SET
        {", ".join(f"{c} = EXCLUDED.{c}" for c in charges.UPDATED)}
    WHERE NOT subscription_charges.finalized
      AND ({", ".join(f"subscription_charges.{c}" for c in charges.UPDATED)})
          IS DISTINCT FROM ({", ".join(f"EXCLUDED.{c}" for c in charges.UPDATED)})
"""

# Rows the ledger does not hold: a plain INSERT, no speculative insertion per row. Safe
# because every charge run of the cluster holds `_LOCK` from before `_EXISTING` to commit;
# a writer that bypassed it would make this fail on the primary key, never double a row.
_INSERT_FRESH = f"""
    INSERT INTO subscription_charges ({_STAGE_COLUMNS})
    SELECT {_STAGE_COLUMNS} FROM charge_stage s WHERE NOT {_IS_EXISTING}
    ORDER BY cluster, subscription_uid, hour, source
"""

LOCK_CLASS = 0x46494E4F
"""First key of the transaction-level advisory lock (`pg_advisory_xact_lock(int, int)`)
that serialises the charge writes of one cluster; the second key is the cluster's hash."""
_LOCK = "SELECT pg_advisory_xact_lock(%(lock)s, hashtext(%(cluster)s))"


def lock(conn: psycopg.Connection[Any], cluster: str) -> None:
    """Take the cluster's charge lock for the caller's transaction (what every write holds)."""
    conn.execute(_LOCK.encode(), {"lock": LOCK_CLASS, "cluster": cluster})


def _merge(conn: psycopg.Connection[Any], params: dict[str, Any]) -> tuple[int, int]:
    """Delete the stale open rows of the Subscriptions that are not fresh, then merge their
    staged rows: (written, deleted). The caller holds `_LOCK`."""
    deleted = conn.execute(_DELETE_STALE.encode(), params).rowcount
    conn.execute(
        b"CREATE TEMP TABLE charge_existing (subscription_uid text, hour timestamptz,"
        b" source text) ON COMMIT DROP"
    )
    conn.execute(_EXISTING.encode(), params)
    conn.execute(b"ANALYZE charge_existing")
    written = conn.execute(_MERGE.encode(), params).rowcount
    written += conn.execute(_INSERT_FRESH.encode(), params).rowcount
    return written, deleted


def _params(
    cluster: str, tables: charge_plan.Tables, scheduled: dt.datetime, boundary: dt.datetime | None
) -> dict[str, Any]:
    """The named parameters every statement of the write draws from."""
    any_lo, any_hi = tables.usage.anywhere or (None, None)
    usage_lo, usage_hi = tables.usage.bounds or (None, None)
    return {
        "cluster": cluster,
        "any_lo": any_lo,
        "any_hi": any_hi,
        "usage_lo": usage_lo,
        "usage_hi": usage_hi,
        "scheduled": scheduled,
        "boundary": boundary,
        "fee_currency": tables.fee_currency,
        "places": 10**QUANTITY_PLACES,
        "per_hour": usage.MICROSECONDS_PER_HOUR,
        "per_hour_gib": usage.MICROSECONDS_PER_HOUR * usage.GIB,
        "gib": usage.GIB,
        "lock": LOCK_CLASS,
    }


def _prepare(
    conn: psycopg.Connection[Any],
    cluster: str,
    tables: charge_plan.Tables,
    scheduled: dt.datetime,
    boundary: dt.datetime | None,
) -> dict[str, Any]:
    """Session settings, the run's tables in temporary tables, and the cluster's lock;
    returns the statements' parameters."""
    conn.execute(f"SET LOCAL work_mem = '{WORK_MEM}'".encode())
    # JIT compiling these statements takes seconds (more than running them).
    conn.execute(b"SET LOCAL jit = off")
    _load(conn, cluster, tables)
    params = _params(cluster, tables, scheduled, boundary)
    conn.execute(_LOCK.encode(), params)
    return params


def _usage_inputs(conn: psycopg.Connection[Any], params: dict[str, Any]) -> None:
    """The hours' aggregation levels, currencies and PriceBooks and the (Subscription,
    namespace) pairs the usage statements read; leaves nested loops off until `RESET`."""
    conn.execute(_LEVELS.encode(), params)
    conn.execute(_CURRENCIES.encode(), params)
    conn.execute(_PAIRS.encode(), params)
    # The hour currencies too: left unanalysed, the planner hashed the usage rows to join
    # them to the 25 currency rows instead of the other way round.
    conn.execute(b"ANALYZE charge_levels; ANALYZE charge_pairs; ANALYZE charge_hour_currency")
    # The planner takes a nested loop over the pairs for cheap (it estimates a few rows a
    # pair); one hash join of the allocation rows on namespace is what scales.
    conn.execute(b"SET LOCAL enable_nestloop = off")


def write(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    tables: charge_plan.Tables,
    scheduled: dt.datetime,
    boundary: dt.datetime | None,
) -> WriteCounts:
    """Write every charge row of the run (in the caller's transaction): a fresh
    Subscription's rows straight into the ledger, the others' staged and merged."""
    if not tables.subscriptions:
        return WriteCounts(0, 0, 0)
    params = _prepare(conn, cluster, tables, scheduled, boundary)
    fresh = conn.execute(_FRESH.encode(), params).fetchall()
    touched = {str(uid) for uid, is_fresh in fresh if not is_fresh}
    fresh_fees = _copy_fees(conn, cluster, tables, touched)
    any_fresh = len(touched) < len(fresh)
    written = usage_rows = 0
    if tables.sources and tables.meters:
        _usage_inputs(conn, params)
        if any_fresh:
            statement = _usage_statement(tables, fresh=True).encode()
            written = conn.execute(statement, {**params, "fresh": True}).rowcount
            usage_rows = written - fresh_fees
        if touched:
            statement = _usage_statement(tables, fresh=False).encode()
            usage_rows += conn.execute(statement, {**params, "fresh": False}).rowcount
        conn.execute(b"RESET enable_nestloop")
    elif fresh_fees:
        written = conn.execute(_FRESH_FEES.encode(), params).rowcount
    deleted = 0
    if touched:
        merged, deleted = _merge(conn, params)
        written += merged
    return WriteCounts(written, deleted, usage_rows)


def stage(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    tables: charge_plan.Tables,
    scheduled: dt.datetime,
) -> int:
    """Every row the tables' windows produce, into the temporary `charge_stage` only (the
    ledger is not touched): the hours recomputed as they should be charged now, for the
    corrections of closed periods to compare with. Returns how many rows were staged."""
    if not tables.subscriptions:
        return 0
    params = _prepare(conn, cluster, tables, scheduled, None)
    staged = tables.fee_rows
    _copy_fees(conn, cluster, tables, {uid for uid, *_ in tables.subscriptions})
    if tables.sources and tables.meters:
        _usage_inputs(conn, params)
        statement = _usage_statement(tables, fresh=False).encode()
        staged += conn.execute(statement, {**params, "fresh": False}).rowcount
        conn.execute(b"RESET enable_nestloop")
    return staged

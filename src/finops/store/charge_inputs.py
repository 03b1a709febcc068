"""Set-based reads and writes of the charge collection run that the finished ledger modules lack.

Every function is one statement (or a fixed few) for the whole run, never one per
Subscription-hour; all but `record_versions` join the caller's transaction and never commit:
- `usage_rows`: the allocation rows the usage meters need, for many namespace windows at once,
  at one aggregation level per hour (the finest present), with only the meter columns;
- `known_*_versions` / `add_*_versions`: mirror ids of the versions already recorded, and
  the new ones inserted in one statement per table (the same rows `finops.store.mirror` writes);
- `delete_stale`: non-finalized charge rows a recompute no longer produces;
- `latest_currency`: the currency the cluster's ledger prices in, for fee rows;
- `record_versions` (its own committed unit of work) and `priced_usage`: the two reads a
  charge run makes before it plans, built from the ones above.

Why not `allocations.read`: it returns every column of every aggregation for one window; a
cluster collected at one `OPENCOST_AGGREGATE` must be billed from rows of that one level (the
levels overlap and would bill the same use twice), and the meters read six columns of it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from finops.billing import allocation, usage
from finops.store import allocations as store_allocations
from finops.store import unit

# The finest aggregation of each hour: most dimensions, then by name (a stable tie-break).
_FINEST = """
    levels AS (
        SELECT DISTINCT ON (hour) hour, aggregation FROM (
            SELECT DISTINCT hour, aggregation FROM provider_allocations
            WHERE cluster = %(cluster)s AND hour >= %(lo)s AND hour < %(hi)s
        ) present
        ORDER BY hour, cardinality(string_to_array(aggregation, ',')) DESC, aggregation
    )
"""

_COLUMNS = """
    a.cluster, a.name, a.namespace, a.aggregation, a.hour, a.start_time, a.end_time,
    a.controller_kind, a.controller_name, a.pod,
    a.cpu_core_usage_average, a.gpu_usage_average, a.ram_byte_usage_average,
    a.pv_byte_hours, a.network_transfer_bytes, a.network_receive_bytes,
    a.pricebook_id, a.currency, a.is_finalized
"""


def _utc(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC)


def _stored(
    record: tuple[Any, ...], utc: dict[dt.datetime, dt.datetime]
) -> store_allocations.StoredAllocation:
    """One row; `utc` remembers converted instants (rows share a handful of them)."""
    hour, start, end = record[4], record[5], record[6]
    row = allocation.AllocationRow(
        cluster=record[0],
        name=record[1],
        namespace=record[2],
        aggregation=record[3],
        hour=utc.get(hour) or utc.setdefault(hour, _utc(hour)),
        start=utc.get(start) or utc.setdefault(start, _utc(start)),
        end=utc.get(end) or utc.setdefault(end, _utc(end)),
        controller_kind=record[7],
        controller_name=record[8],
        pod=record[9],
        cpu_core_usage_average=record[10],
        gpu_usage_average=record[11],
        ram_byte_usage_average=record[12],
        pv_byte_hours=record[13],
        network_transfer_bytes=record[14],
        network_receive_bytes=record[15],
    )
    return store_allocations.StoredAllocation(row, int(record[16]), record[17], bool(record[18]))


def usage_rows(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespace_windows: Mapping[str, tuple[dt.datetime, dt.datetime]],
    any_namespace_window: tuple[dt.datetime, dt.datetime] | None = None,
) -> list[store_allocations.StoredAllocation]:
    """Allocation rows at the finest aggregation of their hour, for every namespace's hours
    `[start, end)`, plus every namespace's rows in `any_namespace_window` when given (usage
    sources that name no namespace). Each row once; only the columns the meters read are
    filled (the others keep their defaults)."""
    windows = list(namespace_windows.items())
    bounds = [w for _, w in windows]
    if any_namespace_window is not None:
        bounds.append(any_namespace_window)
    if not bounds:
        return []
    params: dict[str, Any] = {
        "cluster": cluster,
        "lo": min(s for s, _ in bounds),
        "hi": max(e for _, e in bounds),
        "ns": [ns for ns, _ in windows],
        "starts": [s for _, (s, _e) in windows],
        "ends": [e for _, (_s, e) in windows],
    }
    wanted = """
        SELECT a.* FROM provider_allocations a
        JOIN unnest(%(ns)s::text[], %(starts)s::timestamptz[], %(ends)s::timestamptz[])
             AS w(namespace, lo, hi)
          ON a.namespace = w.namespace AND a.hour >= w.lo AND a.hour < w.hi
        WHERE a.cluster = %(cluster)s
    """
    if any_namespace_window is not None:
        params["any_lo"], params["any_hi"] = any_namespace_window
        wanted += """
            UNION
            SELECT a.* FROM provider_allocations a
            WHERE a.cluster = %(cluster)s AND a.hour >= %(any_lo)s AND a.hour < %(any_hi)s
        """
    query = f"""
        WITH {_FINEST}, wanted AS ({wanted})
        SELECT {_COLUMNS} FROM wanted a JOIN levels l USING (hour, aggregation)
        ORDER BY a.hour, a.namespace, a.name
    """
    with conn.cursor() as cur:
        cur.execute(query.encode(), params)
        utc: dict[dt.datetime, dt.datetime] = {}
        return [_stored(r, utc) for r in cur.fetchall()]


def latest_currency(conn: psycopg.Connection[Any], *, cluster: str) -> str:
    """The currency of the cluster's most recent PriceBook row; '' when there is none."""
    row = conn.execute(
        "SELECT currency FROM pricebooks WHERE cluster = %s ORDER BY id DESC LIMIT 1",
        (cluster,),
    ).fetchone()
    return "" if row is None else str(row[0])


def known_offering_versions(
    conn: psycopg.Connection[Any], *, cluster: str, versions: Collection[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Mirror ids of the `(uid, generation)` Offering versions already recorded."""
    if not versions:
        return {}
    rows = conn.execute(
        """
        SELECT v.uid, v.generation, v.id FROM offering_versions v
        JOIN unnest(%b::text[], %b::bigint[]) AS k(uid, generation) USING (uid, generation)
        WHERE v.cluster = %s
        """,
        ([u for u, _ in versions], [g for _, g in versions], cluster),
    ).fetchall()
    return {(str(uid), int(gen)): int(vid) for uid, gen, vid in rows}


def known_subscription_versions(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    versions: Iterable[tuple[str, int, Mapping[str, str], Mapping[str, str]]],
) -> dict[tuple[str, int], int]:
    """Mirror ids of `(uid, generation, namespace labels, Subscription labels)` versions
    already recorded, keyed by `(uid, generation)` (one set of labels per uid is asked for)."""
    items = list(versions)
    if not items:
        return {}
    rows = conn.execute(
        """
        SELECT v.uid, v.generation, v.id FROM subscription_versions v
        JOIN unnest(%b::text[], %b::bigint[], %b::jsonb[], %b::jsonb[])
            AS k(uid, generation, labels, own)
          ON v.uid = k.uid AND v.generation = k.generation
         AND v.labels_digest = md5(k.labels::text)
         AND v.subscription_labels_digest = md5(k.own::text)
        WHERE v.cluster = %s
        """,
        (
            [u for u, _, _, _ in items],
            [g for _, g, _, _ in items],
            [Jsonb(dict(labels)) for _, _, labels, _ in items],
            [Jsonb(dict(own)) for _, _, _, own in items],
            cluster,
        ),
    ).fetchall()
    return {(str(uid), int(gen)): int(vid) for uid, gen, vid in rows}


def delete_stale(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    windows: Mapping[str, tuple[dt.datetime, dt.datetime]],
    keep: Collection[tuple[str, dt.datetime, str]],
) -> int:
    """Delete non-finalized rows inside each Subscription's recomputed hours `[start, end)`
    whose `(uid, hour, source)` is not in `keep`; finalized rows are never touched."""
    if not windows:
        return 0
    kept = list(keep)
    cur = conn.execute(
        """
        DELETE FROM subscription_charges c
        USING unnest(%s::text[], %s::timestamptz[], %s::timestamptz[]) AS w(uid, lo, hi)
        WHERE c.cluster = %s AND c.subscription_uid = w.uid
          AND c.hour >= w.lo AND c.hour < w.hi AND NOT c.finalized
          AND (c.subscription_uid, c.hour, c.source) NOT IN (
              SELECT * FROM unnest(%b::text[], %b::timestamptz[], %b::text[]))
        """,
        (
            list(windows),
            [s for s, _ in windows.values()],
            [e for _, e in windows.values()],
            cluster,
            [u for u, _, _ in kept],
            [h for _, h, _ in kept],
            [s for _, _, s in kept],
        ),
    )
    return cur.rowcount


def add_offering_versions(
    conn: psycopg.Connection[Any], *, cluster: str, versions: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, int], int]:
    """Record many Offering versions in one statement (raw objects; existing ones are kept).

    The same row `mirror.upsert_offering_version` writes, for a run that meets thousands of
    new versions at once. Returns the ids of the rows it inserted; versions already there
    (recorded meanwhile by another run) are read back with `known_offering_versions`.
    """
    items = [(o.get("metadata") or {}, o.get("spec") or {}) for o in versions]
    if not items:
        return {}
    rows = conn.execute(
        """
        INSERT INTO offering_versions
            (cluster, uid, namespace, name, generation, resource_version, spec)
        SELECT %s, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::bigint[], %b::text[],
                                 %b::jsonb[])
        ON CONFLICT (cluster, uid, generation) DO NOTHING
        RETURNING uid, generation, id
        """,
        (
            cluster,
            [str(m.get("uid", "")) for m, _ in items],
            [str(m.get("namespace", "")) for m, _ in items],
            [str(m.get("name", "")) for m, _ in items],
            [int(m.get("generation") or 0) for m, _ in items],
            [str(m.get("resourceVersion", "")) for m, _ in items],
            [Jsonb(dict(spec)) for _, spec in items],
        ),
    ).fetchall()
    return {(str(uid), int(gen)): int(vid) for uid, gen, vid in rows}


def add_subscription_versions(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    versions: Iterable[
        tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, str], Mapping[str, str]]
    ],
) -> dict[tuple[str, int], int]:
    """Record many Subscription versions `(metadata, spec, namespace labels, Subscription
    labels)` in one statement, as `mirror.upsert_subscription_version` would one by one.

    Ids are drawn in uid order: a first charge run then writes its rows in the same order
    into the primary key (uid, hour) and 0004's (version, hour) index, so neither index's
    pages are revisited at random once the ledger outgrows shared buffers. Returns the ids of
    the rows it inserted by `(uid, generation)`, as `add_offering_versions`."""
    items = list(versions)
    if not items:
        return {}
    rows = conn.execute(
        """
        INSERT INTO subscription_versions
            (cluster, uid, namespace, name, generation, resource_version, spec,
             namespace_labels, subscription_labels)
        SELECT %s, * FROM unnest(%b::text[], %b::text[], %b::text[], %b::bigint[], %b::text[],
                                 %b::jsonb[], %b::jsonb[], %b::jsonb[])
        ORDER BY 2, 5
        ON CONFLICT (cluster, uid, generation, labels_digest, subscription_labels_digest)
            DO NOTHING
        RETURNING uid, generation, id
        """,
        (
            cluster,
            [str(m.get("uid", "")) for m, _, _, _ in items],
            [str(m.get("namespace", "")) for m, _, _, _ in items],
            [str(m.get("name", "")) for m, _, _, _ in items],
            [int(m.get("generation") or 0) for m, _, _, _ in items],
            [str(m.get("resourceVersion", "")) for m, _, _, _ in items],
            [Jsonb(dict(spec)) for _, spec, _, _ in items],
            [Jsonb(dict(labels)) for _, _, labels, _ in items],
            [Jsonb(dict(own)) for _, _, _, own in items],
        ),
    ).fetchall()
    return {(str(uid), int(gen)): int(vid) for uid, gen, vid in rows}


def record_versions(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    offerings: Mapping[tuple[str, int], Mapping[str, Any]],
    subscriptions: Mapping[
        tuple[str, int],
        tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, str], Mapping[str, str]],
    ],
) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """Mirror ids of every `(uid, generation)` Offering and Subscription version given (a
    Subscription as `(metadata, spec, namespace labels, its own labels)`), recording the new
    ones first: one committed unit, one INSERT per table (returning the new ids), whatever
    the number of versions."""
    wanted_s = [(u, g, labels, own) for (u, g), (_, _, labels, own) in subscriptions.items()]
    with unit.begin(conn) as work:
        known_o = known_offering_versions(conn, cluster=cluster, versions=offerings)
        known_s = known_subscription_versions(conn, cluster=cluster, versions=wanted_s)
        missing_o = [o for key, o in offerings.items() if key not in known_o]
        missing_s = [v for key, v in subscriptions.items() if key not in known_s]
        if missing_o or missing_s:
            known_o |= add_offering_versions(conn, cluster=cluster, versions=missing_o)
            known_s |= add_subscription_versions(conn, cluster=cluster, versions=missing_s)
            if not (known_o.keys() >= offerings.keys() and known_s.keys() >= subscriptions.keys()):
                # Another run recorded some of them meanwhile (its rows return nothing here).
                known_o = known_offering_versions(conn, cluster=cluster, versions=offerings)
                known_s = known_subscription_versions(conn, cluster=cluster, versions=wanted_s)
        work.commit()
    return known_o, known_s


def priced_usage(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    namespace_windows: Mapping[str, tuple[dt.datetime, dt.datetime]],
    any_namespace_window: tuple[dt.datetime, dt.datetime] | None,
) -> list[tuple[usage.PricedRow, str]]:
    """`usage_rows` with the rates of the PriceBook each row was collected under, and its
    currency: one query for the rows, one for their PriceBooks."""
    if not namespace_windows and any_namespace_window is None:
        return []
    stored = usage_rows(
        conn,
        cluster=cluster,
        namespace_windows=namespace_windows,
        any_namespace_window=any_namespace_window,
    )
    books = store_allocations.pricebooks(conn, {s.pricebook_id for s in stored})
    rates = {i: usage.Rates.from_micros(book.rates) for i, book in books.items()}
    return [
        (usage.PricedRow(s.row, rates.get(s.pricebook_id), s.pricebook_id), s.currency)
        for s in stored
    ]

"""What a charge collection run reads and records before it plans, for the whole run at once.

Every function is one statement (or a fixed few) for the whole run, never one per
Subscription-hour; all but `record_versions` join the caller's transaction and never commit:
- `known_*_versions` / `add_*_versions`: mirror ids of the versions already recorded, and
  the new ones inserted in one statement per table (the same rows `finops.store.mirror` writes);
- `latest_currency`: the currency the cluster's ledger prices in, for fee rows;
- `record_versions` (its own committed unit of work): the versions a run prices with.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec
import psycopg
from psycopg.types.json import Jsonb

from finops.store import unit

_encode = msgspec.json.encode


def _jsonb(value: Mapping[str, Any]) -> Jsonb:
    """A jsonb parameter encoded by msgspec: a run sends tens of thousands of them (specs and
    labels), and the standard library's encoder took a few times longer. The database keeps
    jsonb in its own form, so the text it is sent in does not change what is stored or the
    digests compared."""
    return Jsonb(dict(value), dumps=_encode)


# The finest aggregation of each hour: most dimensions, then by name (a stable tie-break).


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
            [_jsonb(labels) for _, _, labels, _ in items],
            [_jsonb(own) for _, _, _, own in items],
            cluster,
        ),
    ).fetchall()
    return {(str(uid), int(gen)): int(vid) for uid, gen, vid in rows}


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
            [_jsonb(spec) for _, spec in items],
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
            [_jsonb(spec) for _, spec, _, _ in items],
            [_jsonb(labels) for _, _, labels, _ in items],
            [_jsonb(own) for _, _, _, own in items],
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

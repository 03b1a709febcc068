"""Versioned mirrors of Offerings and Subscriptions: the terms that priced each charge.

One row per observed version. An Offering version is its (uid, generation); a Subscription
version is its (uid, generation, namespace labels, own labels), because labels change without
a new generation: relabelling a namespace moves later charges to another tenant, and a
Subscription's own labels are the tags its charges are exported with. Rows are immutable and
the upserts return the id to stamp on charge rows, whether the version is new or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.types.json import Jsonb


def upsert_offering_version(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    uid: str,
    namespace: str,
    name: str,
    generation: int,
    resource_version: str,
    spec: Mapping[str, object],
) -> int:
    """Id of the mirror row for this Offering version, inserting it the first time."""
    inserted = conn.execute(
        """
        INSERT INTO offering_versions
            (cluster, uid, namespace, name, generation, resource_version, spec)
        VALUES (%s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (cluster, uid, generation) DO NOTHING
        RETURNING id
        """,
        (cluster, uid, namespace, name, generation, resource_version, Jsonb(dict(spec))),
    ).fetchone()
    if inserted is not None:
        return int(inserted[0])
    row = conn.execute(
        "SELECT id FROM offering_versions WHERE cluster = %s AND uid = %s AND generation = %s",
        (cluster, uid, generation),
    ).fetchone()
    if row is None:  # pragma: no cover - the conflict guarantees the row exists
        raise RuntimeError("offering version vanished between insert and select")
    return int(row[0])


def upsert_subscription_version(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    uid: str,
    namespace: str,
    name: str,
    generation: int,
    resource_version: str,
    spec: Mapping[str, object],
    namespace_labels: Mapping[str, str],
    subscription_labels: Mapping[str, str] | None = None,
) -> int:
    """Id of the mirror row for this Subscription version, namespace labels and own labels."""
    labels = Jsonb(dict(namespace_labels))
    own = Jsonb(dict(subscription_labels or {}))
    inserted = conn.execute(
        """
        INSERT INTO subscription_versions
            (cluster, uid, namespace, name, generation, resource_version, spec, namespace_labels,
             subscription_labels)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (cluster, uid, generation, labels_digest, subscription_labels_digest)
            DO NOTHING
        RETURNING id
        """,
        (
            cluster,
            uid,
            namespace,
            name,
            generation,
            resource_version,
            Jsonb(dict(spec)),
            labels,
            own,
        ),
    ).fetchone()
    if inserted is not None:
        return int(inserted[0])
    row = conn.execute(
        """
        SELECT id FROM subscription_versions
        WHERE cluster = %s AND uid = %s AND generation = %s
          AND labels_digest = md5(%s::jsonb::text)
          AND subscription_labels_digest = md5(%s::jsonb::text)
        """,
        (cluster, uid, generation, labels, own),
    ).fetchone()
    if row is None:  # pragma: no cover - the conflict guarantees the row exists
        raise RuntimeError("subscription version vanished between insert and select")
    return int(row[0])

"""The exact watermark of each Subscription, straight from every charge row since the bound.

`finops.store.charges.watermarks` finds the same hours through the daily sums and a few index
probes per Subscription; it is held to this.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

import psycopg


def watermarks(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    subscription_uids: Collection[str],
    since: dt.datetime | None = None,
) -> dict[str, dt.datetime]:
    """Per Subscription, the latest finalized hour before its first open hour and not after
    the last fee row before a hole in its fee rows (holes before `since` do not count)."""
    bound = "AND hour >= %(since)s - interval '1 hour'" if since is not None else ""
    rows = conn.execute(
        f"""
        WITH open AS MATERIALIZED (
            SELECT subscription_uid, min(hour) AS first_open FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)s) AND NOT finalized
            GROUP BY subscription_uid
        ), fee AS (
            SELECT subscription_uid, hour,
                   lead(hour) OVER (PARTITION BY subscription_uid ORDER BY hour) AS next_hour
            FROM subscription_charges
            WHERE cluster = %(cluster)s AND subscription_uid = ANY(%(uids)s)
              AND source = 'subscription' {bound}
        ), hole AS MATERIALIZED (
            SELECT subscription_uid, min(hour) AS before_hole FROM fee
            WHERE next_hour > hour + interval '1 hour'
            GROUP BY subscription_uid
        )
        SELECT c.subscription_uid, max(c.hour) FROM subscription_charges c
        LEFT JOIN open o USING (subscription_uid)
        LEFT JOIN hole h USING (subscription_uid)
        WHERE c.cluster = %(cluster)s AND c.subscription_uid = ANY(%(uids)s) AND c.finalized
          AND c.hour < coalesce(o.first_open, 'infinity')
          AND c.hour <= coalesce(h.before_hole, 'infinity')
        GROUP BY c.subscription_uid
        """.encode(),
        {"cluster": cluster, "uids": list(subscription_uids), "since": since},
    ).fetchall()
    return {str(uid): hour.astimezone(dt.UTC) for uid, hour in rows}

"""What the cluster tests read off an installed release: pods, the ledger, the costs."""

from __future__ import annotations

import datetime as dt
from typing import Any

from finops_devenv import realnode, release

NAMESPACE = release.NAMESPACE
RELEASE = release.RELEASE
TENANT = "team-apps"
ALLOCATION_CRONJOB = "resource-cost-collection-cronjob"
CHARGE_CRONJOB = "subscription-charge-collection-cronjob"


def pods(node: realnode.RealNode, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    return release.items(node, "pods", "-n", namespace, *(["-l", selector] if selector else []))


def psql(node: realnode.RealNode, sql: str) -> str:
    """Run SQL in the bundled PostgreSQL pod as the superuser; the unaligned rows."""
    done = node.kubectl(
        "exec", "-n", NAMESPACE, f"{RELEASE}-postgres-0", "--",
        "psql", "-U", "postgres", "-d", "finopsdb", "-At", "-F", "\t", "-c", sql,
    )  # fmt: skip
    return done.stdout.strip()


def charge_rows(node: realnode.RealNode) -> dict[tuple[str, str, str], int]:
    """Every charge row: (subscription uid, hour, source) -> amount in micros."""
    out: dict[tuple[str, str, str], int] = {}
    rows = psql(
        node,
        "SELECT subscription_uid, to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24'),"
        " source, amount_micros FROM subscription_charges",
    )
    for line in rows.splitlines():
        uid, hour, source, amount = line.split("\t")
        out[(uid, hour, source)] = int(amount)
    return out


def month_settled(node: realnode.RealNode, anchor: dt.datetime) -> dict[str, int]:
    """Per Subscription uid, what its `month` bucket's `current` must say for a run at the
    hour `anchor`: fee rows of the month's closed hours before it, usage up to and with it."""
    start = anchor.replace(day=1, hour=0)
    rows = psql(
        node,
        "SELECT subscription_uid, sum(amount_micros) FROM subscription_charges"
        f" WHERE hour >= '{start.isoformat()}' AND (hour < '{anchor.isoformat()}'"
        f" OR (source <> 'subscription' AND hour = '{anchor.isoformat()}')) GROUP BY 1",
    )
    return {uid: int(total) for uid, total in (line.split("\t") for line in rows.splitlines())}


def month_current(sub: dict[str, Any]) -> int:
    for bucket in (sub.get("status") or {}).get("costs") or []:
        if bucket.get("granularity") == "month":
            return int(bucket.get("current") or 0)
    return 0


def tenant_subscriptions(node: realnode.RealNode) -> dict[str, dict[str, Any]]:
    """The tenant's Subscriptions by uid."""
    return {s["metadata"]["uid"]: s for s in release.items(node, "subscriptions", "-n", TENANT)}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == kind), {})

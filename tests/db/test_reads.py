"""The gateway's namespace sums (`reads.namespace_costs`) against an exact oracle.

Migration 0004 gives the query a `(subscription_version_id, hour)` index; an index is a fast
path, so the sums are checked both with the planner forced onto it and forced off it, each
against plain Python sums over every raw row.
"""

from __future__ import annotations

import collections
import datetime as dt
import random
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from finops.store import mirror, reads
from tests.db import builders
from tests.db.builders import CLUSTER, hour
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger

pytestmark = pytest.mark.db

NAMESPACES = ("team-a", "team-b")
INDEX = "_by_version_hour"  # the partitions' (version, hour) indexes


def _version(conn: psycopg.Connection[Any], namespace: str, n: int, rev: int) -> int:
    """Version `rev` of Subscription `n` in `namespace` (a relabel makes rev 2)."""
    return mirror.upsert_subscription_version(
        conn,
        cluster=CLUSTER,
        uid=f"{namespace}-uid-{n}",
        namespace=namespace,
        name=f"sub-{n}",
        generation=1,
        resource_version=str(rev),
        spec={},
        namespace_labels={"stakater.com/tenant": namespace},
        subscription_labels={"rev": str(rev)},
    )


def _ledger(conn: psycopg.Connection[Any], seed: int) -> None:
    """Three Subscriptions per namespace, relabelled at hour 20, over hours -5..44; some
    hours settled, some not, some sources skipped; plus rows of another cluster."""
    pick = random.Random(seed)
    offering = builders.offering_version(conn)
    rows = []
    for namespace in NAMESPACES:
        for n in range(3):
            versions = (_version(conn, namespace, n, 1), _version(conn, namespace, n, 2))
            for at in range(-5, 45):
                for source in oracle_ledger.SOURCES:
                    if pick.random() < 0.2:
                        continue
                    price = pick.randrange(0, 50_000)
                    quantity = Decimal(pick.randrange(0, 10_000)) / 1000
                    rows.append(
                        charge_rows.ChargeRow(
                            cluster=pick.choice([CLUSTER, CLUSTER, CLUSTER, "other"]),
                            subscription_uid=f"{namespace}-uid-{n}",
                            hour=hour(at),
                            source=source,
                            quantity=quantity,
                            unit_price_micros=price,
                            amount_micros=int((quantity * price).to_integral_value()),
                            currency=pick.choice(["USD", "USD", "EUR", ""]),
                            finalized=at < 30 and pick.random() < 0.9,
                            offering_version_id=offering,
                            subscription_version_id=versions[at >= 20],
                        )
                    )
    oracle_ledger.upsert(conn, rows)
    conn.execute("ANALYZE subscription_charges")
    conn.commit()


def _oracle(
    conn: psycopg.Connection[Any], namespace: str, start: dt.datetime, end: dt.datetime
) -> list[reads.CostRow]:
    """The sums, from every raw row with no SQL filter, grouping or index."""
    names = {
        vid: (ns, name)
        for vid, ns, name in conn.execute(
            "SELECT id, namespace, name FROM subscription_versions WHERE cluster = %s", (CLUSTER,)
        )
    }
    total: dict[tuple[str, str, str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
    for cluster, uid, at, source, amount, currency, final, vid in conn.execute(
        "SELECT cluster, subscription_uid, hour, source, amount_micros, currency, finalized,"
        " subscription_version_id FROM subscription_charges"
    ):
        ns, name = names[vid]
        if cluster != CLUSTER or ns != namespace or not start <= at < end:
            continue
        sums = total[(name, uid, source, currency)]
        sums[0] += amount
        sums[1] += amount if final else 0
    return [
        reads.CostRow(name, uid, source, currency, t, f)
        for (name, uid, source, currency), (t, f) in sorted(total.items())
    ]


def _costs(
    conn: psycopg.Connection[Any], namespace: str, start: dt.datetime, end: dt.datetime
) -> list[reads.CostRow]:
    return reads.namespace_costs(conn, cluster=CLUSTER, namespace=namespace, start=start, end=end)


def _plan(
    conn: psycopg.Connection[Any], namespace: str, start: dt.datetime, end: dt.datetime
) -> str:
    rows = conn.execute(
        b"EXPLAIN " + reads.NAMESPACE_COSTS.encode(), (CLUSTER, CLUSTER, namespace, start, end)
    ).fetchall()
    return "\n".join(str(r[0]) for r in rows)


def _steer(conn: psycopg.Connection[Any], *, on_index: bool) -> None:
    """Force the planner onto the (version, hour) index, or off every index of charges."""
    conn.execute(f"SET LOCAL enable_seqscan = {'off' if on_index else 'on'}".encode())
    for scan in ("indexscan", "indexonlyscan"):
        conn.execute(f"SET LOCAL enable_{scan} = {'on' if on_index else 'off'}".encode())
    conn.execute(b"SET LOCAL enable_bitmapscan = off")


WINDOWS = [(0, 24), (-10, 60), (19, 21), (20, 21), (7, 8), (44, 45), (45, 50)]


@pytest.mark.parametrize("seed", [1, 2])
def test_namespace_costs_equal_the_raw_sums_on_and_off_the_index(
    conn: psycopg.Connection[Any], seed: int
) -> None:
    _ledger(conn, seed)
    for namespace in NAMESPACES:
        for first, last in WINDOWS:
            start, end = hour(first), hour(last)
            expected = _oracle(conn, namespace, start, end)
            for on_index in (True, False):
                with conn.transaction():
                    _steer(conn, on_index=on_index)
                    assert (INDEX in _plan(conn, namespace, start, end)) is on_index
                    got = _costs(conn, namespace, start, end)
                    assert got == expected, (namespace, first, last, on_index)
    assert any(_oracle(conn, "team-a", hour(0), hour(24)))


def test_a_relabelled_subscription_sums_as_one_across_its_versions(
    conn: psycopg.Connection[Any],
) -> None:
    _ledger(conn, 3)
    rows = _costs(conn, "team-a", hour(0), hour(40))
    keys = [(r.subscription, r.subscription_uid, r.source, r.currency) for r in rows]
    assert len(keys) == len(set(keys))
    assert {r.subscription for r in rows} == {"sub-0", "sub-1", "sub-2"}


def test_0004_replaces_the_version_index_with_version_and_hour(
    conn: psycopg.Connection[Any],
) -> None:
    indexes = dict(
        conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'subscription_charges'"
        ).fetchall()
    )
    assert "subscription_charges_by_version" not in indexes
    assert indexes["subscription_charges_by_version_hour"].endswith(
        "USING btree (subscription_version_id, hour)"
        " INCLUDE (cluster, subscription_uid, source, currency, amount_micros, finalized)"
    )

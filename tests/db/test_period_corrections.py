"""Corrections against the exact oracle: a closed period's charge rows plus every correction
booked later equal the period recomputed from what the ledger and the Subscriptions say now.

Generated Subscriptions (every fee alignment, usage meters or none, two usage namespaces)
are charged across the end of March until March closes; then a generated series of late
events each followed by a charge run: allocation rows added, changed, re-priced in another
currency or deleted in closed hours, deactivations back-dated (or moved), a Subscription
appearing with an activation back in March. After every run March's charge rows are as they
were at the close, and at the end, for every (Subscription, hour, source, currency) of March,
charge row + corrections == `charge_rows.rows` (the `Fraction` oracle) over the final inputs.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from finops.collection import charge_plan
from finops.store import unit
from tests.db import periods_support as ps
from tests.db.test_periods import march, truth

START = ps.MARCH_END - 8 * ps.HOUR
NAMESPACES = ("ns-a", "ns-b")
_clusters = itertools.count()

minutes = st.integers(0, 8 * 60 - 1).map(lambda m: START + dt.timedelta(minutes=m))
cpu = st.decimals(min_value=0, max_value=4, places=3, allow_nan=False, allow_infinity=False)


@st.composite
def subscriptions(draw: st.DrawFn, uid: str) -> dict[str, Any]:
    return {
        "uid": uid,
        "activated": draw(minutes),
        "fee": draw(st.sampled_from([None, *ps.FEES])),
        "meters": tuple(draw(st.lists(st.sampled_from(["cpuHour", "ramGbHour"]), unique=True))),
        "namespace": draw(st.sampled_from(NAMESPACES)),
        "deactivated": None,
    }


late_hours = st.integers(-8, -1).map(lambda k: ps.MARCH_END + k * ps.HOUR)
events = st.one_of(
    st.tuples(st.just("add"), late_hours, st.sampled_from(NAMESPACES), cpu),
    st.tuples(st.just("change"), late_hours, st.sampled_from(NAMESPACES), cpu),
    st.tuples(st.just("reprice"), late_hours, st.sampled_from(NAMESPACES)),
    st.tuples(st.just("delete"), late_hours, st.sampled_from(NAMESPACES)),
    st.tuples(st.just("deactivate"), st.integers(0, 3), st.integers(1, 10 * 60)),
    st.tuples(st.just("appear"), minutes, st.sampled_from(NAMESPACES)),
)


def billed(subs: list[dict[str, Any]]) -> list[charge_plan.Billed]:
    return [
        ps.subscription(
            s["uid"],
            activated=s["activated"],
            deactivated=s["deactivated"],
            fee=s["fee"],
            meters=s["meters"],
            namespace=s["namespace"],
        )
        for s in subs
    ]


def apply(
    conn: psycopg.Connection[Any],
    cluster: str,
    books: list[int],
    subs: list[dict[str, Any]],
    event: tuple[Any, ...],
) -> None:
    """One late event."""
    kind, eur, usd = event[0], books[0], books[1]
    if kind in ("add", "change"):
        name = f"late-{event[1]:%H}" if kind == "add" else "p"
        ps.allocation(
            conn,
            cluster,
            hour=event[1],
            name=name,
            namespace=event[2],
            book=usd,
            currency="USD",
            cpu=str(event[3]),
        )
    elif kind == "reprice":
        ps.allocation(
            conn, cluster, hour=event[1], name="p", namespace=event[2], book=eur, currency="EUR"
        )
    elif kind == "delete":
        conn.execute(
            "DELETE FROM provider_allocations WHERE cluster = %s AND hour = %s AND namespace = %s",
            (cluster, event[1], event[2]),
        )
    elif kind == "deactivate":
        sub = subs[event[1] % len(subs)]
        sub["deactivated"] = sub["activated"] + dt.timedelta(minutes=event[2])
    else:
        subs.append(
            {
                "uid": f"new-{len(subs)}",
                "activated": event[1],
                "fee": "hourly",
                "meters": ("cpuHour",),
                "namespace": event[2],
                "deactivated": None,
            }
        )


@seed(20260401)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    drawn=st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True).flatmap(
        lambda ids: st.tuples(*(subscriptions(f"s{i}") for i in ids))
    ),
    present=st.lists(st.tuples(st.integers(-8, 3), st.sampled_from(NAMESPACES), cpu), max_size=14),
    first_run=st.integers(-3, 1),
    late=st.lists(events, min_size=1, max_size=5),
)
def test_statement_plus_corrections_equals_the_recomputed_truth(
    ledger_dsn: str,
    drawn: tuple[dict[str, Any], ...],
    present: list[tuple[int, str, Any]],
    first_run: int,
    late: list[tuple[Any, ...]],
) -> None:
    cluster = f"prop-{next(_clusters)}"
    anchor = {
        "uid": "base",
        "activated": START,
        "fee": "hourly",
        "meters": ("cpuHour",),
        "namespace": "ns-a",
        "deactivated": None,
    }
    subs = [anchor, *(dict(s) for s in drawn)]
    with unit.connect(ledger_dsn) as conn:
        books = ps.books(conn, cluster)
        for k, namespace, use in present:
            hour = ps.MARCH_END + k * ps.HOUR
            ps.allocation(
                conn,
                cluster,
                hour=hour,
                name="p",
                namespace=namespace,
                book=books[1],
                currency="USD",
                cpu=str(use),
                final=k < 1,
            )
        ps.run(conn, cluster, ps.MARCH_END + first_run * ps.HOUR, billed(subs))
        closing = ps.run(conn, cluster, ps.MARCH_END + 2 * ps.HOUR, billed(subs))
        assert closing.periods is not None and [p.label for p in closing.periods.closed] == [
            "2026-03"
        ]
        frozen = march(conn, cluster)
        for n, event in enumerate(late):
            apply(conn, cluster, books, subs, event)
            ps.run(conn, cluster, ps.MARCH_END + (3 + n) * ps.HOUR, billed(subs))
            assert march(conn, cluster) == frozen
        assert ps.ledger_by_hour(conn, cluster, ps.MARCH_END) == truth(conn, cluster, billed(subs))

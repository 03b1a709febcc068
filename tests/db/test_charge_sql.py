"""The set-based charge write (`finops.store.charge_sql`) against the exact pure oracle.

Generated allocation rows (several PriceBooks, rates of zero, negative and instant rows,
rows trimmed by activation and deactivation, a coarser aggregation to ignore) and generated
Subscriptions (every kind of usage source, both margins, with and without a fee) are charged
twice: by `charge_rows.rows` over the rows read into Python (`Fraction` arithmetic, one
rounding per row) and by the SQL path. Every row must agree to the micro.

Most examples write over the open rows an earlier run left (some with other amounts, some
the same, some the plan no longer produces), for every Subscription or for only some: the
merge of rows the ledger holds, the plain insert of the rest and the direct write of the
Subscriptions the ledger holds nothing for must together leave exactly the oracle's rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from decimal import Decimal
from typing import Any

import psycopg
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from finops.collection import charge_plan, charges
from finops.jobs import charges as job
from finops.store import allocations, charge_inputs, charge_sql, unit
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger

CLUSTER = "prop"
T0 = dt.datetime(2026, 5, 1, 10, tzinfo=dt.UTC)
HOURS = 4
SCHEDULED = T0 + dt.timedelta(hours=HOURS - 1)
NAMESPACES = ("ns-a", "ns-b", "ns-c")
METERS = ("cpuHour", "gpuHour", "ramGbHour", "pvGbHour", "networkGb")

decimals = st.builds(
    lambda digits, places, sign: Decimal(sign * digits).scaleb(-places),
    st.integers(0, 10**9),
    st.integers(0, 7),
    st.sampled_from([1, 1, 1, 1, -1]),
)
instants = st.integers(0, HOURS * 3_600_000_000 - 1).map(
    lambda us: T0 + dt.timedelta(microseconds=us)
)


@st.composite
def allocation_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    rows = []
    for i in range(draw(st.integers(1, 14))):
        h = draw(st.integers(0, HOURS - 1))
        hour = T0 + dt.timedelta(hours=h)
        start_us = draw(st.sampled_from([0, 0, 0, None]))
        if start_us is None:
            start_us = draw(st.integers(0, 3_600_000_000 - 1))
        end_us = draw(st.sampled_from([3_600_000_000, 3_600_000_000, start_us, None]))
        if end_us is None:
            end_us = draw(st.integers(start_us, 3_600_000_000))
        rows.append(
            {
                "hour": hour,
                "namespace": draw(st.sampled_from(NAMESPACES)),
                "name": f"pod-{i}",
                "aggregation": draw(st.sampled_from(["namespace,pod"] * 5 + ["namespace"])),
                "start_time": hour + dt.timedelta(microseconds=start_us),
                "end_time": hour + dt.timedelta(microseconds=end_us),
                "controller_kind": draw(st.sampled_from(["deployment", "StatefulSet", ""])),
                "controller_name": draw(st.sampled_from(["web", "db"])),
                "pod": f"pod-{i}",
                "cpu": draw(decimals),
                "gpu": draw(decimals),
                "ram": draw(decimals),
                "pv": draw(decimals),
                "sent": draw(decimals),
                "received": draw(decimals),
                "book": draw(st.integers(0, 1)),
            }
        )
    return rows


sources = st.fixed_dictionaries(
    {},
    optional={
        "namespace": st.sampled_from(NAMESPACES),
        "resourceType": st.sampled_from(["Pod", "Deployment", "statefulset"]),
        "name": st.sampled_from(["web", "db", "pod-1", "pod-2"]),
    },
).filter(bool)
margins = st.one_of(
    st.just({}),
    st.builds(lambda f: {"factorMilli": f}, st.integers(0, 3000)),
    st.builds(lambda a: {"absoluteMicros": a}, st.integers(0, 10**6)),
)


@st.composite
def subscriptions(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 4))):
        activated = draw(instants)
        deactivated = draw(st.one_of(st.none(), instants.filter(activated.__lt__)))
        meters = draw(st.lists(st.sampled_from(METERS), unique=True, max_size=5))
        pricing: dict[str, Any] = {
            "resourcePricing": [{"name": m, "margins": draw(margins)} for m in meters]
        }
        if draw(st.booleans()):
            pricing["subscriptionFee"] = {
                "priceMicros": draw(st.integers(1, 10**7)),
                "tickAlignment": "HourBoundary",
                "period": "1",
            }
        out.append(
            {
                "uid": f"sub-{i}",
                "activated": activated,
                "deactivated": deactivated,
                "sources": draw(st.lists(sources, min_size=1, max_size=3)),
                "pricing": pricing,
            }
        )
    return out


def insert_rows(conn: psycopg.Connection[Any], rows: list[dict[str, Any]]) -> None:
    books = [
        allocations.ensure_pricebook(
            conn,
            cluster=CLUSTER,
            namespace="p",
            name=f"book-{i}",
            uid=f"book-{i}",
            currency=currency,
            rates=rates,
        )
        for i, (currency, rates) in enumerate(
            [
                ("USD", {"cpuHour": 31_000, "ramGbHour": 4_000, "pvGbHour": 77}),
                ("EUR", {"cpuHour": 29_000, "gpuHour": 900_000, "networkGiB": 12_345}),
            ]
        )
    ]
    with conn.cursor() as cur:
        cur.executemany(
            """
            INSERT INTO provider_allocations (cluster, hour, namespace, name, aggregation,
                start_time, end_time, controller_kind, controller_name, pod,
                cpu_core_usage_average, gpu_usage_average, ram_byte_usage_average,
                pv_byte_hours, network_transfer_bytes, network_receive_bytes, pricebook_id,
                currency, is_finalized)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT DO NOTHING
            """,
            [
                (
                    CLUSTER,
                    r["hour"],
                    r["namespace"],
                    r["name"],
                    r["aggregation"],
                    r["start_time"],
                    r["end_time"],
                    r["controller_kind"],
                    r["controller_name"],
                    r["pod"],
                    r["cpu"],
                    r["gpu"],
                    r["ram"],
                    r["pv"],
                    r["sent"],
                    r["received"],
                    books[r["book"]],
                    "USD" if r["book"] == 0 else "EUR",
                    r["hour"] < T0 + dt.timedelta(hours=2),
                )
                for r in rows
            ],
        )


def billed(subs: list[dict[str, Any]]) -> list[charge_plan.Billed]:
    out = []
    for s in subs:
        offering = {
            "metadata": {"uid": f"off-{s['uid']}", "namespace": "o", "name": "o", "generation": 1},
            "spec": {"pricing": s["pricing"]},
        }
        obj = {
            "metadata": {
                "uid": s["uid"],
                "namespace": "t",
                "name": s["uid"],
                "generation": 1,
                "resourceVersion": "1",
            },
            "spec": {"offeringRef": {"name": "o", "namespace": "o"}, "usageSources": s["sources"]},
            "status": {"activatedAt": s["activated"], "deactivatedAt": s["deactivated"]},
        }
        state = charges.SubscriptionState.from_object(obj)
        terms = charges.terms_for(state, offering["spec"])
        out.append(charge_plan.Billed(state, terms, offering, {}))
    return out


def stored(conn: psycopg.Connection[Any]) -> set[tuple[Any, ...]]:
    rows = conn.execute(
        """
        SELECT subscription_uid, hour, source, quantity, unit_price_micros, amount_micros,
               currency, finalized, offering_version_id, subscription_version_id, pricebook_id,
               covers_start, covers_end
        FROM subscription_charges
        """
    ).fetchall()
    return {tuple(r) for r in rows}


def planned(rows: list[charge_rows.ChargeRow]) -> set[tuple[Any, ...]]:
    return {
        (
            r.subscription_uid,
            r.hour,
            r.source,
            r.quantity,
            r.unit_price_micros,
            r.amount_micros,
            r.currency,
            r.finalized,
            r.offering_version_id,
            r.subscription_version_id,
            r.pricebook_id,
            r.covers_start,
            r.covers_end,
        )
        for r in rows
    }


def earlier_run(
    conn: psycopg.Connection[Any], oracle: list[charge_rows.ChargeRow], uids: set[str] | None
) -> None:
    """Open rows as an earlier run of the same hours left them (for the Subscriptions in
    `uids`, or all): every second planned row with one more micro, every third as planned,
    and a stale meter row wherever one is free."""
    keys = {(r.subscription_uid, r.hour, r.source) for r in oracle}
    left = []
    for i, r in enumerate(oracle):
        if uids is not None and r.subscription_uid not in uids:
            continue
        if i % 2 == 0:
            left.append(dataclasses.replace(r, amount_micros=r.amount_micros + 1, finalized=False))
        elif i % 3 == 0:
            left.append(dataclasses.replace(r, finalized=False))
        stale = next((m for m in METERS if (r.subscription_uid, r.hour, m) not in keys), None)
        if stale is not None:
            keys.add((r.subscription_uid, r.hour, stale))
            left.append(dataclasses.replace(r, source=stale, finalized=False))
    oracle_ledger.upsert(conn, left)


@seed(20260501)
@settings(
    max_examples=60,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=allocation_rows(),
    subs=subscriptions(),
    earlier=st.sampled_from(["none", "all", "some"]),
)
def test_sql_path_equals_the_exact_oracle(
    ledger_dsn: str, rows: list[dict[str, Any]], subs: list[dict[str, Any]], earlier: str
) -> None:
    with unit.connect(ledger_dsn) as conn:
        conn.execute(
            "TRUNCATE subscription_charges, provider_allocations, subscription_versions,"
            " offering_versions, pricebooks CASCADE"
        )
        insert_rows(conn, rows)
        items = billed(subs)
        boundary = T0 + dt.timedelta(hours=2)
        offerings, versions = charge_inputs.record_versions(
            conn,
            cluster=CLUSTER,
            offerings=charge_plan.offering_versions(items),
            subscriptions=charge_plan.subscription_versions(items),
        )
        windows = charge_plan.windows(items, {}, SCHEDULED)
        wanted = charge_plan.usage_windows(items, windows)
        inputs = charge_rows.PricedInputs(
            boundary=boundary,
            windows=windows,
            versions=charge_plan.version_ids(items, offerings, versions),
            fee_currency=charge_inputs.latest_currency(conn, cluster=CLUSTER),
            priced=oracle_ledger.priced_usage(
                conn,
                cluster=CLUSTER,
                namespace_windows=wanted.per_namespace,
                any_namespace_window=wanted.anywhere,
            ),
        )
        oracle = charge_rows.rows(CLUSTER, items, inputs, SCHEDULED)
        if earlier != "none":
            some = {b.sub.uid for b in items[::2]} if earlier == "some" else None
            earlier_run(conn, oracle, some)
        with unit.begin(conn) as work:
            charge_sql.write(
                conn,
                cluster=CLUSTER,
                tables=charge_plan.tables(items, inputs, SCHEDULED),
                scheduled=SCHEDULED,
                boundary=boundary,
            )
            work.commit()
        assert stored(conn) == planned(oracle)


@seed(20261204)
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    den=st.integers(1, 10**15),
    quotient=st.integers(0, 10**20),
    rest=st.one_of(
        st.sampled_from(["0", "half", "half-1", "half+1", "last"]),
        st.decimals(0, 1, allow_nan=False, allow_infinity=False, places=9),
    ),
)
def test_half_even_from_the_quotient_is_the_function(
    ledger_dsn: str, den: int, quotient: int, rest: Any
) -> None:
    """The usage statement's rounding (`charge_sql._half_even`, the quotient computed once)
    equals `finops_half_even` (migration 0003), ties and fractional numerators included."""
    half = Decimal(den) / 2
    fixed = {"0": Decimal(0), "half": half, "half-1": half - 1, "half+1": half + 1}
    if isinstance(rest, Decimal):
        share = rest * den
    elif rest == "last":
        share = Decimal(den) - Decimal("0.000001")
    else:
        share = fixed[rest]
    num = max(Decimal(0), Decimal(quotient) * den + share)
    expression = charge_sql._half_even("div(n, d)", "n", "d")
    with unit.connect(ledger_dsn) as conn:
        row = conn.execute(
            f"SELECT finops_half_even(n, d), {expression}"
            " FROM (SELECT %s::numeric AS n, %s::numeric AS d) v",
            (num, den),
        ).fetchone()
    assert row is not None and row[0] == row[1]


def test_a_run_uses_the_versions_another_run_recorded_meanwhile(ledger_dsn: str) -> None:
    """The charge run's version mirror when another run records some of the same versions
    between its lookup and its insert: its insert skips them (they return no id), so it
    reads them back, and every charge row points at the one recorded version."""
    fee = {"priceMicros": 1_000_000, "tickAlignment": "HourBoundary", "period": "1"}
    items = billed(
        [
            {
                "uid": f"sub-{i}",
                "activated": T0,
                "deactivated": None,
                "sources": [{"namespace": "ns-a"}],
                "pricing": {"subscriptionFee": fee},
            }
            for i in range(3)
        ]
    )
    pids: list[int] = []
    outcome: list[Any] = []

    def first_run() -> None:
        try:
            with unit.connect(ledger_dsn) as conn:
                pids.append(conn.info.backend_pid)
                outcome.append(job.charge(conn, cluster=CLUSTER, scheduled=SCHEDULED, billed=items))
        except BaseException as exc:  # reported by the assertion below
            outcome.append(exc)

    with unit.connect(ledger_dsn) as other, unit.connect(ledger_dsn) as watch:
        # The other run records one Subscription's Offering and Subscription versions, not yet
        # committed: the first run's lookup does not see them and its insert waits on them.
        with other.transaction():
            theirs_o = charge_inputs.add_offering_versions(
                other, cluster=CLUSTER, versions=charge_plan.offering_versions(items[:1]).values()
            )
            theirs_s = charge_inputs.add_subscription_versions(
                other,
                cluster=CLUSTER,
                versions=charge_plan.subscription_versions(items[:1]).values(),
            )
            worker = threading.Thread(target=first_run)
            worker.start()
            waiting = False
            for _ in range(2400):  # until the first run's insert waits on the other's rows
                row = watch.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                    (pids[0] if pids else -1,),
                ).fetchone()
                if row is not None and row[0]:
                    waiting = True
                    break
                if outcome:
                    break
                time.sleep(0.05)
            assert waiting, f"the first run never waited on the other run's versions: {outcome}"
        worker.join()
        assert len(outcome) == 1 and isinstance(outcome[0], job.LedgerResult), outcome
        ids = watch.execute("SELECT uid, id FROM subscription_versions ORDER BY uid").fetchall()
        assert [uid for uid, _ in ids] == ["sub-0", "sub-1", "sub-2"]
        assert dict(ids)["sub-0"] == theirs_s[("sub-0", 1)]
        offerings = dict(watch.execute("SELECT uid, id FROM offering_versions").fetchall())
        assert sorted(offerings) == ["off-sub-0", "off-sub-1", "off-sub-2"]
        assert offerings["off-sub-0"] == theirs_o[("off-sub-0", 1)]
        used = watch.execute(
            "SELECT DISTINCT subscription_uid, subscription_version_id, offering_version_id"
            " FROM subscription_charges ORDER BY 1"
        ).fetchall()
        assert used == [(uid, vid, offerings[f"off-{uid}"]) for uid, vid in ids]

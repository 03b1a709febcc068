"""The ledger pass of a charge run as pure decisions: windows, row index, currency, rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from tests.oracle import charge_rows
from tests.oracle import usage as oracle_usage

from finops.billing import allocation, usage
from finops.collection import charge_plan, charges

H = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)
CPU = {"pricing": {"resourcePricing": [{"name": "cpuHour"}]}}
FEE = {
    "pricing": {
        "subscriptionFee": {
            "priceMicros": 2_000_000,
            "period": "1",
            "tickAlignment": "HourBoundary",
        }
    }
}
FEE_AND_CPU = {"pricing": {**FEE["pricing"], **CPU["pricing"]}}


def at(hour: int, day: int = 1) -> dt.datetime:
    return dt.datetime(2026, 4, day, hour, tzinfo=dt.UTC)


def billed(
    uid: str,
    offering_spec: dict[str, Any],
    *,
    sources: list[dict[str, str]] | None = None,
    activated: str = "2026-04-01T09:00:00Z",
    offering_generation: int = 1,
    generation: int = 1,
) -> charge_plan.Billed:
    spec: dict[str, Any] = {"offeringRef": {"name": "base", "namespace": "billing"}}
    if sources is not None:
        spec["usageSources"] = sources
    obj = {
        "metadata": {
            "uid": uid,
            "namespace": "billing",
            "name": f"sub-{uid}",
            "generation": generation,
            "resourceVersion": "7",
            "labels": {"team": uid},
        },
        "spec": spec,
        "status": {"activatedAt": activated},
    }
    state = charges.SubscriptionState.from_object(obj)
    offering = {
        "metadata": {"uid": "off-1", "generation": offering_generation},
        "spec": offering_spec,
    }
    return charge_plan.Billed(
        state, charges.terms_for(state, offering_spec), offering, {"tenant": "acme"}
    )


def priced(hour: dt.datetime, namespace: str, cpu: str = "1") -> oracle_usage.PricedRow:
    return oracle_usage.PricedRow(
        allocation.AllocationRow(
            cluster="c",
            name=f"{namespace}/pod-{hour.hour}",
            namespace=namespace,
            aggregation="namespace,pod",
            hour=hour,
            start=hour,
            end=hour + H,
            pod="pod",
            cpu_core_usage_average=Decimal(cpu),
        ),
        usage.Rates(cpu_hour=10_000),
    )


def inputs(
    windows: dict[str, charge_plan.Window],
    rows: list[tuple[oracle_usage.PricedRow, str]],
    *,
    uids: tuple[str, ...] = ("a",),
    fee_currency: str = "EUR",
    boundary: dt.datetime | None = None,
) -> charge_rows.PricedInputs:
    return charge_rows.PricedInputs(
        boundary=boundary,
        windows=windows,
        versions=charge_plan.VersionIds(
            offering=dict.fromkeys(uids, 11), subscription=dict.fromkeys(uids, 22)
        ),
        priced=rows,
        fee_currency=fee_currency,
    )


class TestWindows:
    def test_each_subscription_is_charged_from_after_its_watermark(self) -> None:
        subs = [billed("a", FEE), billed("b", FEE)]
        got = charge_plan.windows(subs, {"b": at(10)}, at(12))
        assert got == {"a": (at(9), at(13)), "b": (at(11), at(13))}

    def test_a_subscription_charged_through_the_scheduled_hour_is_left_out(self) -> None:
        sub = billed("a", FEE)
        assert charge_plan.windows([sub], {"a": at(12)}, at(12)) == {}

    def test_usage_windows_widen_per_namespace_and_keep_anywhere_apart(self) -> None:
        subs = [
            billed("a", CPU, sources=[{"namespace": "n1"}]),
            billed("b", CPU, sources=[{"namespace": "n1"}, {"namespace": "n2"}]),
            billed("c", CPU, sources=[{"name": "web"}]),
            billed("d", FEE, sources=[{"namespace": "n3"}]),  # bills no usage
        ]
        charged = {"a": (at(9), at(11)), "b": (at(10), at(13)), "c": (at(12), at(14))}
        charged["d"] = (at(0), at(20))
        wanted = charge_plan.usage_windows(subs, charged)
        assert dict(wanted.per_namespace) == {"n1": (at(9), at(13)), "n2": (at(10), at(13))}
        assert wanted.anywhere == (at(12), at(14))
        assert not wanted.empty
        # Subscription d bills no usage: its wider window is not among the hours to read.
        assert wanted.bounds == (at(9), at(14))

    def test_no_usage_billing_subscription_means_nothing_to_read(self) -> None:
        wanted = charge_plan.usage_windows([billed("a", FEE)], {"a": (at(9), at(10))})
        assert wanted.empty
        assert wanted.bounds is None

    def test_widen_is_the_smallest_window_holding_both(self) -> None:
        assert charge_plan.widen((at(9), at(10)), (at(12), at(13))) == (at(9), at(13))


class TestRowIndex:
    def test_rows_are_sliced_by_namespace_and_half_open_window(self) -> None:
        rows = [priced(at(h), ns) for h in (12, 9, 10, 11) for ns in ("n1", "n2")]
        index = charge_rows.RowIndex(rows)
        terms = billed("a", CPU, sources=[{"namespace": "n1"}]).terms
        got = index.for_terms(terms, (at(10), at(12)))
        assert [(p.row.namespace, p.row.hour) for p in got] == [("n1", at(10)), ("n1", at(11))]

    def test_a_source_without_namespace_sees_every_row_once(self) -> None:
        rows = [priced(at(9), "n1"), priced(at(9), "n2"), priced(at(10), "n1")]
        index = charge_rows.RowIndex(rows)
        sources = [{"namespace": "n1"}, {"name": "web"}]
        terms = billed("a", CPU, sources=sources).terms
        assert len(index.for_terms(terms, (at(9), at(10)))) == 2


class TestRows:
    def test_fee_rows_use_the_ledger_currency_and_usage_rows_their_hours(self) -> None:
        sub = billed("a", FEE_AND_CPU, sources=[{"namespace": "n1"}])
        rows = [(priced(at(9), "n1", "2"), "USD"), (priced(at(9), "n1", "1"), "CHF")]
        planned = charge_rows.rows(
            "c1", [sub], inputs({"a": (at(9), at(10))}, rows), scheduled=at(11)
        )
        assert [(r.source, r.currency, r.amount_micros, r.finalized) for r in planned] == [
            ("subscription", "EUR", 2_000_000, True),
            ("cpuHour", "USD", 30_000, True),
        ]
        assert {(r.cluster, r.offering_version_id, r.subscription_version_id) for r in planned} == {
            ("c1", 11, 22)
        }

    def test_a_usage_hour_without_collected_rows_falls_back_to_the_fee_currency(self) -> None:
        assert charge_rows.hour_currencies([(priced(at(9), "n1"), "USD")]) == {at(9): "USD"}
        sub = billed("a", CPU, sources=[{"namespace": "n1"}])
        planned = charge_rows.rows("c1", [sub], inputs({"a": (at(9), at(10))}, []), at(11))
        assert planned == []

    def test_usage_at_or_after_the_boundary_stays_open(self) -> None:
        sub = billed("a", CPU, sources=[{"namespace": "n1"}])
        rows = [(priced(at(h), "n1"), "USD") for h in (9, 10)]
        planned = charge_rows.rows(
            "c1", [sub], inputs({"a": (at(9), at(11))}, rows, boundary=at(10)), at(12)
        )
        assert [(r.hour, r.finalized) for r in planned] == [(at(9), True), (at(10), False)]

    def test_a_subscription_without_a_window_gets_no_rows(self) -> None:
        planned = charge_rows.rows("c1", [billed("a", FEE)], inputs({}, []), at(12))
        assert planned == []

    def test_keys_name_the_rows_a_recompute_keeps(self) -> None:
        sub = billed("a", FEE)
        planned = charge_rows.rows("c1", [sub], inputs({"a": (at(9), at(11))}, []), at(12))
        assert charge_rows.keys(planned) == {
            ("a", at(9), "subscription"),
            ("a", at(10), "subscription"),
        }


class TestFeeRuns:
    def test_runs_expand_to_a_row_per_hour_final_before_the_scheduled_hour(self) -> None:
        """A day of an hourly fee is a few runs, split where the rows turn open; expanded,
        they are the fee's rows hour by hour, each final exactly when before the run's hour."""
        sub = billed("a", FEE, activated="2026-04-01T09:20:00Z")
        window = (at(9), at(9, day=2))
        runs = charge_plan.fee_runs(sub, window, at(15) + 20 * MINUTE, inputs({}, []))
        rows = [
            (uid, hour + k * H, n, price, amount, cur, final, ov, sv,
             None if start is None else start + k * H, None if end is None else end + k * H)
            for uid, hour, hours, n, price, amount, cur, final, ov, sv, start, end in runs
            for k in range(hours)
        ]  # fmt: skip
        fee = sub.terms.fee
        assert fee is not None
        assert [(hour, n, amount, None if start is None else (start, end))
                for _, hour, n, _, amount, _, _, _, _, start, end in rows
        ] == fee.hourly_spans(*window)  # fmt: skip
        assert [(hour, final) for _, hour, _, _, _, _, final, *_ in rows] == [
            (hour, hour < at(15)) for hour, *_ in fee.hourly_spans(*window)
        ]
        assert {(uid, price, cur, ov, sv) for uid, _, _, price, _, cur, _, ov, sv, *_ in rows} == {
            ("a", 2_000_000, "EUR", 11, 22)
        }
        assert len(runs) <= 4 and sum(r[2] for r in runs) == 24


class TestVersions:
    def test_distinct_versions_and_their_ids_per_subscription(self) -> None:
        subs = [billed("a", FEE), billed("b", FEE, offering_generation=2, generation=3)]
        assert set(charge_plan.offering_versions(subs)) == {("off-1", 1), ("off-1", 2)}
        recorded = charge_plan.subscription_versions(subs)
        meta, spec, labels, own = recorded[("b", 3)]
        assert (meta["name"], meta["generation"], meta["resourceVersion"]) == ("sub-b", 3, "7")
        assert spec["offeringRef"]["name"] == "base" and labels == {"tenant": "acme"}
        assert own == {"team": "b"}
        ids = charge_plan.version_ids(
            subs, {("off-1", 1): 5, ("off-1", 2): 6}, {("a", 1): 7, ("b", 3): 8}
        )
        assert (dict(ids.offering), dict(ids.subscription)) == ({"a": 5, "b": 6}, {"a": 7, "b": 8})

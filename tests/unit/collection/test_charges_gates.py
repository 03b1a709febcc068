"""The finalizer gates and the `status.costs` decision of a collection run (pure)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from finops.api import reasons
from finops.billing import buckets
from finops.collection import charges

UTC = dt.UTC


def at(day: int, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 4, day, hour, minute, tzinfo=UTC)


def state(
    *,
    deactivated: str | None = "2026-04-01T11:40:00Z",
    deleting: bool = True,
    finalizers: tuple[str, ...] = (charges.FINALIZER,),
    sources: bool = False,
) -> charges.SubscriptionState:
    status: dict[str, Any] = {"activatedAt": "2026-04-01T09:00:00Z"}
    if deactivated:
        status["deactivatedAt"] = deactivated
    meta: dict[str, Any] = {"uid": "u", "namespace": "n", "name": "s", "finalizers": finalizers}
    if deleting:
        meta["deletionTimestamp"] = "2026-04-01T11:40:00Z"
    spec: dict[str, Any] = {"offeringRef": {"name": "o", "namespace": "n"}}
    if sources:
        spec["usageSources"] = [{"namespace": "work"}]
    return charges.SubscriptionState.from_object({"metadata": meta, "spec": spec, "status": status})


def offering(min_periods: int | None = None, usage: bool = False) -> dict[str, Any]:
    fee: dict[str, Any] = {"priceMicros": 1_000_000, "tickAlignment": "ActivatedAt", "period": "1h"}
    if min_periods:
        fee["minPeriods"] = min_periods
    pricing: dict[str, Any] = {"subscriptionFee": fee}
    if usage:
        pricing["resourcePricing"] = [{"name": "cpuHour"}]
    return {"pricing": pricing}


def decide(
    sub: charges.SubscriptionState,
    spec: dict[str, Any] | None,
    scheduled: dt.datetime,
    boundary: dt.datetime | None = None,
    failed: bool = False,
) -> charges.Release | None:
    terms = None if spec is None else charges.terms_for(sub, spec)
    return charges.finalizer_decision(sub, terms, scheduled, boundary, failed=failed)


class TestFinalizerGates:
    def test_a_subscription_that_is_not_deleting_or_not_ours_is_left_alone(self) -> None:
        assert decide(state(deleting=False), offering(), at(2, 0)) is None
        assert decide(state(finalizers=("other/finalizer",)), offering(), at(2, 0)) is None

    def test_a_deleting_subscription_without_deactivated_at_is_held(self) -> None:
        assert decide(state(deactivated=None), offering(), at(2, 0)) is (
            charges.Release.NOT_DEACTIVATED
        )

    def test_min_periods_counts_ticks_from_activation_up_to_the_scheduled_hour(self) -> None:
        # ActivatedAt 1h from 09:00: ticks(12:00) = 3, ticks(13:00) = 4.
        assert decide(state(), offering(min_periods=4), at(1, 12)) is charges.Release.MIN_PERIODS
        assert decide(state(), offering(min_periods=4), at(1, 13)) is charges.Release.RELEASE

    def test_fee_charges_settle_once_the_scheduled_hour_passes_the_last_billable_hour(
        self,
    ) -> None:
        # 11:40 snaps to 12:00, so the last billable hour is 11:00.
        assert decide(state(), offering(), at(1, 11)) is charges.Release.NOT_SETTLED
        assert decide(state(), offering(), at(1, 12)) is charges.Release.RELEASE

    def test_usage_charges_also_wait_for_the_allocation_boundary(self) -> None:
        sub = state(sources=True)
        spec = offering(usage=True)
        assert decide(sub, spec, at(1, 15), boundary=at(1, 11)) is charges.Release.NOT_SETTLED
        assert decide(sub, spec, at(1, 15), boundary=at(1, 12)) is charges.Release.RELEASE
        assert decide(sub, spec, at(1, 15), boundary=None) is charges.Release.RELEASE

    def test_a_boundary_does_not_hold_a_fee_only_subscription(self) -> None:
        assert decide(state(), offering(), at(1, 15), boundary=at(1, 3)) is charges.Release.RELEASE

    def test_any_failure_in_the_run_holds_the_finalizer(self) -> None:
        assert decide(state(), offering(), at(2, 0), failed=True) is charges.Release.FAILED
        assert decide(state(), None, at(2, 0)) is charges.Release.FAILED

    def test_the_logged_lines_are_the_documented_ones(self) -> None:
        assert charges.Release.MIN_PERIODS.value == (
            "MinPeriods not yet satisfied, keeping finalizer"
        )
        assert charges.Release.NOT_SETTLED.value == (
            "Charges not finalized through deactivation hour, keeping finalizer"
        )
        assert charges.Release.RELEASE.value == "Removed finalizer for deleted subscription"


class TestCosts:
    def test_the_ledger_windows_are_disjoint_and_cover_the_month_through_the_scheduled_hour(
        self,
    ) -> None:
        windows = charges.ledger_windows(dt.datetime(2026, 4, 3, 13, 20, tzinfo=UTC))
        assert windows == [(at(1, 0), at(3, 0)), (at(3, 0), at(3, 13)), (at(3, 13), at(3, 14))]

    def test_ledger_sums_land_in_exactly_the_buckets_containing_their_window(self) -> None:
        scheduled = dt.datetime(2026, 4, 3, 13, tzinfo=UTC)
        windows = charges.ledger_windows(scheduled)
        sums = [{"cpuHour": 100, "subscription": 7}, {"cpuHour": 20}, {"cpuHour": 3, "gpuHour": 0}]
        settled = charges.settled_charges(windows, sums)
        assert settled == [
            buckets.Charge(at(1, 0), "cpuHour", 100),
            buckets.Charge(at(1, 0), "subscription", 7),
            buckets.Charge(at(3, 0), "cpuHour", 20),
            buckets.Charge(at(3, 13), "cpuHour", 3),
        ]
        usage_only = charges.terms_for(
            state(deactivated=None, deleting=False, sources=True),
            {"pricing": {"resourcePricing": [{"name": "cpuHour"}]}},
        )
        costs, reason = charges.costs(scheduled, usage_only, settled)
        assert reason is reasons.CostsReason.FROM_DB
        # The stored fee rows count even though the Offering (now) has no fee: the ledger wins.
        assert [(c["granularity"], c.get("current")) for c in costs] == [
            ("hour", 3),
            ("day", 23),
            ("month", 130),
        ]
        assert all("projected" not in c for c in costs)

    def test_on_the_first_hour_of_a_month_the_earlier_windows_are_empty(self) -> None:
        windows = charges.ledger_windows(at(1, 0))
        assert [s < e for s, e in windows] == [False, False, True]
        assert charges.settled_charges(windows, [{"cpuHour": 9}, {"cpuHour": 9}, {}]) == []

    def test_from_the_ledger_the_fee_current_is_the_stored_rows_and_projected_the_calculators(
        self,
    ) -> None:
        terms = charges.terms_for(state(deactivated=None, deleting=False), offering())
        scheduled = at(1, 13)
        windows = charges.ledger_windows(scheduled)
        # 09:00-13:00 hold four 1.00 fee rows; one is missing from the ledger, and the
        # in-progress 13:00 row never counts toward `current`.
        sums: list[dict[str, int]] = [{}, {"subscription": 3_000_000}, {"subscription": 1_000_000}]
        costs, reason = charges.costs(scheduled, terms, charges.settled_charges(windows, sums))
        assert reason is reasons.CostsReason.FROM_DB
        hour, day, month = costs
        assert "current" not in hour and hour["projected"] == 1_000_000
        assert (day["current"], day["projected"]) == (3_000_000, 15_000_000)
        assert day["breakdown"] == [
            {"name": "subscription", "current": 3_000_000, "projected": 15_000_000}
        ]
        assert month["current"] == 3_000_000

    def test_without_the_ledger_the_buckets_are_the_fee_calculators(self) -> None:
        terms = charges.terms_for(state(deactivated=None, deleting=False), offering())
        costs, reason = charges.costs(at(1, 13), terms, None)
        assert reason is reasons.CostsReason.FROM_CALCULATOR
        # ActivatedAt 1h from 09:00: 4 ticks settled by 13:00, 15 in the day.
        day = costs[1]
        assert (day["current"], day["projected"]) == (4_000_000, 15_000_000)
        assert [b["name"] for b in day["breakdown"]] == ["subscription"]
        assert len(costs) == 3


class TestLedgerCostsKept:
    """A run whose ledger pass failed leaves costs a run of its hour (or a later one) summed
    from the ledger: two runs of one hour can race, and fee-only buckets would hide usage."""

    @staticmethod
    def written(scheduled: dt.datetime, reason: reasons.CostsReason, ok: str = "True") -> Any:
        terms = charges.terms_for(state(deactivated=None, deleting=False), offering())
        costs, _ = charges.costs(
            scheduled, terms, [] if reason is reasons.CostsReason.FROM_DB else None
        )
        resolved = {"type": "CostsResolved", "status": ok, "reason": reason.value}
        return {"costs": costs, "conditions": [{"type": "Ready", "status": "True"}, resolved]}

    def test_ledger_costs_of_the_same_hour_or_a_later_one_are_kept(self) -> None:
        ledger = self.written(at(1, 13), reasons.CostsReason.FROM_DB)
        assert charges.holds_ledger_costs(ledger, at(1, 13))
        assert charges.holds_ledger_costs(ledger, at(1, 13, 40))
        assert charges.holds_ledger_costs(ledger, at(1, 12))

    def test_older_ledger_costs_and_calculator_costs_are_replaced(self) -> None:
        assert not charges.holds_ledger_costs(
            self.written(at(1, 12), reasons.CostsReason.FROM_DB), at(1, 13)
        )
        assert not charges.holds_ledger_costs(
            self.written(at(1, 13), reasons.CostsReason.FROM_CALCULATOR), at(1, 13)
        )
        assert not charges.holds_ledger_costs(
            self.written(at(1, 13), reasons.CostsReason.FROM_DB, ok="False"), at(1, 13)
        )

    def test_a_status_without_a_readable_hour_bucket_holds_nothing(self) -> None:
        ledger = self.written(at(1, 13), reasons.CostsReason.FROM_DB)
        assert not charges.holds_ledger_costs({}, at(1, 13))
        assert not charges.holds_ledger_costs({**ledger, "costs": ledger["costs"][1:]}, at(1, 13))
        assert not charges.holds_ledger_costs({**ledger, "costs": "none"}, at(1, 13))
        assert not charges.holds_ledger_costs({**ledger, "conditions": None}, at(1, 13))
        bad = [{**ledger["costs"][0], "start": "13:00"}, *ledger["costs"][1:]]
        assert not charges.holds_ledger_costs({**ledger, "costs": bad}, at(1, 13))

    def test_ledger_costs_of_a_later_hour_are_kept_from_an_older_runs_ledger_costs(
        self,
    ) -> None:
        """A run of an older hour that finishes after the next hour's run (a retried Job)
        leaves that run's costs; a run of the same hour writes (it read the ledger later)."""
        ledger = self.written(at(1, 13), reasons.CostsReason.FROM_DB)
        assert charges.ledger_costs_hour(ledger) == at(1, 13)
        assert charges.holds_later_ledger_costs(ledger, at(1, 12))
        assert charges.holds_later_ledger_costs(ledger, at(1, 12, 59))
        assert not charges.holds_later_ledger_costs(ledger, at(1, 13))
        assert not charges.holds_later_ledger_costs(ledger, at(1, 13, 40))
        assert not charges.holds_later_ledger_costs(ledger, at(1, 14))
        calculator = self.written(at(1, 13), reasons.CostsReason.FROM_CALCULATOR)
        assert charges.ledger_costs_hour(calculator) is None
        assert not charges.holds_later_ledger_costs(calculator, at(1, 12))

"""What a charge run decides about a Budget: its period, its members, the state, thresholds,
status and Events, as pure functions."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from finops.api import bodies, models
from finops.billing import fees, forecast, usage
from finops.collection import budgets

UTC = dt.UTC
HOUR = dt.timedelta(hours=1)


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def budget(**spec: Any) -> bodies.BudgetBody:
    body: dict[str, Any] = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Budget",
        "metadata": {"name": "team", "namespace": "apps", "uid": "b-1", "generation": 3},
        "spec": {"amount": "1000", "currency": "USD", **spec},
    }
    return body  # type: ignore[return-value]


def terms(**spec: Any) -> budgets.BudgetTerms:
    return budgets.BudgetTerms.from_object(budget(**spec))


class TestPeriods:
    @pytest.mark.parametrize(
        ("period", "t", "start", "end"),
        [
            ("Monthly", "2026-02-14T09:30:00Z", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"),
            ("Monthly", "2026-12-31T23:00:00Z", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"),
            ("Quarterly", "2026-05-20T00:00:00Z", "2026-04-01T00:00:00Z", "2026-07-01T00:00:00Z"),
            ("Quarterly", "2026-12-01T00:00:00Z", "2026-10-01T00:00:00Z", "2027-01-01T00:00:00Z"),
            # 2026-04-09 is a Thursday; its week starts on Monday the 6th.
            ("Weekly", "2026-04-09T17:00:00Z", "2026-04-06T00:00:00Z", "2026-04-13T00:00:00Z"),
            ("Weekly", "2026-04-06T00:00:00Z", "2026-04-06T00:00:00Z", "2026-04-13T00:00:00Z"),
        ],
    )
    def test_a_period_is_the_utc_calendar_period_holding_the_hour(
        self, period: str, t: str, start: str, end: str
    ) -> None:
        assert budgets.period_bounds(models.BudgetPeriod(period), at(t)) == (at(start), at(end))

    @given(
        st.sampled_from(list(models.BudgetPeriod)),
        st.datetimes(
            min_value=dt.datetime(2000, 1, 1),
            max_value=dt.datetime(2100, 1, 1),
            timezones=st.just(UTC),
        ),
    )
    def test_periods_hold_the_instant_and_follow_each_other(
        self, period: models.BudgetPeriod, t: dt.datetime
    ) -> None:
        start, end = budgets.period_bounds(period, t)
        assert start <= t < end
        assert budgets.period_bounds(period, end)[0] == end
        assert budgets.period_bounds(period, start - dt.timedelta(microseconds=1))[1] == start


class TestSpec:
    def test_defaults_are_a_monthly_period_and_actual_thresholds(self) -> None:
        t = terms(thresholds=[{"percent": 80}])
        assert (t.period, t.amount_micros, t.generation) == (models.BudgetPeriod.MONTHLY, 10**9, 3)
        assert t.thresholds == (budgets.Threshold(80, models.ThresholdBasis.ACTUAL),)

    def test_the_amount_is_parsed_exactly_into_micros(self) -> None:
        assert terms(amount="1500.125").amount_micros == 1_500_125_000

    @pytest.mark.parametrize(
        ("amount", "says"),
        [("-3", "non-negative decimal"), ("0", "greater than zero"), ("1.0000001", "decimal")],
    )
    def test_an_amount_the_api_server_would_refuse_names_the_budget_and_field(
        self, amount: str, says: str
    ) -> None:
        with pytest.raises(budgets.BudgetError, match=rf"budget apps/team: spec.amount.*{says}"):
            terms(amount=amount)

    @pytest.mark.parametrize(
        ("selector", "labels", "selected"),
        [
            (None, {}, True),
            ({}, {"a": "b"}, True),
            ({"matchLabels": {"team": "ml"}}, {"team": "ml", "x": "y"}, True),
            ({"matchLabels": {"team": "ml"}}, {"team": "web"}, False),
            ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["a"]}]}, {}, False),
            (
                {"matchExpressions": [{"key": "t", "operator": "In", "values": ["a", "b"]}]},
                {"t": "b"},
                True,
            ),
            ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]}, {}, True),
            (
                {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["a"]}]},
                {"t": "a"},
                False,
            ),
            ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True),
            ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {"t": ""}, False),
            (
                {
                    "matchLabels": {"team": "ml"},
                    "matchExpressions": [{"key": "sandbox", "operator": "DoesNotExist"}],
                },
                {"team": "ml", "sandbox": "yes"},
                False,
            ),
        ],
    )
    def test_the_selector_has_kubernetes_label_selector_semantics(
        self, selector: Any, labels: dict[str, str], selected: bool
    ) -> None:
        assert budgets.selects(selector, labels) is selected


AT = at("2026-04-10T05:00:00Z")
APRIL = (at("2026-04-01T00:00:00Z"), at("2026-05-01T00:00:00Z"))


def candidates() -> list[budgets.BudgetMember]:
    return [
        budgets.BudgetMember("s-1", "apps", {"team": "ml"}),
        budgets.BudgetMember("s-2", "apps", {"team": "web"}),
        budgets.BudgetMember("s-3", "other", {"team": "ml"}),
    ]


class TestMembers:
    def test_members_are_the_namespace_subscriptions_the_selector_picks(self) -> None:
        plan = budgets.plan(terms(), AT, candidates(), None)
        assert (plan.start, plan.end, plan.members) == (*APRIL, ("s-1", "s-2"))
        picked = budgets.plan(terms(subscriptionSelector={"matchLabels": {"team": "ml"}}), AT,
                              candidates(), None)  # fmt: skip
        assert picked.members == ("s-1",)

    def test_a_subscription_stays_counted_for_the_period_once_it_matched(self) -> None:
        earlier = budgets.Recorded(APRIL[0], AT - HOUR, 3, ("s-1", "s-gone"))
        plan = budgets.plan(terms(), AT, [candidates()[1]], earlier)
        assert plan.members == ("s-1", "s-2", "s-gone")

    def test_a_new_period_starts_from_the_current_members(self) -> None:
        march = budgets.Recorded(at("2026-03-01T00:00:00Z"), AT - HOUR, 3, ("s-gone",))
        assert budgets.plan(terms(), AT, candidates(), march).members == ("s-1", "s-2")

    def test_a_run_for_an_earlier_hour_of_the_same_spec_is_stale(self) -> None:
        later = budgets.Recorded(APRIL[0], AT + HOUR, 3, ())
        assert budgets.plan(terms(), AT, candidates(), later).stale
        assert not budgets.plan(terms(), AT + HOUR, candidates(), later).stale
        edited = budgets.Recorded(APRIL[0], AT + HOUR, 2, ())
        assert not budgets.plan(terms(), AT, candidates(), edited).stale


def judged(
    spec: dict[str, Any],
    spent: dict[str, int],
    outlooks: list[forecast.Outlook] | None = None,
    recorded: list[budgets.Crossing] = (),  # type: ignore[assignment]
) -> budgets.Evaluation:
    plan = budgets.plan(terms(**spec), AT, candidates(), None)
    return budgets.judge(plan, budgets.LedgerTotals(spent, outlooks or [], "USD", recorded))


def hourly_fee(price: int) -> forecast.Outlook:
    spec = fees.FeeSpec.from_fee_block(
        {"priceMicros": price, "tickAlignment": "ActivatedAt", "period": "1h"}
    )
    activated = APRIL[0]
    return forecast.Outlook(spec.schedule(activated), usage.ActiveInterval(activated))


THRESHOLDS = [
    {"percent": 50},
    {"percent": 80},
    {"percent": 100, "basis": "Forecast"},
]


class TestJudgement:
    def test_a_threshold_is_crossed_when_the_value_reaches_the_percent_exactly(self) -> None:
        below = judged({"thresholds": THRESHOLDS}, {"USD": 499_999_999})
        assert [(c.percent, c.basis.value) for c in below.new] == []
        met = judged({"thresholds": THRESHOLDS}, {"USD": 500_000_000})
        assert [(c.percent, c.basis.value, c.value_micros) for c in met.new] == [
            (50, "Actual", 500_000_000)
        ]
        assert met.new[0].crossed_at == AT and met.new[0].period_start == APRIL[0]

    def test_the_forecast_threshold_uses_spent_plus_future_fees(self) -> None:
        # 2.00 an hour from 10 Apr 06:00 to 1 May: 498 hours ahead = 996.00; spent 4.00.
        ev = judged({"thresholds": THRESHOLDS}, {"USD": 4_000_000}, [hourly_fee(2_000_000)])
        assert ev.forecast.future_fees == 498 * 2_000_000
        assert ev.forecast.total == 1_000_000_000
        assert [(c.percent, c.basis.value, c.value_micros) for c in ev.new] == [
            (100, "Forecast", 1_000_000_000)
        ]
        assert ev.state is models.BudgetState.ON_TRACK  # reached, not exceeded

    def test_states_go_from_on_track_to_forecast_exceeded_to_exceeded(self) -> None:
        assert judged({}, {"USD": 10}).state is models.BudgetState.ON_TRACK
        over = judged({}, {"USD": 10}, [hourly_fee(3_000_000)])
        assert over.state is models.BudgetState.FORECAST_EXCEEDED
        assert judged({}, {"USD": 1_000_000_001}).state is models.BudgetState.EXCEEDED

    def test_a_recorded_crossing_is_not_crossed_again_and_keeps_its_hour(self) -> None:
        first = judged({"thresholds": THRESHOLDS}, {"USD": 600_000_000}).new[0]
        earlier = budgets.Crossing(
            "b-1",
            APRIL[0],
            50,
            models.ThresholdBasis.ACTUAL,
            AT - 5 * HOUR,
            500_000_000,
            10**9,
            True,
        )
        again = judged({"thresholds": THRESHOLDS}, {"USD": 900_000_000}, recorded=[earlier])
        assert [(c.percent, c.basis) for c in again.new] == [(80, models.ThresholdBasis.ACTUAL)]
        assert again.crossings[0] == earlier != first

    def test_a_crossing_of_an_earlier_period_does_not_count_for_this_one(self) -> None:
        march = budgets.Crossing(
            "b-1", at("2026-03-01T00:00:00Z"), 50, models.ThresholdBasis.ACTUAL, AT, 1, 10**9, True
        )
        ev = judged({"thresholds": THRESHOLDS}, {"USD": 600_000_000}, recorded=[march])
        assert [c.percent for c in ev.new] == [50] and march not in ev.crossings

    def test_charges_in_another_currency_make_the_state_unknown_and_judge_nothing(self) -> None:
        ev = judged({"thresholds": THRESHOLDS}, {"USD": 900_000_000, "EUR": 5_000_000})
        assert ev.state is models.BudgetState.UNKNOWN and ev.new == ()
        exceeded, ahead = budgets.decided_conditions(ev)
        assert (exceeded.status, exceeded.reason) == ("Unknown", "CurrencyMismatch")
        assert "5.00 EUR" in exceeded.message and ahead.status == "Unknown"

    def test_status_fields_and_conditions_say_what_was_judged(self) -> None:
        ev = judged({"thresholds": THRESHOLDS}, {"USD": 812_345_678}, [hourly_fee(1_000_000)])
        fields = budgets.status_fields(ev)
        assert fields["periodStart"] == "2026-04-01T00:00:00Z"
        assert fields["periodEnd"] == "2026-05-01T00:00:00Z"
        assert fields["evaluatedHour"] == "2026-04-10T05:00:00Z"
        assert (fields["spentMicros"], fields["spent"]) == (812_345_678, "812.35")
        assert fields["forecastMicros"] == 812_345_678 + 498_000_000
        assert fields["forecast"] == "1,310.35" and fields["state"] == "ForecastExceeded"
        assert fields["subscriptions"] == 2 and fields["observedGeneration"] == 3
        assert [(t["percent"], t["basis"]) for t in fields["thresholds"]] == [
            (50, "Actual"),
            (80, "Actual"),
            (100, "Forecast"),
        ]
        exceeded, ahead = budgets.decided_conditions(ev)
        assert (exceeded.type, exceeded.status, exceeded.reason) == (
            "Exceeded", "False", "SpentWithinAmount"
        )  # fmt: skip
        assert (ahead.type, ahead.status, ahead.reason) == (
            "ForecastExceeded", "True", "ForecastOverAmount"
        )  # fmt: skip
        assert ahead.message == (
            "forecast 1,310.35 USD for the period 2026-04-01T00:00:00Z to 2026-05-01T00:00:00Z "
            "against 1,000.00 USD"
        )


class TestEvents:
    def crossing(self, percent: int = 80, basis: str = "Actual") -> budgets.Crossing:
        return budgets.Crossing(
            "b-1", APRIL[0], percent, models.ThresholdBasis(basis), AT, 812, 10**9
        )

    def test_the_event_name_is_derived_from_the_crossing_alone(self) -> None:
        name = budgets.event_name("team", self.crossing())
        assert name == budgets.event_name("team", self.crossing())
        others = {
            budgets.event_name("team", self.crossing(100)),
            budgets.event_name("team", self.crossing(80, "Forecast")),
            budgets.event_name(
                "team",
                budgets.Crossing("b-1", APRIL[1], 80, models.ThresholdBasis.ACTUAL, AT, 812, 10**9),
            ),
        }
        assert name not in others and len(others) == 3

    def test_the_event_name_is_a_valid_object_name_for_any_budget_name(self) -> None:
        subdomain = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        for budget_name in ("team", "a" * 253, "a" * 199 + "-b" + "c" * 52, "x." * 100 + "y"):
            name = budgets.event_name(budget_name, self.crossing())
            assert len(name) <= 253 and subdomain.match(name), name

    def test_the_event_says_what_was_reached_in_the_budget_currency(self) -> None:
        crossing = budgets.Crossing(
            "b-1", APRIL[0], 100, models.ThresholdBasis.FORECAST, AT, 1_310_345_678, 10**9
        )
        assert budgets.event_type(crossing) == "Warning"
        assert budgets.event_type(self.crossing()) == "Normal"
        assert budgets.event_reason(crossing) == "ForecastThresholdCrossed"
        assert budgets.event_message(terms(), crossing, APRIL[1]) == (
            "forecast 1,310.35 USD reached 100% of the budget of 1,000.00 USD for the monthly "
            "period 2026-04-01T00:00:00Z to 2026-05-01T00:00:00Z (charge run of "
            "2026-04-10T05:00:00Z)"
        )

"""Billing periods as pure decisions: the calendar, when a period may close, invoice ids."""

from __future__ import annotations

import datetime as dt

import pytest

from finops.api import environment
from finops.billing import periods

UTC = dt.UTC
H = dt.timedelta(hours=1)
APRIL = dt.datetime(2026, 4, 1, tzinfo=UTC)
MAY = dt.datetime(2026, 5, 1, tzinfo=UTC)
CAL = periods.Calendar("UTC", dt.timedelta(hours=24))


def facts(**kw: object) -> periods.LedgerFacts:
    base: dict[str, object] = {
        "closed_through": None,
        "first_hour": APRIL + 5 * H,
        "first_open": None,
        "allocation_boundary": None,
    }
    base.update(kw)
    return periods.LedgerFacts(**base)  # type: ignore[arg-type]


class TestCalendar:
    def test_defaults_are_utc_months_and_a_day_of_grace(self) -> None:
        cal = periods.Calendar.from_env({})
        assert cal == periods.Calendar("UTC", dt.timedelta(hours=24))
        april = cal.period_of(APRIL + 40 * H, None)
        assert (april.start, april.end, april.label) == (APRIL, MAY, "2026-04")

    def test_a_time_zone_moves_the_month_to_local_midnight_across_summer_time(self) -> None:
        cal = periods.Calendar.from_env(
            {environment.Env.FINOPS_BILLING_TIME_ZONE: "Europe/Amsterdam"}
        )
        march = cal.period_of(dt.datetime(2026, 3, 15, tzinfo=UTC), None)
        # CET (+1) at the start of March, CEST (+2) at the start of April.
        assert march.start == dt.datetime(2026, 2, 28, 23, tzinfo=UTC)
        assert march.end == dt.datetime(2026, 3, 31, 22, tzinfo=UTC)
        assert march.label == "2026-03"

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            (
                {environment.Env.FINOPS_BILLING_TIME_ZONE: "Mars/Olympus"},
                "not a known IANA time zone",
            ),
            ({environment.Env.FINOPS_BILLING_TIME_ZONE: "Asia/Kolkata"}, "whole UTC hour"),
            ({environment.Env.FINOPS_PERIOD_GRACE_HOURS: "1.5"}, "whole number of hours"),
            ({environment.Env.FINOPS_PERIOD_GRACE_HOURS: "-2"}, "whole number of hours"),
        ],
    )
    def test_a_setting_that_cannot_work_is_refused_by_name(
        self, env: dict[str, str], message: str
    ) -> None:
        with pytest.raises(periods.SettingsError, match=message) as caught:
            periods.Calendar.from_env(env)
        assert next(iter(env)) in str(caught.value)

    def test_an_open_period_starts_where_the_closed_ones_end(self) -> None:
        bridging = CAL.period_of(APRIL + 3 * H, APRIL + 2 * H)
        assert (bridging.start, bridging.end) == (APRIL + 2 * H, MAY)
        assert CAL.period_of(APRIL + H, APRIL + 2 * H).start == APRIL


class TestClosing:
    def test_a_period_waits_for_its_grace(self) -> None:
        assert periods.closable(CAL, facts(), MAY + 23 * H) == []
        closed = periods.closable(CAL, facts(), MAY + 24 * H)
        assert [p.label for p in closed] == ["2026-04"]

    def test_open_charges_or_unsettled_allocations_hold_it(self) -> None:
        late = MAY + 30 * H
        assert periods.closable(CAL, facts(first_open=MAY - H), late) == []
        assert periods.closable(CAL, facts(allocation_boundary=MAY - 2 * H), late) == []
        assert periods.closable(CAL, facts(first_open=MAY, allocation_boundary=MAY), late)

    def test_periods_close_in_order_and_several_at_once(self) -> None:
        june = dt.datetime(2026, 6, 1, tzinfo=UTC)
        closed = periods.closable(CAL, facts(closed_through=APRIL), june + 24 * H)
        assert [p.label for p in closed] == ["2026-04", "2026-05"]
        assert periods.closable(CAL, facts(first_hour=None), june) == []

    def test_why_a_period_stays_open_is_said(self) -> None:
        grace = periods.why_open(CAL, facts(), MAY + 3 * H)
        assert grace is not None and "grace" in grace[1] and grace[0].label == "2026-04"
        held = periods.why_open(CAL, facts(first_open=MAY - H), MAY + 30 * H)
        assert held is not None and "not final" in held[1]
        assert periods.why_open(CAL, facts(), APRIL + 30 * H) is None


def test_invoice_ids_are_stable_readable_and_distinct() -> None:
    one = periods.invoice_id("prod", "team-a", APRIL, "2026-04")
    assert one == periods.invoice_id("prod", "team-a", APRIL, "2026-04")
    assert one.startswith("INV-2026-04-") and len(one) == len("INV-2026-04-") + 12
    others = {
        periods.invoice_id("prod", "team-b", APRIL, "2026-04"),
        periods.invoice_id("stage", "team-a", APRIL, "2026-04"),
        periods.invoice_id("prod", "team-a", MAY, "2026-05"),
    }
    assert one not in others and len(others) == 3


def test_the_index_places_closed_hours_by_record_and_open_ones_by_calendar() -> None:
    recorded = periods.Period(APRIL, MAY, "2026-04")
    index = periods.PeriodIndex(CAL, (recorded,))
    assert index.period_of(APRIL + 5 * H) is recorded
    assert index.period_of(MAY + H).label == "2026-05"
    assert index.starting(MAY).start == MAY and index.starting(APRIL) is recorded
    assert index.is_closed(recorded) and not index.is_closed(index.period_of(MAY))

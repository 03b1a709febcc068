"""Hour pinning, lookback planning and the CostJob execution record."""

from __future__ import annotations

import datetime as dt

import pytest

from finops.collection import plan

NOW = dt.datetime(2026, 10, 3, 10, 42, 17, tzinfo=dt.UTC)
H10 = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)


def test_scheduled_timestamp_is_truncated_to_its_hour() -> None:
    assert plan.scheduled_hour("2026-10-03T07:59:59Z", NOW) == H10.replace(hour=7)


def test_offset_timestamps_are_converted_to_utc_before_truncating() -> None:
    assert plan.scheduled_hour("2026-10-03T09:30:00+02:00", NOW) == H10.replace(hour=7)


@pytest.mark.parametrize("value", [None, "", "not-a-time", "2026-10-03T07:00:00"])
def test_empty_unparsable_or_naive_timestamp_falls_back_to_the_current_hour(
    value: str | None,
) -> None:
    assert plan.scheduled_hour(value, NOW) == H10


@pytest.mark.parametrize(("value", "n"), [(None, 2), ("", 2), ("5", 5), ("0", 0), ("x", 2)])
def test_hours_lookback_defaults_to_two_when_absent_or_bad(value: str | None, n: int) -> None:
    assert plan.lookback_hours(value) == n


def test_lookback_hours_are_final_and_the_scheduled_hour_is_not() -> None:
    work = plan.hours_to_collect(H10, 3, fully_finalized=set())
    assert [(w.start.hour, w.finalized) for w in work] == [
        (7, True),
        (8, True),
        (9, True),
        (10, False),
    ]


def test_fully_finalized_lookback_hours_are_skipped() -> None:
    done = {H10 - plan.HOUR * 2}
    work = plan.hours_to_collect(H10, 3, fully_finalized=done)
    assert [w.start.hour for w in work] == [7, 9, 10]


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValueError):
        plan.truncate_hour(dt.datetime(2026, 1, 1))


def record(ok: bool, minute: int) -> plan.RunRecord:
    return plan.RunRecord(
        H10.replace(minute=minute), ok, "1.2s", "" if ok else "opencost: HTTP 500"
    )


def test_success_moves_every_last_field_and_prepends_the_record() -> None:
    out = plan.status_after_run(None, record(True, 1))
    assert out["lastExecutionStatus"] == "Success"
    assert out["lastSuccessfulExecutionTime"] == out["lastExecutionTime"] == "2026-10-03T10:01:00Z"
    assert out["executionHistory"] == [
        {"executionTime": "2026-10-03T10:01:00Z", "status": "Success", "duration": "1.2s"}
    ]


def test_failure_keeps_the_last_success_time_and_records_the_error() -> None:
    before = plan.status_after_run(None, record(True, 1))
    out = plan.status_after_run(before, record(False, 2))
    assert out["lastExecutionStatus"] == "Failed"
    assert "lastSuccessfulExecutionTime" not in out
    assert out["executionHistory"][0]["error"] == "opencost: HTTP 500"
    assert [r["status"] for r in out["executionHistory"]] == ["Failed", "Success"]


def test_history_keeps_the_ten_newest_records() -> None:
    status: dict[str, object] | None = None
    for minute in range(12):
        status = plan.status_after_run(status, record(True, minute))
    assert status is not None
    history = status["executionHistory"]
    assert isinstance(history, list)
    assert len(history) == 10
    assert history[0]["executionTime"] == "2026-10-03T10:11:00Z"
    assert history[-1]["executionTime"] == "2026-10-03T10:02:00Z"

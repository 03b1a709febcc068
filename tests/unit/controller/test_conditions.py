"""Conditions follow metav1.Condition: the transition time moves only with the status."""

from __future__ import annotations

import datetime as dt

from finops.api import conditions

T0 = dt.datetime(2026, 1, 1, 10, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(hours=1)


def test_same_status_keeps_transition_time_but_takes_new_reason() -> None:
    first = conditions.set_condition(
        None, conditions.DecidedCondition("Ready", "True", "A", "a"), generation=1, now=T0
    )
    second = conditions.set_condition(
        first, conditions.DecidedCondition("Ready", "True", "B", "b"), generation=2, now=T1
    )
    assert second[0]["lastTransitionTime"] == "2026-01-01T10:00:00Z"
    assert (second[0]["reason"], second[0]["observedGeneration"]) == ("B", 2)


def test_status_change_moves_transition_time() -> None:
    first = conditions.set_condition(
        None, conditions.DecidedCondition("Ready", "True", "A", "a"), generation=1, now=T0
    )
    second = conditions.set_condition(
        first, conditions.DecidedCondition("Ready", "False", "B", "b"), generation=1, now=T1
    )
    assert second[0]["lastTransitionTime"] == "2026-01-01T11:00:00Z"


def test_other_types_are_kept_in_place() -> None:
    start = [
        {
            "type": "Active",
            "status": "True",
            "reason": "X",
            "message": "",
            "lastTransitionTime": "t",
        }
    ]
    result = conditions.set_condition(
        start, conditions.DecidedCondition("Ready", "True", "A", "a"), generation=None, now=T0
    )
    assert [c["type"] for c in result] == ["Active", "Ready"]
    assert "observedGeneration" not in result[1]

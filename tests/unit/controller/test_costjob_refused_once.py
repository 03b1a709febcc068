"""A refused CostJob's Warning Event is recorded once per generation, across replicas."""

from __future__ import annotations

from typing import Any

import pytest

from finops.api import reasons
from finops.provisioning import costjobs


def job(generation: int, condition: dict[str, Any] | None) -> dict[str, Any]:
    status = {"conditions": [condition]} if condition else {}
    return {"metadata": {"name": "j", "generation": generation}, "status": status}


REFUSED = {
    "type": reasons.ConditionType.SCHEDULED,
    "status": "False",
    "reason": "NamespaceNotAllowed",
    "observedGeneration": 3,
}


def test_a_status_recording_this_generations_refusal_means_the_event_exists() -> None:
    assert costjobs.already_refused(job(3, REFUSED))


@pytest.mark.parametrize(
    "condition",
    [
        None,
        {**REFUSED, "observedGeneration": 2},  # an older generation: refuse anew
        {**REFUSED, "status": "True", "reason": "CronJobReady"},
        {**REFUSED, "type": "Ready"},
    ],
)
def test_anything_else_records_the_event(condition: dict[str, Any] | None) -> None:
    assert not costjobs.already_refused(job(3, condition))

"""Cost and run metrics are read from the objects exactly, at scrape time."""

from __future__ import annotations

from typing import Any

import prometheus_client
from prometheus_client import parser

from finops.controller import cost_metrics


def sample(text: str, metric: str, **labels: str) -> float | None:
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def scrape(**objects: list[dict[str, Any]]) -> str:
    registry = prometheus_client.CollectorRegistry()
    registry.register(
        cost_metrics.CostCollector(
            lambda: objects.get("subs", []),
            lambda: objects.get("books", []),
            lambda: objects.get("jobs", []),
            lambda: objects.get("budgets", []),
        )
    )
    return prometheus_client.generate_latest(registry).decode()


SUB = {
    "metadata": {"namespace": "team", "name": "web"},
    "spec": {"offeringRef": {"name": "platform-base", "namespace": "finops"}},
    "status": {
        "conditions": [{"type": "Active", "status": "True"}],
        "costs": [
            {
                "granularity": "hour",
                "projected": 40000000,
                "breakdown": [{"name": "subscription", "projected": 40000000}],
            },
            {
                "granularity": "month",
                "current": 160000123,
                "projected": 28440000000,
                "breakdown": [
                    {"name": "subscription", "current": 160000000, "projected": 28440000000},
                    {"name": "cpuHour", "current": 123},
                ],
            },
        ],
    },
}


def test_each_bucket_and_meter_of_status_costs_becomes_a_sample() -> None:
    text = scrape(subs=[SUB])
    name = "finops_subscription_cost_current_micros"
    assert sample(text, name, granularity="month", meter="subscription") == 160000000
    assert sample(text, name, granularity="month", meter="cpuHour") == 123
    assert sample(text, name, granularity="hour", meter="subscription") == 0
    assert (
        sample(
            text,
            "finops_subscription_cost_projected_micros",
            granularity="month",
            meter="subscription",
            offering="platform-base",
            namespace="team",
        )
        == 28440000000
    )
    assert sample(text, "finops_subscription_active", subscription="web") == 1


def test_only_the_active_pricebook_has_an_info_sample() -> None:
    books = [
        {
            "metadata": {"namespace": "f", "name": "a"},
            "spec": {"currency": "USD"},
            "status": {"active": True, "conditions": [{"type": "Ready", "status": "True"}]},
        },
        {
            "metadata": {"namespace": "f", "name": "b"},
            "spec": {"currency": "EUR"},
            "status": {"active": False, "conditions": [{"type": "Ready", "status": "False"}]},
        },
    ]
    text = scrape(books=books)
    assert sample(text, "finops_pricebook_active_info", name="a", currency="USD") == 1
    assert sample(text, "finops_pricebook_active_info", name="b") is None
    assert sample(text, "finops_pricebook_ready", name="b") == 0


def test_costjob_runs_report_outcome_times_and_duration() -> None:
    job = {
        "metadata": {"namespace": "f", "name": "collect"},
        "spec": {"type": "ResourceCostCollection"},
        "status": {
            "lastExecutionStatus": "Failed",
            "lastExecutionTime": "2026-10-03T10:00:00Z",
            "lastSuccessfulExecutionTime": "2026-10-03T09:00:00Z",
            "executionHistory": [{"status": "Failed", "duration": "1m2.5s"}],
        },
    }
    text = scrape(jobs=[job, {"metadata": {"namespace": "f", "name": "never-ran"}}])
    assert sample(text, "finops_costjob_last_execution_success", costjob="collect") == 0
    assert sample(text, "finops_costjob_last_execution_success", costjob="never-ran") is None
    assert sample(text, "finops_costjob_last_execution_duration_seconds") == 62.5
    assert sample(text, "finops_costjob_last_success_timestamp_seconds") == 1791018000


def test_an_evaluated_budget_shows_its_amount_spend_and_forecast() -> None:
    evaluated = {
        "metadata": {"namespace": "team", "name": "monthly"},
        "status": {
            "amountMicros": 2_000_000_000,
            "spentMicros": 1_234,
            "forecastMicros": 2_500_000_001,
        },
    }
    fresh = {"metadata": {"namespace": "team", "name": "new"}, "spec": {"amount": "10"}}
    text = scrape(budgets=[evaluated, fresh])
    labels = {"namespace": "team", "budget": "monthly"}
    assert sample(text, "finops_budget_amount_micros", **labels) == 2_000_000_000
    assert sample(text, "finops_budget_spent_micros", **labels) == 1_234
    assert sample(text, "finops_budget_forecast_micros", **labels) == 2_500_000_001
    assert sample(text, "finops_budget_amount_micros", budget="new") is None

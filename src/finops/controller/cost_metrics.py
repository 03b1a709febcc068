"""Cost and run metrics on `/metrics`, read from the objects the manager already watches.

Why from the objects: `Subscription.status.costs` is what the charge job settled from the
ledger, and `CostJob.status` is what each allocation run recorded, so a scrape costs no
database round trip and agrees with `kubectl get` to the micro. Values are computed at scrape
time from the watch caches (nothing to keep in sync).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeAlias, TypeVar

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from finops.api import bodies, conditions
from finops.collection import durations

B = TypeVar(
    "B", bodies.SubscriptionBody, bodies.PriceBookBody, bodies.CostJobBody, bodies.BudgetBody
)
Objects: TypeAlias = Callable[[], Iterable[B]]
"""The current contents of one watch store."""

_SUB_LABELS = ["namespace", "subscription", "offering", "granularity", "meter"]


def _timestamp(value: object) -> float | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _condition(obj: Mapping[str, object], kind: str) -> Mapping[str, object]:
    status = obj.get("status")
    found = conditions.in_status(status, kind) if isinstance(status, Mapping) else None
    return {} if found is None else dict(found)


def subscription_families(subs: Iterable[bodies.SubscriptionBody]) -> list[GaugeMetricFamily]:
    """Settled and projected micros per bucket and meter, and whether each is active."""
    current = GaugeMetricFamily(
        "finops_subscription_cost_current_micros",
        "Settled charges in the bucket's window, in micro-currency (status.costs current).",
        labels=_SUB_LABELS,
    )
    projected = GaugeMetricFamily(
        "finops_subscription_cost_projected_micros",
        "Projected fee for the bucket's whole window, in micro-currency (status.costs).",
        labels=_SUB_LABELS,
    )
    active = GaugeMetricFamily(
        "finops_subscription_active",
        "1 while the Subscription is active (condition Active=True), else 0.",
        labels=["namespace", "subscription", "offering"],
    )
    for sub in subs:
        meta = sub.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        spec = sub.get("spec")
        ref = None if spec is None else spec.get("offeringRef")
        offering = "" if ref is None else str(ref.get("name", ""))
        is_active = _condition(sub, "Active").get("status") == "True"
        active.add_metric([ns, name, offering], 1.0 if is_active else 0.0)
        for bucket in (sub.get("status") or {}).get("costs") or []:
            granularity = str(bucket.get("granularity", ""))
            for part in bucket.get("breakdown") or []:
                labels = [ns, name, offering, granularity, str(part.get("name", ""))]
                current.add_metric(labels, float(int(part.get("current") or 0)))
                projected.add_metric(labels, float(int(part.get("projected") or 0)))
    return [current, projected, active]


def pricebook_families(books: Iterable[bodies.PriceBookBody]) -> list[GaugeMetricFamily]:
    """Which book is active (value 1), with its currency, and each book's readiness."""
    info = GaugeMetricFamily(
        "finops_pricebook_active_info",
        "The active PriceBook: 1 on the book holding the slot.",
        labels=["namespace", "name", "currency"],
    )
    ready = GaugeMetricFamily(
        "finops_pricebook_ready",
        "1 when the PriceBook's rates parsed (condition Ready=True), else 0.",
        labels=["namespace", "name"],
    )
    for book in books:
        meta = book.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        if (book.get("status") or {}).get("active") is True:
            spec = book.get("spec")
            currency = "" if spec is None else spec.get("currency", "")
            info.add_metric([ns, name, currency], 1.0)
        is_ready = _condition(book, "Ready").get("status") == "True"
        ready.add_metric([ns, name], 1.0 if is_ready else 0.0)
    return [info, ready]


def costjob_families(jobs: Iterable[bodies.CostJobBody]) -> list[GaugeMetricFamily]:
    """The outcome, time and duration of each CostJob's last recorded run."""
    labels = ["namespace", "costjob", "type"]
    success = GaugeMetricFamily(
        "finops_costjob_last_execution_success",
        "1 if the CostJob's last recorded run succeeded, 0 if it failed.",
        labels=labels,
    )
    last = GaugeMetricFamily(
        "finops_costjob_last_execution_timestamp_seconds",
        "Start time of the CostJob's last recorded run (Unix seconds).",
        labels=labels,
    )
    last_ok = GaugeMetricFamily(
        "finops_costjob_last_success_timestamp_seconds",
        "Start time of the CostJob's last successful run (Unix seconds).",
        labels=labels,
    )
    duration = GaugeMetricFamily(
        "finops_costjob_last_execution_duration_seconds",
        "How long the CostJob's last recorded run took.",
        labels=labels,
    )
    for job in jobs:
        meta = job.get("metadata") or {}
        status = job.get("status") or {}
        key = [
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            str((job.get("spec") or {}).get("type", "")),
        ]
        outcome = status.get("lastExecutionStatus")
        if outcome:
            success.add_metric(key, 1.0 if outcome == "Success" else 0.0)
        for family, field in (
            (last, "lastExecutionTime"),
            (last_ok, "lastSuccessfulExecutionTime"),
        ):
            seconds = _timestamp(status.get(field))
            if seconds is not None:
                family.add_metric(key, seconds)
        history = status.get("executionHistory") or []
        if history:
            try:
                took = durations.parse(str(history[0].get("duration", "")))
            except durations.DurationError:
                continue
            duration.add_metric(key, took.total_seconds())
    return [success, last, last_ok, duration]


def budget_families(items: Iterable[bodies.BudgetBody]) -> list[GaugeMetricFamily]:
    """Each evaluated Budget's amount, spend and forecast for its current period, as its
    status says (a Budget not evaluated yet has no samples)."""
    labels = ["namespace", "budget"]
    families = {
        "amountMicros": GaugeMetricFamily(
            "finops_budget_amount_micros",
            "The Budget's amount per period, in micro-currency of its currency.",
            labels=labels,
        ),
        "spentMicros": GaugeMetricFamily(
            "finops_budget_spent_micros",
            "Charged so far in the Budget's current period (status.spentMicros).",
            labels=labels,
        ),
        "forecastMicros": GaugeMetricFamily(
            "finops_budget_forecast_micros",
            "Forecast for the Budget's whole current period (status.forecastMicros).",
            labels=labels,
        ),
    }
    for item in items:
        meta = item.get("metadata") or {}
        status: Mapping[str, object] = item.get("status") or {}
        key = [str(meta.get("namespace", "")), str(meta.get("name", ""))]
        for field, family in families.items():
            value = status.get(field)
            if isinstance(value, int):
                family.add_metric(key, float(value))
    return list(families.values())


class CostCollector(Collector):
    """Builds every cost and run metric from the current contents of the watch caches."""

    def __init__(
        self,
        subscriptions: Objects[bodies.SubscriptionBody],
        pricebooks: Objects[bodies.PriceBookBody],
        costjobs: Objects[bodies.CostJobBody],
        budgets: Objects[bodies.BudgetBody] = list,
    ) -> None:
        self._subscriptions = subscriptions
        self._pricebooks = pricebooks
        self._costjobs = costjobs
        self._budgets = budgets

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from subscription_families(self._subscriptions())
        yield from pricebook_families(self._pricebooks())
        yield from costjob_families(self._costjobs())
        yield from budget_families(self._budgets())


_installed: list[CostCollector] = []


def install(
    registry: prometheus_client.CollectorRegistry,
    subscriptions: Objects[bodies.SubscriptionBody],
    pricebooks: Objects[bodies.PriceBookBody],
    costjobs: Objects[bodies.CostJobBody],
    budgets: Objects[bodies.BudgetBody] = list,
) -> None:
    """Serve the cost metrics of these caches on `registry`, replacing any earlier ones (a
    replica that regains leadership builds new caches)."""
    while _installed:
        registry.unregister(_installed.pop())
    collector = CostCollector(subscriptions, pricebooks, costjobs, budgets)
    registry.register(collector)
    _installed.append(collector)

"""Prometheus metrics, named like controller-runtime's so existing dashboards keep working.

The `controller` label takes the documented values (`finopsprovider-controller`,
`pricebook-controller`, `costjob-controller`).
"""

from __future__ import annotations

import prometheus_client

REGISTRY = prometheus_client.CollectorRegistry()

RECONCILE_TOTAL = prometheus_client.Counter(
    "controller_runtime_reconcile_total",
    "Reconciliations per controller and result.",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = prometheus_client.Counter(
    "controller_runtime_reconcile_errors_total",
    "Reconciliations that failed.",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIME = prometheus_client.Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Time per reconciliation.",
    ["controller"],
    registry=REGISTRY,
)
WORKQUEUE_DEPTH = prometheus_client.Gauge(
    "workqueue_depth", "Keys waiting in the work queue.", ["name"], registry=REGISTRY
)
WORKQUEUE_ADDS = prometheus_client.Counter(
    "workqueue_adds_total", "Keys added to the work queue.", ["name"], registry=REGISTRY
)
WORKQUEUE_RETRIES = prometheus_client.Counter(
    "workqueue_retries_total", "Keys requeued after a failure.", ["name"], registry=REGISTRY
)
LEADER = prometheus_client.Gauge(
    "leader_election_master_status",
    "1 while this replica holds the lease.",
    ["name"],
    registry=REGISTRY,
)
OPENCOST_RESTARTS = prometheus_client.Counter(
    "finops_opencost_restarts_total",
    "OpenCost restarts triggered after a pricing or provider change.",
    ["cause"],
    registry=REGISTRY,
)


def exposition() -> bytes:
    """The text format of every metric above."""
    return prometheus_client.generate_latest(REGISTRY)

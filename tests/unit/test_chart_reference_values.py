"""The chart's values.yaml against the configuration reference, key by key.

`DOCUMENTED` is written from the public docs' configuration reference (the "Helm chart values"
tables, plus the seven CostJob timeout keys named in prose): every key with its documented
default. Each key must exist in values.yaml with that default, or be a row of the chart
README's "Values that differ on purpose" table with a reason. A row must name a documented key
that really differs, so the table cannot go stale.
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest
import yaml

CHART = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "helm" / "finops-operator"
TABLE_HEADING = "### Values that differ on purpose"

_TIMEOUTS = (
    "databaseInitTimeout",
    "k8sOperationTimeout",
    "openCostFetchTimeout",
    "databaseInsertTimeout",
    "databaseViewsRefreshTimeout",
    "statusUpdateTimeout",
    "httpClientTimeout",
)
_RATES = ("cpuHour", "spotCPUHour", "ramGbHour", "spotRAMGbHour", "pvGbHour", "gpuHour")

DOCUMENTED: tuple[tuple[str, Any], ...] = (
    # Controller manager
    ("controllerManager.replicas", 1),
    (
        "controllerManager.manager.args",
        [
            "--metrics-bind-address=:8443",
            "--leader-elect",
            "--health-probe-bind-address=:8081",
            "--webhook-cert-path=/tmp/k8s-webhook-server/serving-certs",
        ],
    ),
    ("controllerManager.manager.image.repository", "ghcr.io/stakater/finops-operator"),
    ("controllerManager.manager.image.tag", "v0.1.16"),
    ("controllerManager.manager.env.opencostDeploymentName", "finops-operator-opencost"),
    ("controllerManager.manager.env.opencostDeploymentNamespace", "finops-operator-system"),
    ("controllerManager.manager.env.mtoEnabled", "false"),
    ("controllerManager.manager.extraEnv", []),
    (
        "controllerManager.manager.containerSecurityContext",
        {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    ),
    (
        "controllerManager.podSecurityContext",
        {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
    ),
    ("controllerManager.serviceAccount.annotations", {}),
    ("imagePullSecrets", []),
    ("kubernetesClusterDomain", "cluster.local"),
    # Certificates and platform
    ("certManager.enabled", True),
    ("openshift.enabled", False),
    ("webhookService.type", "ClusterIP"),
    ("webhookService.ports", [{"port": 443, "targetPort": 9443, "protocol": "TCP"}]),
    ("metricsService.type", "ClusterIP"),
    (
        "metricsService.ports",
        [{"name": "https", "port": 8443, "targetPort": 8443, "protocol": "TCP"}],
    ),
    # Dependency Secret names
    ("secrets.postgres", "finops-operator-postgres-config"),
    ("secrets.opencost", "finops-operator-opencost-config"),
    ("secrets.prometheus", "finops-operator-prometheus-config"),
    # Starter resources
    ("costJob.enabled", False),
    ("costJob.interval", "1m"),
    *((f"costJob.{key}", "") for key in _TIMEOUTS),
    ("chargeCollectionJob.enabled", False),
    ("chargeCollectionJob.interval", "1m"),
    *((f"chargeCollectionJob.{key}", "") for key in _TIMEOUTS),
    ("priceBook.enabled", False),
    ("priceBook.currency", "USD"),
    ("priceBook.valuationMode", "currency"),
    *((f"priceBook.rates.{key}", "") for key in _RATES),
    ("priceBook.rates.networkGiB", ""),
    # FinOps Gateway
    ("finopsGatewayGateway.replicas", 1),
    (
        "finopsGatewayGateway.finopsGatewayContainer.image.repository",
        "ghcr.io/stakater/finops-gateway",
    ),
    ("finopsGatewayGateway.finopsGatewayContainer.image.tag", "v0.1.0"),
    ("finopsGatewayGateway.finopsGatewayContainer.env.port", "8080"),
    ("finopsGatewayGateway.finopsGatewayContainer.env.enableAuth", "false"),
    ("finopsGatewayGateway.finopsGatewayContainer.env.mtoGatewayUrl", ""),
    ("finopsGatewayGateway.finopsGatewayContainer.env.allowedOrigins", ""),
    ("finopsGatewayGateway.finopsGatewayContainer.extraEnv", []),
    ("finopsGatewayGateway.finopsGatewayContainer.containerSecurityContext", {}),
    ("finopsGatewayService.type", "ClusterIP"),
    ("finopsGatewayService.ports", [{"name": "http", "port": 8080, "targetPort": 8080}]),
    ("finopsGatewayIngress.enabled", False),
    ("finopsGatewayIngress.className", ""),
    ("finopsGatewayIngress.annotations", {}),
    ("finopsGatewayIngress.tls", []),
    ("finopsGatewayIngress.rules", []),
    ("finopsGatewayIngress.hosts", []),
    # Bundled dependencies
    ("mdoDependencies.enabled", False),
    ("mdoDependencies.postgres.database", "finopsdb"),
    ("mdoDependencies.postgres.username", "finopsuser"),
    ("mdoDependencies.postgres.password", "superfinopspassword1234"),
    ("mdoDependencies.postgres.postgresPassword", "supersecurepassword1234"),
)

_MISSING = object()


def _values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def _lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def differs_on_purpose() -> dict[str, str]:
    """Rows of the README's table: key -> reason (the last column)."""
    text = (CHART / "README.md").read_text()
    assert TABLE_HEADING in text, f"README.md has no {TABLE_HEADING!r} section"
    rows: dict[str, str] = {}
    for line in text.split(TABLE_HEADING, 1)[1].splitlines():
        if rows and not line.startswith("|"):
            break
        match = re.match(r"\|\s*`([^`]+)`\s*\|.*\|\s*([^|]*?)\s*\|\s*$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_the_documented_list_has_no_duplicates() -> None:
    names = [name for name, _ in DOCUMENTED]
    assert len(names) == len(set(names)) == 72


@pytest.mark.parametrize(("key", "default"), DOCUMENTED, ids=[k for k, _ in DOCUMENTED])
def test_documented_key_has_the_documented_default_or_a_stated_reason(
    key: str, default: Any
) -> None:
    actual = _lookup(_values(), key)
    reason = differs_on_purpose().get(key)
    if reason is None:
        assert actual is not _MISSING, f"{key} is documented but not in values.yaml"
        assert actual == default, f"{key}: values.yaml has {actual!r}, the docs say {default!r}"
    else:
        assert reason, f"{key}: the README row gives no reason"
        assert actual != default, f"{key} matches the docs now: drop its README row"


def test_every_row_of_the_differences_table_is_a_documented_key() -> None:
    rows = differs_on_purpose()
    assert rows, "the README table is empty or unparsable"
    assert set(rows) <= {name for name, _ in DOCUMENTED}

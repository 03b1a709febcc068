"""What the chart ships for Budgets, on the real API server: tenants manage Budgets in their
own namespace through the roles aggregated into `edit`/`admin`, and nowhere else; the manager
may watch them; the optional PrometheusRule alerts on the metrics the controller exports.

The test server has no controller-manager, so ClusterRole aggregation does not run: the
chart's Budget roles are checked for their aggregation labels, then bound directly (by a
RoleBinding in the tenant's namespace, as `edit` would be) and used for real, by
impersonating the tenant.
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from tests.kube import _helm

from finops.controller import cost_metrics
from finops_devenv import controlplane

GROUP = "finops.stakater.com"
TENANT = "alice@example.com"

PROMETHEUS_RULE_CRD = _helm.permissive_crd(
    "monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules"
)


def budget(namespace: str, name: str = "monthly") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Budget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"amount": "2000", "currency": "USD"},
    }


class Tenants:
    """The chart's Budget roles created for real, the editor role bound to the tenant in one
    namespace, and a second namespace it has no binding in."""

    def __init__(self, kube: controlplane.ControlPlane, objects: list[dict[str, Any]]) -> None:
        self.kube = kube
        self.objects = objects
        self.mine = f"tenant-{uuid.uuid4().hex[:8]}"
        self.theirs = f"tenant-{uuid.uuid4().hex[:8]}"

    def role(self, name: str) -> dict[str, Any]:
        (found,) = [
            o
            for o in _helm.of_kind(self.objects, "ClusterRole")
            if o["metadata"]["name"].endswith(f"-budget-{name}-role")
        ]
        return found

    def as_tenant(self) -> httpx.Client:
        client = self.kube.http()
        client.headers["Impersonate-User"] = TENANT
        client.headers["Impersonate-Group"] = "system:authenticated"
        return client


@pytest.fixture(scope="module")
def tenants(
    kube: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tenants]:
    release = f"fo-{uuid.uuid4().hex[:6]}"
    objects = _helm.template(release, "finops-operator-system", {}, tmp_path_factory.mktemp("h"))
    made = Tenants(kube, objects)
    for ns in (made.mine, made.theirs):
        kube.create_namespace(ns)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "alice-edits-budgets", "namespace": made.mine},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": made.role("editor")["metadata"]["name"],
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}],
    }
    with kube.http() as client:
        api = _helm.Api(client)
        for obj in [made.role(r) for r in ("admin", "editor", "viewer")] + [binding]:
            resp = api.apply(obj, dry_run=False)
            assert resp.status_code in (200, 201), resp.text
    yield made


def test_the_budget_roles_fold_into_the_builtin_roles_of_a_namespace(tenants: Tenants) -> None:
    for role, builtin in (("admin", "admin"), ("editor", "edit"), ("viewer", "view")):
        labels = tenants.role(role)["metadata"]["labels"]
        assert labels.get(f"rbac.authorization.k8s.io/aggregate-to-{builtin}") == "true", role
    rules = tenants.role("editor")["rules"]
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    assert {"apiGroups": [GROUP], "resources": ["budgets"], "verbs": verbs} in rules


def test_a_tenant_manages_budgets_in_its_namespace_and_nowhere_else(tenants: Tenants) -> None:
    url = f"/apis/{GROUP}/v1alpha1/namespaces/{{}}/budgets"
    with tenants.as_tenant() as alice:
        created = alice.post(url.format(tenants.mine), json=budget(tenants.mine))
        assert created.status_code == 201, created.text
        stored = created.json()
        stored["spec"]["amount"] = "2500"
        mine = f"{url.format(tenants.mine)}/monthly"
        assert alice.put(mine, json=stored).status_code == 200
        assert alice.get(url.format(tenants.mine)).status_code == 200
        # The status is the charge job's to write, not the tenant's.
        stored = alice.get(mine).json()
        stored["status"] = {"state": "OnTrack"}
        assert alice.put(f"{mine}/status", json=stored).status_code == 403
        refused = alice.post(url.format(tenants.theirs), json=budget(tenants.theirs))
        assert refused.status_code == 403, refused.text
        assert alice.get(url.format(tenants.theirs)).status_code == 403
        assert alice.delete(mine).status_code == 200
    with tenants.kube.http() as admin:
        assert (
            admin.post(url.format(tenants.theirs), json=budget(tenants.theirs)).status_code == 201
        )
    with tenants.as_tenant() as alice:
        assert alice.delete(f"{url.format(tenants.theirs)}/monthly").status_code == 403


def test_the_manager_may_watch_budgets_but_not_write_them(tmp_path: pathlib.Path) -> None:
    objects = _helm.template("finops-operator", "finops-operator-system", {}, tmp_path)
    role = _helm.find(objects, "ClusterRole", "finops-operator-manager-role")
    granted = {
        (res, verb)
        for rule in role["rules"]
        if GROUP in rule["apiGroups"]
        for res in rule["resources"]
        for verb in rule["verbs"]
        if res.startswith("budgets")
    }
    assert granted == {("budgets", "get"), ("budgets", "list"), ("budgets", "watch")}


class TestBudgetAlerts:
    def test_there_is_no_prometheus_rule_unless_asked_for(self, tmp_path: pathlib.Path) -> None:
        objects = _helm.template("finops-operator", "finops-operator-system", {}, tmp_path)
        assert _helm.of_kind(objects, "PrometheusRule") == []

    def test_the_rule_alerts_on_the_metrics_the_manager_exports(
        self, kube: controlplane.ControlPlane, kube_namespace: str, tmp_path: pathlib.Path
    ) -> None:
        values = {"budgetAlerts": {"enabled": True, "labels": {"release": "prom"},
                                   "forecastFor": "3h", "severity": "page"}}  # fmt: skip
        objects = _helm.template("finops-operator", kube_namespace, values, tmp_path)
        (rule,) = _helm.of_kind(objects, "PrometheusRule")
        assert rule["metadata"]["labels"]["release"] == "prom"
        alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
        exported = {f.name for f in cost_metrics.budget_families([])}
        forecast = alerts["FinOpsBudgetForecastExceeded"]
        assert forecast["expr"] == (
            "finops_budget_forecast_micros / 1e6 > finops_budget_amount_micros / 1e6"
        )
        assert (forecast["for"], forecast["labels"]["severity"]) == ("3h", "page")
        spent = alerts["FinOpsBudgetExceeded"]
        assert (
            spent["expr"] == "finops_budget_spent_micros / 1e6 > finops_budget_amount_micros / 1e6"
        )
        used = {w for a in alerts.values() for w in a["expr"].split() if w.startswith("finops_")}
        assert used == exported
        assert "{{ $labels.budget }}" in forecast["annotations"]["summary"]
        crd = tmp_path / "prometheusrule-crd.yaml"
        crd.write_text(yaml.safe_dump(PROMETHEUS_RULE_CRD))
        kube.install_crds([crd])
        with kube.http() as client:
            resp = _helm.Api(client).apply(rule, dry_run=True)
        assert resp.status_code in (200, 201), resp.text

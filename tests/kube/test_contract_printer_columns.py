"""`kubectl get` columns and field selectors, read through the API server's table API."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest
from tests.contract_corpus import corpus
from tests.kube import _contract as api

from finops.api import models
from finops_devenv import controlplane

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _create(client: httpx.Client, file: str, namespace: str) -> dict[str, Any]:
    obj = api.placed(corpus.load(corpus.ROOT / "valid" / file).created, namespace)
    resp = api.create(client, obj)
    assert resp.status_code == 201, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _set_status(client: httpx.Client, stored: dict[str, Any], status: dict[str, Any]) -> None:
    body = copy.deepcopy(stored)
    body["status"] = status
    resp = client.put(f"{api.object_url(stored)}/status", json=body)
    assert resp.status_code == 200, resp.text


def _table(client: httpx.Client, kind: str, namespace: str, **params: str) -> dict[str, list[Any]]:
    """Column name -> the cells of that column, one per row."""
    url = api.collection_url(kind, namespace)
    resp = client.get(url, headers={"Accept": TABLE}, params=params)
    assert resp.status_code == 200, resp.text
    table = resp.json()
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    return {n: [row["cells"][i] for row in table["rows"]] for i, n in enumerate(names)}


def test_pricebook_shows_active_ready_and_currency(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    with kube.http() as client:
        stored = _create(client, "pricebook-quick-start.yaml", kube_namespace)
        _set_status(client, stored, {"active": True, "ready": "True"})
        columns = _table(client, "PriceBook", kube_namespace)
    assert list(columns)[:4] == ["Name", "Active", "Ready", "Currency"]
    assert (columns["Active"], columns["Ready"], columns["Currency"]) == ([True], ["True"], ["USD"])


def test_costjob_shows_type_interval_and_last_status(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    with kube.http() as client:
        stored = _create(client, "costjob-defaults.yaml", kube_namespace)
        _set_status(client, stored, {"lastExecutionStatus": "Success"})
        columns = _table(client, "CostJob", kube_namespace)
    assert columns["Type"] == ["ResourceCostCollection"]
    assert columns["Interval"] == ["24h"]
    assert columns["Last Status"] == ["Success"]


def test_offering_shows_ready(kube: controlplane.ControlPlane, kube_namespace: str) -> None:
    with kube.http() as client:
        stored = _create(client, "offering-quick-start.yaml", kube_namespace)
        _set_status(client, stored, {"ready": "False"})
        columns = _table(client, "Offering", kube_namespace)
    assert columns["Ready"] == ["False"]


def test_subscription_shows_ready_offering_and_activation(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    with kube.http() as client:
        stored = _create(client, "subscription-minimal.yaml", kube_namespace)
        _set_status(client, stored, {"ready": "True", "activatedAt": "2026-04-01T09:00:00Z"})
        columns = _table(client, "Subscription", kube_namespace)
    assert columns["Ready"] == ["True"]
    assert columns["Offering"] == ["platform-base"]
    assert columns["Activated"][0]  # rendered as an age, e.g. "250d"


def test_finopsprovider_shows_its_ready_condition(kube: controlplane.ControlPlane) -> None:
    with kube.http() as client:
        stored = _create(client, "finopsprovider-onprem.yaml", "")
        try:
            condition = {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "OpenCost configured",
                "lastTransitionTime": "2026-04-01T09:00:00Z",
            }
            _set_status(client, stored, {"conditions": [condition]})
            columns = _table(client, "FinOpsProvider", "")
        finally:
            api.delete_if_cluster_scoped(client, stored)
    assert columns["Ready"] == ["True"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [("status.ready=True", ["selected"]), ("status.compatibilityRoot=root-uid", ["other"])],
)
def test_subscriptions_can_be_selected_on_operator_status_fields(
    kube: controlplane.ControlPlane, kube_namespace: str, selector: str, expected: list[str]
) -> None:
    with kube.http() as client:
        for name, status in [
            ("selected", {"ready": "True"}),
            ("other", {"ready": "False", "compatibilityRoot": "root-uid"}),
        ]:
            obj = api.placed(
                corpus.load(corpus.ROOT / "valid" / "subscription-minimal.yaml").created,
                kube_namespace,
            )
            obj["metadata"]["name"] = name
            resp = api.create(client, obj)
            assert resp.status_code == 201, resp.text
            _set_status(client, resp.json(), status)
        url = api.collection_url("Subscription", kube_namespace)
        resp = client.get(url, params={"fieldSelector": selector})
    assert resp.status_code == 200, resp.text
    assert [i["metadata"]["name"] for i in resp.json()["items"]] == expected


def test_budget_shows_period_amount_spent_forecast_and_state(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    with kube.http() as client:
        stored = _create(client, "budget-monthly-thresholds.yaml", kube_namespace)
        _set_status(
            client,
            stored,
            {"spent": "1,234.50", "forecast": "2,600.00", "state": "ForecastExceeded"},
        )
        columns = _table(client, "Budget", kube_namespace)
    assert list(columns)[:7] == [
        "Name", "Period", "Amount", "Currency", "Spent", "Forecast", "State"
    ]  # fmt: skip
    assert [columns[c][0] for c in ("Period", "Amount", "Currency")] == ["Monthly", "2000", "USD"]
    assert [columns[c][0] for c in ("Spent", "Forecast", "State")] == [
        "1,234.50", "2,600.00", "ForecastExceeded"
    ]  # fmt: skip


def test_every_kind_answers_the_table_api(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    with kube.http() as client:
        for kind in models.KINDS:
            namespace = kube_namespace if kind.namespaced else ""
            assert "Age" in _table(client, kind.kind_name, namespace)

"""The gateway's FOCUS export as a real process: per-namespace and cluster-wide, authorised.

Reuses the ledger writer, the gateway launcher and the token helpers of test_gateway.py.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal
from typing import Any

import httpx
from tests.e2e.test_gateway import (
    RBAC,
    WINDOW,
    _auth,
    _gateway,
    _token_for,
    tenants,  # noqa: F401 - the fixture the tests below take
)

from finops.billing import focus
from finops_devenv import controlplane


def _grant_cluster_reader(kube: controlplane.ControlPlane, sa_ns: str, sa: str) -> None:
    with kube.http() as client:
        role = f"focus-reader-{sa_ns}"
        client.post(
            f"{RBAC}/clusterroles",
            json={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [
                    {
                        "apiGroups": ["finops.stakater.com"],
                        "resources": ["subscriptions"],
                        "verbs": ["get"],
                    }
                ],
            },
        ).raise_for_status()
        client.post(
            f"{RBAC}/clusterrolebindings",
            json={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
            },
        ).raise_for_status()


def _csv_rows(resp: httpx.Response) -> list[dict[str, str]]:
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/csv")
    assert "attachment" in resp.headers["content-disposition"]
    reader = csv.DictReader(io.StringIO(resp.text, newline=""))
    assert tuple(reader.fieldnames or ()) == focus.NAMES
    return list(reader)


def _billed_micros(rows: list[dict[str, str]]) -> int:
    return int(sum(Decimal(r["BilledCost"]) for r in rows).scaleb(6))


def test_a_tenant_exports_its_own_namespace_and_nothing_else(
    kube: controlplane.ControlPlane,
    ledger_dsn: str,
    tenants: dict[str, Any],  # noqa: F811
) -> None:
    a, b = tenants["a"], tenants["b"]
    reader = _auth(tenants["reader"])
    with _gateway(kube, ledger_dsn, auth=None) as url:
        every = {**WINDOW, "includeUnsettled": "true"}
        rows = _csv_rows(
            httpx.get(f"{url}/api/v1/namespaces/{a}/focus", params=every, headers=reader)
        )
        assert len(rows) == len(tenants["rows_a"])
        settled = _csv_rows(
            httpx.get(f"{url}/api/v1/namespaces/{a}/focus", params=WINDOW, headers=reader)
        )
        assert len(settled) == sum(c.finalized for c in tenants["rows_a"]) < len(rows)
        assert {r["x_Finalized"] for r in settled} == {"true"}
        assert {r["SubAccountId"] for r in rows} == {a}
        assert _billed_micros(rows) == sum(c.amount_micros for c in tenants["rows_a"])
        assert {r["ChargeCategory"] for r in rows} == {"Purchase", "Usage"}

        as_json = httpx.get(
            f"{url}/api/v1/namespaces/{a}/focus",
            params={**every, "format": "json"},
            headers=reader,
        )
        assert as_json.status_code == 200
        assert [r["BilledCost"] for r in as_json.json()] == [r["BilledCost"] for r in rows]

        other = httpx.get(f"{url}/api/v1/namespaces/{b}/focus", params=WINDOW, headers=reader)
        assert other.status_code == 403
        everything = httpx.get(f"{url}/api/v1/focus", params=WINDOW, headers=reader)
        assert everything.status_code == 403
        assert "cluster-wide" in everything.json()["error"]
        bad = httpx.get(
            f"{url}/api/v1/namespaces/{a}/focus", params={**WINDOW, "format": "xml"}, headers=reader
        )
        assert bad.status_code == 400
        assert "csv, json" in bad.json()["error"]


def test_without_a_token_the_export_is_unauthenticated(
    kube: controlplane.ControlPlane,
    ledger_dsn: str,
    tenants: dict[str, Any],  # noqa: F811
) -> None:
    with _gateway(kube, ledger_dsn, auth="true") as url:
        for path in (f"/api/v1/namespaces/{tenants['a']}/focus", "/api/v1/focus"):
            resp = httpx.get(url + path, params=WINDOW)
            assert resp.status_code == 401
            assert "token" in resp.json()["error"]


def test_a_cluster_wide_reader_exports_every_namespace(
    kube: controlplane.ControlPlane,
    ledger_dsn: str,
    tenants: dict[str, Any],  # noqa: F811
) -> None:
    auditor = _token_for(kube, tenants["a"], "auditor")
    _grant_cluster_reader(kube, tenants["a"], "auditor")
    with _gateway(kube, ledger_dsn, auth=None) as url:
        every = {**WINDOW, "includeUnsettled": "true"}
        rows = _csv_rows(httpx.get(f"{url}/api/v1/focus", params=every, headers=_auth(auditor)))
        assert {r["SubAccountId"] for r in rows} == {tenants["a"], tenants["b"]}
        written = tenants["rows_a"] + tenants["rows_b"]
        assert len(rows) == len(written)
        assert _billed_micros(rows) == sum(c.amount_micros for c in written)
        tags = json.loads(rows[0]["Tags"])
        assert tags["kubernetes.io/metadata.name"] == rows[0]["SubAccountId"]
        # The Subscription's own labels are tags too, beside its namespace's.
        assert {json.loads(r["Tags"])["app.kubernetes.io/part-of"] for r in rows} == {"web-shop"}

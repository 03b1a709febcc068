"""The FinOps gateway as a real process over a real ledger and kube-apiserver.

Charge rows are written with the store's own upserts; the gateway is started with the
control plane's admin kubeconfig and asked with ServiceAccount tokens from TokenRequest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from psycopg import conninfo
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger

from finops.store import mirror, pool
from finops_devenv import controlplane, ports

H0 = dt.datetime(2026, 4, 1, 9, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
WINDOW = {"from": "2026-04-01T00:00:00Z", "to": "2026-04-02T00:00:00Z"}
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def _write_ledger(dsn: str, namespace: str, uid: str) -> list[charge_rows.ChargeRow]:
    """Three hours of fee and CPU charges for Subscription `web` in `namespace`."""
    with pool.connect(dsn) as conn:
        offering = mirror.upsert_offering_version(
            conn,
            cluster="default",
            uid="off-uid",
            namespace="finops-operator-system",
            name="platform-base",
            generation=1,
            resource_version="1",
            spec={"pricing": {}},
        )
        version = mirror.upsert_subscription_version(
            conn,
            cluster="default",
            uid=uid,
            namespace=namespace,
            name="web",
            generation=1,
            resource_version="2",
            spec={"offeringRef": {"name": "platform-base"}},
            namespace_labels={"kubernetes.io/metadata.name": namespace},
            subscription_labels={"app.kubernetes.io/part-of": "web-shop"},
        )
        rows = []
        for n in range(3):
            quantity = Decimal("0.123457") * (n + 1)
            rows.append(
                charge_rows.ChargeRow(
                    "default",
                    uid,
                    H0 + n * HOUR,
                    "subscription",
                    Decimal(1),
                    40_000_000,
                    40_000_000,
                    "USD",
                    n < 2,
                    offering,
                    version,
                )
            )
            rows.append(
                charge_rows.ChargeRow(
                    "default",
                    uid,
                    H0 + n * HOUR,
                    "cpuHour",
                    quantity,
                    31_000,
                    int(quantity * 31_000),
                    "USD",
                    n < 2,
                    offering,
                    version,
                )
            )
        oracle_ledger.upsert(conn, rows)
        conn.commit()
    return rows


@contextlib.contextmanager
def _gateway(kube: controlplane.ControlPlane, dsn: str, *, auth: str | None) -> Iterator[str]:
    port = ports.free_port()
    env = {k: v for k, v in os.environ.items() if k != "ENABLE_AUTH"}
    env.update(KUBECONFIG=str(kube.kubeconfig), PG_CONNECTION_STRING=dsn, PORT=str(port))
    env["ALLOWED_ORIGINS"] = "https://console.example.com"
    if auth is not None:
        env["ENABLE_AUTH"] = auth
    proc = subprocess.Popen(
        [sys.executable, "-m", "finops.gateway.app"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "gateway did not become healthy"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        output = proc.communicate(timeout=15)[0].decode()
        assert dsn not in output
        password = conninfo.conninfo_to_dict(dsn).get("password")
        assert not password or str(password) not in output


def _token_for(kube: controlplane.ControlPlane, ns: str, name: str) -> str:
    with kube.http() as client:
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        assert client.post(f"/api/v1/namespaces/{ns}/serviceaccounts", json=sa).status_code == 201
        resp = client.post(
            f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        assert resp.status_code == 201, resp.text
        token: str = resp.json()["status"]["token"]
        return token


def _grant_subscription_reader(kube: controlplane.ControlPlane, ns: str, sa_ns: str) -> None:
    with kube.http() as client:
        client.post(
            f"{RBAC}/namespaces/{ns}/roles",
            json={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "subscription-reader"},
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
            f"{RBAC}/namespaces/{ns}/rolebindings",
            json={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "subscription-reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "subscription-reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "tenant-a", "namespace": sa_ns}],
            },
        ).raise_for_status()


def _expected_items(rows: list[charge_rows.ChargeRow]) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda c: (c.hour, c.source))
    return [
        {
            "subscriptionUid": c.subscription_uid,
            "hour": c.hour.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "source": c.source,
            "quantity": str(c.quantity),
            "unitPriceMicros": c.unit_price_micros,
            "amountMicros": c.amount_micros,
            "currency": c.currency,
            "finalized": c.finalized,
        }
        for c in ordered
    ]


@pytest.fixture
def tenants(
    kube: controlplane.ControlPlane, kube_namespace: str, ledger_dsn: str
) -> dict[str, Any]:
    """Namespaces A and B with charges each, and tokens: one may read A, one may read nothing."""
    ns_a, ns_b = kube_namespace, f"t-{uuid.uuid4().hex[:10]}"
    kube.create_namespace(ns_b)
    rows_a = _write_ledger(ledger_dsn, ns_a, "uid-a")
    rows_b = _write_ledger(ledger_dsn, ns_b, "uid-b")
    reader, stranger = _token_for(kube, ns_a, "tenant-a"), _token_for(kube, ns_a, "stranger")
    _grant_subscription_reader(kube, ns_a, ns_a)
    return {
        "a": ns_a,
        "b": ns_b,
        "rows_a": rows_a,
        "rows_b": rows_b,
        "reader": reader,
        "stranger": stranger,
    }


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_tenant_reads_exactly_its_own_charges_and_nothing_of_another_namespace(
    kube: controlplane.ControlPlane, ledger_dsn: str, tenants: dict[str, Any]
) -> None:
    a, b = tenants["a"], tenants["b"]
    with _gateway(kube, ledger_dsn, auth=None) as url:
        charges_a = f"{url}/api/v1/namespaces/{a}/subscriptions/web/charges"
        got = httpx.get(charges_a, params=WINDOW, headers=_auth(tenants["reader"]))
        assert got.status_code == 200, got.text
        assert got.json()["items"] == _expected_items(tenants["rows_a"])

        costs = httpx.get(
            f"{url}/api/v1/namespaces/{a}/costs", params=WINDOW, headers=_auth(tenants["reader"])
        )
        assert costs.status_code == 200, costs.text
        by_source = {i["source"]: i for i in costs.json()["items"]}
        for source in ("subscription", "cpuHour"):
            mine = [c for c in tenants["rows_a"] if c.source == source]
            assert by_source[source]["totalMicros"] == sum(c.amount_micros for c in mine)
            assert by_source[source]["finalizedMicros"] == sum(
                c.amount_micros for c in mine if c.finalized
            )
            assert by_source[source]["subscription"] == "web"

        other = f"{url}/api/v1/namespaces/{b}/subscriptions/web/charges"
        assert httpx.get(other, params=WINDOW, headers=_auth(tenants["reader"])).status_code == 403
        assert (
            httpx.get(
                f"{url}/api/v1/namespaces/{b}/costs",
                params=WINDOW,
                headers=_auth(tenants["reader"]),
            ).status_code
            == 403
        )
        assert (
            httpx.get(charges_a, params=WINDOW, headers=_auth(tenants["stranger"])).status_code
            == 403
        )


def test_requests_without_a_valid_token_are_unauthenticated(
    kube: controlplane.ControlPlane, ledger_dsn: str, tenants: dict[str, Any]
) -> None:
    costs = f"/api/v1/namespaces/{tenants['a']}/costs"
    with _gateway(kube, ledger_dsn, auth="true") as url:
        assert httpx.get(url + costs, params=WINDOW).status_code == 401
        bad = httpx.get(url + costs, params=WINDOW, headers=_auth("not-a-token"))
        assert bad.status_code == 401
        assert "token" in bad.json()["error"]


def test_a_malformed_or_oversized_window_is_a_bad_request_with_a_reason(
    kube: controlplane.ControlPlane, ledger_dsn: str, tenants: dict[str, Any]
) -> None:
    costs = f"/api/v1/namespaces/{tenants['a']}/costs"
    headers = _auth(tenants["reader"])
    cases = {
        "yesterday": "not an RFC3339 time",
        "2026-04-01T00:00:00": "UTC offset",
    }
    with _gateway(kube, ledger_dsn, auth=None) as url:
        for bad_from, reason in cases.items():
            got = httpx.get(url + costs, params={**WINDOW, "from": bad_from}, headers=headers)
            assert got.status_code == 400
            assert reason in got.json()["error"]
        backwards = {"from": WINDOW["to"], "to": WINDOW["from"]}
        assert httpx.get(url + costs, params=backwards, headers=headers).status_code == 400
        too_long = {"from": "2025-01-01T00:00:00Z", "to": "2026-04-01T00:00:00Z"}
        got = httpx.get(url + costs, params=too_long, headers=headers)
        assert got.status_code == 400
        assert "366 days" in got.json()["error"]
        missing = httpx.get(url + costs, params={"to": WINDOW["to"]}, headers=headers)
        assert missing.status_code == 400


def test_with_auth_disabled_every_namespace_is_readable_without_a_token(
    kube: controlplane.ControlPlane, ledger_dsn: str, tenants: dict[str, Any]
) -> None:
    with _gateway(kube, ledger_dsn, auth="false") as url:
        for ns, rows in ((tenants["a"], tenants["rows_a"]), (tenants["b"], tenants["rows_b"])):
            got = httpx.get(
                f"{url}/api/v1/namespaces/{ns}/subscriptions/web/charges", params=WINDOW
            )
            assert got.status_code == 200, got.text
            assert got.json()["items"] == _expected_items(rows)


def test_cors_allows_only_the_configured_origins(
    kube: controlplane.ControlPlane, ledger_dsn: str, tenants: dict[str, Any]
) -> None:
    path = f"/api/v1/namespaces/{tenants['a']}/costs"
    with _gateway(kube, ledger_dsn, auth="false") as url:
        allowed = httpx.get(
            url + path, params=WINDOW, headers={"Origin": "https://console.example.com"}
        )
        assert allowed.headers["access-control-allow-origin"] == "https://console.example.com"
        other = httpx.get(url + path, params=WINDOW, headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers

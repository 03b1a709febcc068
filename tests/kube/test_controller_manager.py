"""The manager process: probes, metrics, JSON logs, required environment, graceful stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import psycopg
from tests.kube.test_controller_support import ControllerProcess, running_controller

from finops.store import migrate
from finops_devenv import controlplane


def test_probes_and_metrics_answer_and_logs_are_json(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    with running_controller(kube, kube_namespace) as proc:
        base = f"http://127.0.0.1:{proc.probe_port}"
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/readyz").status_code == 200
        metrics = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics")
        assert metrics.status_code == 200
        assert "controller_runtime_reconcile_total" in metrics.text
        assert "workqueue_depth" in metrics.text
    lines = [line for line in proc.logs().splitlines() if line.strip()]
    assert lines and all(json.loads(line)["msg"] for line in lines)
    assert any(json.loads(line)["msg"] == "manager stopped" for line in lines)


def test_missing_required_environment_exits_non_zero_naming_the_variable(
    kube: controlplane.ControlPlane,
) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "KUBECONFIG": str(kube.kubeconfig),
        "POSTGRES_CONNECTION_STRING": "postgresql://x",
        "OPENCOST_CONNECTION_STRING": "http://oc:9003",
        "OPENCOST_DEPLOYMENT_NAME": "oc",
    }
    done = subprocess.run(
        [sys.executable, "-m", "finops.operator", "--mode=controller", "--skipDBConnection"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "OPENCOST_DEPLOYMENT_NAMESPACE" in done.stderr


def test_migrations_are_applied_at_start_without_skip_db_connection(
    kube: controlplane.ControlPlane, kube_namespace: str, pg_dsn: str
) -> None:
    env = {"POSTGRES_CONNECTION_STRING": pg_dsn}
    with (
        running_controller(kube, kube_namespace, env=env, skip_db=False),
        psycopg.connect(pg_dsn) as conn,
    ):
        rows = conn.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()
    assert [r[0] for r in rows] == [m.version for m in migrate.load()]


def test_an_unreachable_database_stops_the_start(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    proc = ControllerProcess(
        kube,
        namespace=kube_namespace,
        env={"POSTGRES_CONNECTION_STRING": "postgresql://x:y@127.0.0.1:1/none?connect_timeout=2"},
        skip_db=False,
    )
    proc.proc = subprocess.Popen(
        proc.args, env=proc.env, stdout=proc.log_fd, stderr=subprocess.STDOUT
    )
    assert proc.proc.wait(timeout=60) != 0
    assert "database migrations failed" in proc.logs()


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


def test_metrics_are_secure_by_default_and_only_for_authorised_callers(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    ns = kube_namespace
    reader, stranger = _token_for(kube, ns, "scraper"), _token_for(kube, ns, "stranger")
    role = f"finops-metrics-reader-{ns}"
    with kube.http() as client:
        rbac = "/apis/rbac.authorization.k8s.io/v1"
        client.post(
            f"{rbac}/clusterroles",
            json={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
            },
        ).raise_for_status()
        client.post(
            f"{rbac}/clusterrolebindings",
            json={
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": ns}],
            },
        ).raise_for_status()
    # The support helper passes --metrics-secure=false; the last flag wins, as with Go flags.
    with running_controller(kube, ns, args=["--metrics-secure"]) as proc:
        url = f"https://127.0.0.1:{proc.metrics_port}/metrics"

        def scrape(token: str | None) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.get(url, verify=False, headers=headers, timeout=10)

        assert scrape(None).status_code == 401
        assert scrape("not-a-token").status_code == 401
        assert scrape(stranger).status_code == 403
        allowed = scrape(reader)
        assert allowed.status_code == 200
        assert "controller_runtime_reconcile_total" in allowed.text
        try:
            httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=3)
        except httpx.HTTPError:
            pass
        else:
            raise AssertionError("plain HTTP must not be served with --metrics-secure")
    assert reader not in proc.logs() and stranger not in proc.logs()

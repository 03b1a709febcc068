"""The manager process: probes, metrics, JSON logs, required environment, graceful stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import psycopg
from tests.kube.test_controller_support import ControllerProcess, running_controller

from finops.devenv import controlplane
from finops.store import migrate


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


def test_metrics_secure_serves_tls(kube: controlplane.ControlPlane, kube_namespace: str) -> None:
    with running_controller(kube, kube_namespace, args=["--metrics-secure"]) as proc:
        url = f"https://127.0.0.1:{proc.metrics_port}/metrics"
        assert httpx.get(url, verify=False).status_code == 200
        try:
            httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=3)
        except httpx.HTTPError:
            pass
        else:
            raise AssertionError("plain HTTP must not be served with --metrics-secure")

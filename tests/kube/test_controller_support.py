"""Run the controller as a real process against the test API server, and poll for state.

Shared by the tests/kube/test_controller_*.py files (this module holds no tests itself).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx

from finops_devenv import controlplane, ports

T = TypeVar("T")

FINOPS = "/apis/finops.stakater.com/v1alpha1"

# Every controller's log goes in one directory per test process, removed when the process
# exits: a test reads or prints the log while it runs, and a session starts dozens of them.
_LOGS = tempfile.TemporaryDirectory(prefix="finops-controller-logs-")


def wait_for(
    probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2, what: str = ""
) -> T:
    """Poll until `probe` returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or probe}; last={last!r}")


class ControllerProcess:
    """`python -m finops.operator --mode=controller` with its own ports and log file."""

    def __init__(
        self,
        kube: controlplane.ControlPlane,
        *,
        namespace: str,
        env: dict[str, str] | None = None,
        args: list[str] | None = None,
        skip_db: bool = True,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.probe_port = ports.free_port()
        self.metrics_port = ports.free_port()
        self.webhook_port = ports.free_port()
        self.log_fd, log_name = tempfile.mkstemp(
            prefix="controller-", suffix=".log", dir=_LOGS.name
        )
        self.log_path = pathlib.Path(log_name)
        base = {
            "PATH": os.environ.get("PATH", ""),
            "KUBECONFIG": str(kube.kubeconfig),
            "POD_NAMESPACE": namespace,
            "POSTGRES_CONNECTION_STRING": "postgresql://finops:secret@db.invalid:5432/finops",
            "OPENCOST_CONNECTION_STRING": "http://opencost.invalid:9003/",
            "OPENCOST_DEPLOYMENT_NAME": "finops-operator-opencost",
            "OPENCOST_DEPLOYMENT_NAMESPACE": namespace,
            "OPERATOR_IMAGE": "ghcr.io/example/finops-operator:test",
            "FINOPS_RESYNC_SECONDS": "3",
            # Webhooks need a certificate: off unless a test asks (tests/kube/test_webhooks.py),
            # and on a port of this process's own so replicas never clash on :9443.
            "ENABLE_WEBHOOKS": "false",
            "WEBHOOK_BIND_ADDRESS": f"127.0.0.1:{self.webhook_port}",
        }
        base.update(env or {})
        self.env = base
        self.args = [
            sys.executable,
            "-m",
            "finops.operator",
            "--mode=controller",
            *(["--skipDBConnection"] if skip_db else []),
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            # Plain HTTP so tests can scrape; the secure default has its own test.
            "--metrics-secure=false",
            *(args or []),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ControllerProcess:
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=self.log_fd, stderr=subprocess.STDOUT
        )
        wait_for(self.healthy, timeout=30, what="controller /healthz")
        return self

    def healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"controller exited {self.proc.returncode}:\n{self.logs()}")
        try:
            return (
                httpx.get(f"http://127.0.0.1:{self.probe_port}/healthz", timeout=1).status_code
                == 200
            )
        except httpx.HTTPError:
            return False

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


@contextlib.contextmanager
def running_controller(
    kube: controlplane.ControlPlane, namespace: str, **kwargs: Any
) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(kube, namespace=namespace, **kwargs).start()
    try:
        yield proc
    finally:
        code = proc.stop()
        print(proc.logs()[-4000:])
        assert code == 0, f"controller exited {code}"


def get(kube: controlplane.ControlPlane, path: str) -> dict[str, Any] | None:
    """GET as admin; 404 is None; a fresh server's 429 (storage initialising) is retried."""
    with kube.http() as client:
        resp = client.get(path)
        deadline = time.monotonic() + 30
        while resp.status_code == 429 and time.monotonic() < deadline:
            time.sleep(0.2)
            resp = client.get(path)
    if resp.status_code == 404:
        return None
    resp.raise_for_status()
    result: dict[str, Any] = resp.json()
    return result


def create(kube: controlplane.ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with kube.http() as client:
        resp = client.post(path, json=body)
    assert resp.status_code in (200, 201), resp.text
    result: dict[str, Any] = resp.json()
    return result


def merge_patch(kube: controlplane.ControlPlane, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with kube.http() as client:
        resp = client.patch(
            path, json=body, headers={"Content-Type": "application/merge-patch+json"}
        )
    assert resp.status_code == 200, resp.text
    result: dict[str, Any] = resp.json()
    return result


def delete(kube: controlplane.ControlPlane, path: str) -> None:
    with kube.http() as client:
        resp = client.delete(path)
    assert resp.status_code in (200, 202, 404), resp.text


def events_for(kube: controlplane.ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    body = get(kube, f"/api/v1/namespaces/{namespace}/events") or {}
    return [e for e in body.get("items", []) if e["involvedObject"].get("name") == name]


def deployment(name: str, namespace: str) -> dict[str, Any]:
    """A Deployment that never rolls out (no controller-manager) but counts its writes."""
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "opencost", "image": "opencost:test"}]},
            },
        },
    }


def reconciles(proc: ControllerProcess, controller: str) -> float:
    """controller_runtime_reconcile_total summed over results, read from /metrics."""
    text = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics").text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("controller_runtime_reconcile_total{") and (
            f'controller="{controller}"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_more_reconciles(proc: ControllerProcess, controller: str, count: int = 2) -> None:
    """Block until `controller` has finished `count` more passes (resync is 3 s in tests)."""
    start = reconciles(proc, controller)
    wait_for(
        lambda: reconciles(proc, controller) >= start + count,
        timeout=30,
        what=f"{count} more {controller} reconciles",
    )


def delete_all_pricebooks(kube: controlplane.ControlPlane) -> None:
    """Controllers elect among every PriceBook of the cluster: start from none."""
    for item in (get(kube, f"{FINOPS}/pricebooks") or {}).get("items", []):
        meta = item["metadata"]
        delete(kube, f"{FINOPS}/namespaces/{meta['namespace']}/pricebooks/{meta['name']}")
    wait_for(lambda: not (get(kube, f"{FINOPS}/pricebooks") or {}).get("items"), what="no books")

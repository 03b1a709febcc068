"""2,000 Subscriptions in 200 families, created at once, until every one is Ready.

Why next to a raw create: how long convergence takes depends on the machine and on the API
server far more than on our code, so the same Subscriptions are first created with no
controller running (the API server's raw create time, the floor for "everything exists"),
then deleted, then created again with the controller up; the second clock stops when the
last one reports `Ready=True`. Both use the same concurrent client, in the same run.

Each family is the docs' tree (bundle; vm, disk, monitor below it; alert below monitor;
spare below alert) plus four add-ons under the bundle: disk, monitor and alert need vm's
coverage, so a family converges in dependency order whatever order the creates land in.

    .venv/bin/python -m benchmarks.convergence [--families 200 --workers 2 --concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx

from finops.devenv import controlplane

CRDS = pathlib.Path(__file__).resolve().parents[1] / "deploy" / "crds"
GROUP = "/apis/finops.stakater.com/v1alpha1"
API_VERSION = "finops.stakater.com/v1alpha1"
FEE = {"period": "1h", "tickAlignment": "ActivatedAt", "priceMicros": 30000000}
OFFERINGS = {
    "platform-core": [],
    "vm-standard": [],
    "vm-disk": ["vm-standard"],
    "monitoring": ["vm-standard"],
    "alerting": ["vm-standard"],
    "addon": [],
}
FAMILY = [  # (suffix, offering, parent suffix)
    ("bundle", "platform-core", None),
    ("vm", "vm-standard", "bundle"),
    ("disk", "vm-disk", "bundle"),
    ("monitor", "monitoring", "bundle"),
    ("alert", "alerting", "monitor"),
    ("spare", "vm-standard", "alert"),
    ("addon-1", "addon", "bundle"),
    ("addon-2", "addon", "bundle"),
    ("addon-3", "addon", "bundle"),
    ("addon-4", "addon", "bundle"),
]


def ref(name: str, ns: str) -> dict[str, str]:
    return {"name": name, "namespace": ns}


def offering(name: str, ns: str, requires: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"pricing": {"subscriptionFee": FEE}}
    if requires:
        spec["compatibility"] = {"requiredOfferings": [ref(r, ns) for r in requires]}
    return {"apiVersion": API_VERSION, "kind": "Offering", "metadata": {"name": name}, "spec": spec}


def subscriptions(ns: str, families: int) -> list[dict[str, Any]]:
    bodies = []
    for f in range(families):
        for suffix, offer, parent in FAMILY:
            spec: dict[str, Any] = {"offeringRef": ref(offer, ns)}
            if parent is not None:
                spec["parent"] = {"subscriptionRef": ref(f"f{f}-{parent}", ns)}
            bodies.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "Subscription",
                    "metadata": {"name": f"f{f}-{suffix}"},
                    "spec": spec,
                }
            )
    random.Random(6).shuffle(bodies)  # creates land in no particular family order
    return bodies


async def create_all(
    cp: controlplane.ControlPlane, path: str, bodies: list[dict[str, Any]], concurrency: int
) -> float:
    """POST every body with `concurrency` requests in flight; seconds taken."""
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(
        base_url=cp.server,
        verify=cp.ssl_context(),
        timeout=60,
        limits=httpx.Limits(max_connections=concurrency),
    ) as client:

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                resp = await client.post(path, json=body)
                resp.raise_for_status()

        started = time.monotonic()
        await asyncio.gather(*(one(b) for b in bodies))
        return time.monotonic() - started


def ready_count(cp: controlplane.ControlPlane, ns: str) -> int:
    with cp.http(timeout=60) as client:
        items = client.get(f"{GROUP}/namespaces/{ns}/subscriptions").json()["items"]
    return sum(1 for s in items if (s.get("status") or {}).get("ready") == "True")


def wait_offerings_ready(cp: controlplane.ControlPlane, ns: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with cp.http() as client:
            items = client.get(f"{GROUP}/namespaces/{ns}/offerings").json()["items"]
        if sum(1 for o in items if (o.get("status") or {}).get("ready") == "True") == len(
            OFFERINGS
        ):
            return
        time.sleep(0.2)
    raise RuntimeError("offerings did not become ready")


def start_controller(
    cp: controlplane.ControlPlane, ns: str, workers: int
) -> subprocess.Popen[bytes]:
    probe = controlplane.free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "KUBECONFIG": str(cp.kubeconfig),
        "POD_NAMESPACE": ns,
        "POSTGRES_CONNECTION_STRING": "postgresql://unused@db.invalid/finops",
        "OPENCOST_CONNECTION_STRING": "http://opencost.invalid:9003/",
        "OPENCOST_DEPLOYMENT_NAME": "opencost",
        "OPENCOST_DEPLOYMENT_NAMESPACE": ns,
        "ENABLE_WEBHOOKS": "false",
        "FINOPS_RESYNC_SECONDS": "600",
        "FINOPS_WORKERS": str(workers),
    }
    log_fd, log_name = tempfile.mkstemp(prefix="convergence-controller-", suffix=".log")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "finops.operator",
            "--mode=controller",
            "--skipDBConnection",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            "--metrics-bind-address=0",
        ],
        env=env,
        stdout=log_fd,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{probe}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"controller did not start; log in {log_name}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    with controlplane.running(CRDS) as cp:
        ns = "convergence"
        cp.create_namespace(ns)
        subs_path = f"{GROUP}/namespaces/{ns}/subscriptions"
        bodies = subscriptions(ns, args.families)

        # 1. The floor: the API server creating the very same objects, nobody reconciling.
        raw = asyncio.run(create_all(cp, subs_path, bodies, args.concurrency))
        with cp.http(timeout=120) as client:
            client.delete(subs_path).raise_for_status()  # no finalizers yet: gone at once

        # 2. The controller up, its Offerings ready, then everything at once.
        proc = start_controller(cp, ns, args.workers)
        try:
            with cp.http() as client:
                for name, requires in OFFERINGS.items():
                    client.post(
                        f"{GROUP}/namespaces/{ns}/offerings", json=offering(name, ns, requires)
                    ).raise_for_status()
            wait_offerings_ready(cp, ns)
            started = time.monotonic()
            created = asyncio.run(create_all(cp, subs_path, bodies, args.concurrency))
            deadline = started + args.timeout
            ready = 0
            while ready < len(bodies):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {ready}/{len(bodies)} Ready after {args.timeout}s")
                time.sleep(0.5)
                ready = ready_count(cp, ns)
            converged = time.monotonic() - started
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    n = len(bodies)
    print(f"subscriptions: {n} in {args.families} families; controller workers: {args.workers}")
    print(f"raw API create (no controller):   {raw:8.2f} s  ({n / raw:7.0f} creates/s)")
    print(f"create with controller running:   {created:8.2f} s")
    print(f"create -> all Ready (controller): {converged:8.2f} s  ({n / converged:7.0f} /s)")
    print(f"ratio converged/raw create:       {converged / raw:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

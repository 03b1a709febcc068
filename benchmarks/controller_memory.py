"""The controller's resident memory with 2.5k/5k/10k Subscriptions and 250/500/1k Offerings.

Issue #15, target 4: RSS <= 250 MB with 10k Subscriptions and 1k Offerings watched. The real
`finops-operator --mode=controller` process runs against a real kube-apiserver; objects are
spread over namespaces of 100 Subscriptions (ten families of the convergence benchmark's
shape) and 10 Offerings each, and carry kubectl's last-applied annotation, as manifests
applied with `kubectl apply` do.

Why these baselines, all in the same run: an RSS alone mixes the interpreter and libraries
with what the watch stores hold. So the same controller first runs with zero objects (the
floor), and at each size it runs three times: once to reconcile the new objects (the
converging run: writes, Events, its peak), then, everything settled, once as shipped (the
projected watch stores) and once with the projection switched off (`_full_store_controller`:
the same process keeping every object exactly as the API server sent it). Both settled runs
list, watch and reconcile the same objects, so their difference is what the projection saves.
A controller is "settled" when every Subscription and Offering is Ready, it has reconciled
at least once per object, and its work queue stayed empty for two scrapes.

    .venv/bin/python -m benchmarks.controller_memory [--namespaces 100 --concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Any, cast

import httpx
from benchmarks import convergence

from finops.controller import watched
from finops_devenv import controlplane, ports

CRDS = pathlib.Path(__file__).resolve().parents[1] / "deploy" / "crds"
GROUP = "/apis/finops.stakater.com/v1alpha1"
API_VERSION = "finops.stakater.com/v1alpha1"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
OFFERINGS = {  # 10 per namespace
    "platform-core": [],
    "vm-standard": [],
    "vm-disk": ["vm-standard"],
    "monitoring": ["vm-standard"],
    "alerting": ["vm-standard"],
    "backup": [],
    "addon-1": [],
    "addon-2": [],
    "addon-3": [],
    "addon-4": [],
}
FAMILY = [  # (suffix, offering, parent suffix): 10 per family, 10 families per namespace
    ("bundle", "platform-core", None),
    ("vm", "vm-standard", "bundle"),
    ("disk", "vm-disk", "bundle"),
    ("monitor", "monitoring", "bundle"),
    ("alert", "alerting", "monitor"),
    ("backup", "backup", "vm"),
    ("addon-1", "addon-1", "bundle"),
    ("addon-2", "addon-2", "bundle"),
    ("addon-3", "addon-3", "bundle"),
    ("addon-4", "addon-4", "bundle"),
]
FAMILIES_PER_NS = 10
MIB = 1024 * 1024
TARGET_MB = 250


def applied(body: dict[str, Any]) -> dict[str, Any]:
    """The body with the annotation `kubectl apply` stores: the manifest as applied."""
    meta = body["metadata"]
    manifest = {**body, "metadata": {**meta, "namespace": meta["namespace"]}}
    meta["annotations"] = {LAST_APPLIED: json.dumps(manifest, separators=(",", ":")) + "\n"}
    return body


def ref(name: str, ns: str) -> dict[str, str]:
    return convergence.ref(name, ns)


def offering(name: str, ns: str, requires: list[str]) -> dict[str, Any]:
    """convergence's Offering, as `kubectl apply` would leave it in a labelled catalog."""
    body = convergence.offering(name, ns, requires)
    body["metadata"] = {
        "name": name,
        "namespace": ns,
        "labels": {"app.kubernetes.io/part-of": "catalog"},
    }
    return applied(body)


def subscription(
    ns: str, family: int, suffix: str, offer: str, parent: str | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"offeringRef": ref(offer, ns)}
    if parent is not None:
        spec["parent"] = {"subscriptionRef": ref(f"f{family}-{parent}", ns)}
    meta = {"name": f"f{family}-{suffix}", "namespace": ns, "labels": {"team": ns}}
    return applied(
        {"apiVersion": API_VERSION, "kind": "Subscription", "metadata": meta, "spec": spec}
    )


def namespace_objects(ns: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    offers = [offering(n, ns, r) for n, r in OFFERINGS.items()]
    subs = [
        subscription(ns, f, suffix, offer, parent)
        for f in range(FAMILIES_PER_NS)
        for suffix, offer, parent in FAMILY
    ]
    return offers, subs


async def post_all(
    cp: controlplane.ControlPlane, items: list[tuple[str, dict[str, Any]]], concurrency: int
) -> float:
    """POST every (path, body) with `concurrency` requests in flight; seconds taken."""
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(
        base_url=cp.server,
        verify=cp.ssl_context(),
        timeout=120,
        limits=httpx.Limits(max_connections=concurrency),
    ) as client:

        async def one(path: str, body: dict[str, Any]) -> None:
            async with gate:
                resp = await client.post(path, json=body)
                if resp.status_code != 409:
                    resp.raise_for_status()

        started = time.monotonic()
        await asyncio.gather(*(one(p, b) for p, b in items))
        return time.monotonic() - started


def create_namespaces(cp: controlplane.ControlPlane, names: list[str], concurrency: int) -> None:
    """The namespaces, then their Offerings, then their Subscriptions (all concurrently)."""
    for ns in names:
        cp.create_namespace(ns, labels={"finops.example/tenant": ns})
    offers: list[tuple[str, dict[str, Any]]] = []
    subs: list[tuple[str, dict[str, Any]]] = []
    for ns in names:
        o, s = namespace_objects(ns)
        offers += [(f"{GROUP}/namespaces/{ns}/offerings", b) for b in o]
        subs += [(f"{GROUP}/namespaces/{ns}/subscriptions", b) for b in s]
    asyncio.run(post_all(cp, offers, concurrency))
    asyncio.run(post_all(cp, subs, concurrency))


def ready_counts(cp: controlplane.ControlPlane) -> tuple[int, int, int, int]:
    """(Subscriptions, Ready ones, Offerings, Ready ones) across the cluster."""
    counts = []
    with cp.http(timeout=120) as client:
        for plural in ("subscriptions", "offerings"):
            items = client.get(f"{GROUP}/{plural}").json()["items"]
            ready = sum(1 for o in items if (o.get("status") or {}).get("ready") == "True")
            counts += [len(items), ready]
    return counts[0], counts[1], counts[2], counts[3]


class Controller:
    """One controller process (`module` is `finops.operator` or the full-store variant)."""

    def __init__(self, cp: controlplane.ControlPlane, ns: str, module: str) -> None:
        self.probe = ports.free_port()
        self.metrics = ports.free_port()
        env = convergence.controller_env(cp, ns, resync_seconds=3600)
        env["FINOPS_WORKERS"] = "4"
        self.log_fd, self.log_name = tempfile.mkstemp(prefix="memory-controller-", suffix=".log")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                module,
                "--mode=controller",
                "--skipDBConnection",
                f"--health-probe-bind-address=127.0.0.1:{self.probe}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics}",
                "--metrics-secure=false",
            ],
            env=env,
            stdout=self.log_fd,
            stderr=subprocess.STDOUT,
        )

    def scrape(self) -> dict[str, float]:
        """The work-queue depth and the reconciles done per controller, from /metrics."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics}/metrics", timeout=10).text
        found: dict[str, float] = {"depth": 0.0, "offering": 0.0, "subscription": 0.0}
        for line in text.splitlines():
            if line.startswith('workqueue_depth{name="finops"}'):
                found["depth"] = float(line.split()[-1])
            match = re.match(r'controller_runtime_reconcile_total\{controller="(\w+)"', line)
            if match and match.group(1) in found:
                found[match.group(1)] += float(line.split()[-1])
        return found

    def memory_kib(self) -> tuple[int, int]:
        """(VmRSS, VmHWM) in KiB, from /proc as the soak test reads them."""
        fields: dict[str, int] = {}
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    fields[line.split(":")[0]] = int(line.split()[1])
        return fields["VmRSS"], fields["VmHWM"]

    def settle(self, cp: controlplane.ControlPlane, subs: int, offers: int, timeout: float) -> None:
        """Until every object is Ready, each was reconciled once and the queue stayed empty."""
        deadline = time.monotonic() + timeout
        quiet = 0
        while quiet < 2:
            if self.proc.poll() is not None:
                raise RuntimeError(f"controller exited; log in {self.log_name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not settled after {timeout}s; log in {self.log_name}")
            time.sleep(1.0)
            try:
                seen = self.scrape()
            except httpx.HTTPError:
                continue
            done = seen["subscription"] >= subs and seen["offering"] >= offers
            if not done or seen["depth"] > 0:
                quiet = 0
                continue
            n, ready, o, o_ready = ready_counts(cp)
            quiet = quiet + 1 if (n, ready, o, o_ready) == (subs, subs, offers, offers) else 0

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.log_fd)


def measure(
    cp: controlplane.ControlPlane, module: str, subs: int, offers: int, timeout: float
) -> tuple[int, int]:
    """(VmRSS, VmHWM) KiB of one controller once settled, sampled after 3 s of idling."""
    ctl = Controller(cp, "finops-system", module)
    try:
        ctl.settle(cp, subs, offers, timeout)
        time.sleep(3.0)
        memory = ctl.memory_kib()
    finally:
        ctl.stop()
    # Kept when the controller failed (the error names it), removed once it settled.
    os.unlink(ctl.log_name)
    return memory


def traced_bytes(raws: list[str], keep: Any) -> float:
    """Bytes per object tracemalloc sees held after decoding each and keeping `keep(obj)`."""
    tracemalloc.start()
    held = [keep(json.loads(raw)) for raw in raws]
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del held
    return current / len(raws)


def where_it_goes(cp: controlplane.ControlPlane, sample: int = 1000) -> None:
    """Per Subscription as the API server sends it (each decoded alone, as watch events are),
    by part, and as the store keeps it: what the RSS difference is made of."""
    with cp.http(timeout=120) as client:
        items = client.get(f"{GROUP}/subscriptions", params={"limit": sample}).json()["items"]
    raws = [json.dumps(i) for i in items]

    def meta(o: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], o["metadata"])

    parts = [
        ("whole object", lambda o: o),
        ("  metadata.managedFields", lambda o: meta(o).get("managedFields")),
        (
            "  last-applied annotation",
            lambda o: (meta(o).get("annotations") or {}).get(LAST_APPLIED),
        ),
        ("  status", lambda o: o.get("status")),
        ("  spec", lambda o: o.get("spec")),
        ("as the watch store keeps it", watched.hierarchy_object),
    ]
    print(f"bytes per Subscription held (tracemalloc, {len(raws)} sampled once settled):")
    for label, keep in parts:
        print(f"  {label:<30} {traced_bytes(raws, keep):8.0f} B")


def mib(kib: int) -> float:
    return kib / 1024


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--namespaces", type=int, default=100, help="at the largest size (x4)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--timeout", type=float, default=1800.0)
    args = p.parse_args(argv)
    sizes = [max(1, args.namespaces * k // 4) for k in (1, 2, 4)]
    projected, full = "finops.operator", "benchmarks._full_store_controller"
    with controlplane.running(CRDS) as cp:
        cp.create_namespace("finops-system")
        empty_rss, empty_hwm = measure(cp, projected, 0, 0, args.timeout)
        print(f"zero objects: VmRSS {mib(empty_rss):6.1f} MiB  VmHWM {mib(empty_hwm):6.1f} MiB")
        rows: list[tuple[Any, ...]] = []
        for k, count in zip((1, 2, 4), sizes, strict=True):
            made = len(rows[-1][1]) if rows else 0
            names = [f"tenant-{i:04d}" for i in range(count)]
            started = time.monotonic()
            create_namespaces(cp, names[made:], args.concurrency)
            created = time.monotonic() - started
            subs, offers = count * FAMILIES_PER_NS * len(FAMILY), count * len(OFFERINGS)
            conv = measure(cp, projected, subs, offers, args.timeout)
            settled = measure(cp, projected, subs, offers, args.timeout)
            baseline = measure(cp, full, subs, offers, args.timeout)
            rows.append((k, names, subs, offers, conv, settled, baseline))
            report_size(k, subs, offers, created, empty_rss, conv, settled, baseline)
        where_it_goes(cp)
    return summary(rows, empty_rss)


def report_size(
    k: int,
    subs: int,
    offers: int,
    created: float,
    empty: int,
    conv: tuple[int, int],
    settled: tuple[int, int],
    full: tuple[int, int],
) -> None:
    print(f"x{k}: {subs:,} Subscriptions, {offers:,} Offerings (created in {created:.0f} s)")
    for label, (rss, hwm) in (
        ("converging run (projected)", conv),
        ("settled, projected stores ", settled),
        ("settled, full objects     ", full),
    ):
        per = (rss - empty) * 1024 / (subs + offers)
        print(
            f"  {label}  VmRSS {mib(rss):6.1f} MiB  VmHWM {mib(hwm):6.1f} MiB"
            f"  {per:7.0f} B per object above zero objects"
        )
    ratio = (full[0] - empty) / max(1, settled[0] - empty)
    print(f"  ratio full / projected (RSS above zero objects): {ratio:.2f}")


def summary(rows: list[Any], empty: int) -> int:
    _, _, subs, offers, conv, settled, full = rows[-1]
    worst = max(conv[0], settled[0])
    peak = max(conv[1], settled[1])
    first = rows[0]
    growth = (settled[0] - empty) / max(1, first[5][0] - empty)
    print()
    print(f"at {subs:,} Subscriptions + {offers:,} Offerings:")
    print(f"  controller VmRSS (worst of converging/settled): {mib(worst):6.1f} MiB")
    print(f"  controller VmHWM (worst of converging/settled): {mib(peak):6.1f} MiB")
    print(f"  full objects stored VmRSS:                      {mib(full[0]):6.1f} MiB")
    print(f"  zero objects VmRSS:                             {mib(empty):6.1f} MiB")
    print(f"  growth x4/x1 of RSS above zero objects:         {growth:6.2f}")
    verdict = "met" if worst * 1024 <= TARGET_MB * 1_000_000 else "not met"
    print(f"  target VmRSS <= {TARGET_MB} MB ({TARGET_MB * 1e6 / MIB:.1f} MiB):        {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""5,000 Subscriptions in 500 families, created at once, until every one is Ready.

Why next to a floor: how long convergence takes depends on the machine and on the API server
far more than on our code, so the same Subscriptions are first written with no controller
running by a bare client doing, for each one, exactly the writes the controller must: the
create, the finalizer PATCH (a JSON patch testing `resourceVersion`, as the controller's),
the activating status write (`ready`, `activatedAt`, the `Ready` and `Active` conditions) and
the `Activated` Event, each Subscription's four in order, all Subscriptions concurrently.
Then, on a second fresh control plane, they are created with the controller up. Both clocks
stop when a watch has seen the last one report `Ready=True` (one watch each, so waiting costs
the API server the same small amount in both), and each phase runs second on its control
plane, after the same warm-up round: the raw create of the same Subscriptions (timed for
orientation), then their deletion. Both use the same concurrent client, in the same run; it
is httpx2, the controller's own HTTP stack.

Each family is the docs' tree (bundle; vm, disk, monitor below it; alert below monitor;
spare below alert) plus four add-ons under the bundle: disk, monitor and alert need vm's
coverage, so a family converges in dependency order whatever order the creates land in.

Profile printed with each size: the API server's own request counters (`apiserver_request_total`
by verb, resource and code, less the benchmark's own creates) during the converge phase, and
the controller's reconciles per Subscription (its `controller_runtime_reconcile_total`).
Growth: sizes ×1, ×2, ×4 of `--families / 4`, each phase of each size on its own control plane.
The machine's speed drifts by a tenth or more within minutes, so every size runs in three
interleaved trials and the one with the median ratio is printed whole.

    .venv/bin/python -m benchmarks.convergence                 # 125/250/500 families, 3 trials
    .venv/bin/python -m benchmarks.convergence --families 40 --scales 1 --trials 1  # a look
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import datetime as dt
import multiprocessing
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from multiprocessing.connection import Connection
from typing import Any

import httpx2
import msgspec
from benchmarks import machine
from prometheus_client.parser import text_string_to_metric_families

from finops.api import bodies
from finops.kube import events
from finops_devenv import controlplane, ports

CRDS = pathlib.Path(__file__).resolve().parents[1] / "deploy" / "crds"
GROUP = "/apis/finops.stakater.com/v1alpha1"
API_VERSION = "finops.stakater.com/v1alpha1"
TARGET_RATIO = 1.3
FINALIZER = "subscriptions.finops.stakater.com/finalizer"
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
Counts = dict[tuple[str, str, str], float]
"""(verb, resource[/subresource], code) -> requests."""


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


def _client(cp: controlplane.ControlPlane, concurrency: int) -> httpx2.AsyncClient:
    """The creating (and watching) client: httpx2, the HTTP stack the controller's lightkube
    uses. Not httpx 0.29 on httpcore 1.0.9: that one spent about 3 ms of CPU per create (a
    failed `import sniffio` on every lock it sets up, idle-connection probes on every pass),
    so the raw create measured the client, not the API server (15.5-16.6 CPU-s of the
    benchmark's against 10.6 of the API server's for 5,000 creates; 3.9-4.4 with httpx2)."""
    return httpx2.AsyncClient(
        base_url=cp.server,
        verify=cp.ssl_context(),
        timeout=120,
        limits=httpx2.Limits(max_connections=concurrency),
    )


async def create_all(
    cp: controlplane.ControlPlane, path: str, bodies: list[dict[str, Any]], concurrency: int
) -> float:
    """POST every body with `concurrency` requests in flight; seconds taken."""
    gate = asyncio.Semaphore(concurrency)
    async with _client(cp, concurrency) as client:

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                resp = await client.post(path, json=body)
                resp.raise_for_status()

        started = time.monotonic()
        await asyncio.gather(*(one(b) for b in bodies))
        return time.monotonic() - started


def _activated(name: str, ns: str, uid: str, rv: str, now: str) -> tuple[Any, Any]:
    """The status a Subscription is activated with, and its `Activated` Event."""
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
            "observedGeneration": 1,
        }
        for kind, reason, message in (
            ("Ready", "ValidationSucceeded", "all gates passed"),
            ("Active", "Activated", "the Subscription is active and billing"),
        )
    ]
    status = {"status": {"ready": "True", "activatedAt": now, "conditions": conditions}}
    involved: bodies.Object = {
        "apiVersion": API_VERSION,
        "kind": "Subscription",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": rv},
    }
    event = events.event_body(
        involved, "Normal", "Activated", "the Subscription is active", dt.datetime.now(dt.UTC)
    )
    return status, event


async def floor_all(
    cp: controlplane.ControlPlane, ns: str, bodies: list[dict[str, Any]], concurrency: int
) -> float:
    """For every body, concurrently: create, finalizer PATCH, activating status write,
    `Activated` Event; seconds until the last is done."""
    gate = asyncio.Semaphore(concurrency)
    path = f"{GROUP}/namespaces/{ns}/subscriptions"
    json_patch = {"Content-Type": "application/json-patch+json"}
    merge = {"Content-Type": "application/merge-patch+json"}
    async with _client(cp, concurrency) as client:

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                made = (await client.post(path, json=body)).raise_for_status().json()
                meta = made["metadata"]
                name, rv = meta["name"], meta["resourceVersion"]
                ops = [
                    {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                    {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
                ]
                patched = await client.patch(
                    f"{path}/{name}", content=msgspec.json.encode(ops), headers=json_patch
                )
                rv = patched.raise_for_status().json()["metadata"]["resourceVersion"]
                now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                status, event = _activated(name, ns, meta["uid"], rv, now)
                written = await client.patch(
                    f"{path}/{name}/status", content=msgspec.json.encode(status), headers=merge
                )
                written.raise_for_status()
                posted = await client.post(f"/api/v1/namespaces/{ns}/events", json=event)
                posted.raise_for_status()

        started = time.monotonic()
        await asyncio.gather(*(one(b) for b in bodies))
        return time.monotonic() - started


class _Meta(msgspec.Struct):
    name: str = ""


class _Status(msgspec.Struct):
    ready: str | None = None


class _Object(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _Status | str | None = None  # an ERROR event's object is a Status: "Failure"


class _Event(msgspec.Struct):
    type: str
    object: _Object = msgspec.field(default_factory=_Object)


_decode_event = msgspec.json.Decoder(_Event).decode
"""The watcher reads only the event type, the name and `status.ready` of each line: it shares
the two cores with what is measured, so it skips the rest of each object unparsed."""


def _ready(event: _Event) -> bool:
    status = event.object.status
    return event.type != "DELETED" and isinstance(status, _Status) and status.ready == "True"


async def _events(stream: httpx2.Response) -> AsyncIterator[_Event]:
    """The watch stream's events, split on newlines from the raw bytes."""
    pending = b""
    async for chunk in stream.aiter_bytes():
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line:
                yield _decode_event(line)


async def _watch_ready(
    client: httpx2.AsyncClient, path: str, n: int, deadline: float, listed: Callable[[], None]
) -> None:
    """Return once `n` Subscriptions under `path` report Ready=True (list, then watch);
    `listed` is called after the first list."""
    ready: set[str] = set()
    while time.monotonic() < deadline:
        listing = (await client.get(path)).json()
        listed()
        ready = {
            s["metadata"]["name"]
            for s in listing["items"]
            if (s.get("status") or {}).get("ready") == "True"
        }
        if len(ready) >= n:
            return
        version = listing["metadata"]["resourceVersion"]
        left = max(1, int(deadline - time.monotonic()))
        query = f"?watch=1&resourceVersion={version}&timeoutSeconds={left}"
        async with client.stream("GET", path + query, timeout=None) as stream:
            async for event in _events(stream):
                if event.type == "ERROR":
                    break  # expired: list again
                if _ready(event):
                    ready.add(event.object.metadata.name)
                else:
                    ready.discard(event.object.metadata.name)
                if len(ready) >= n:
                    return
    raise RuntimeError(f"only {len(ready)}/{n} Ready before the timeout")


def _cpu_now() -> float:
    """User+system CPU seconds this process has used so far."""
    return sum(os.times()[:2])


def _watcher(
    cp: controlplane.ControlPlane, path: str, n: int, timeout: float, pipe: Connection
) -> None:
    """The watching process: says when it has listed (with its CPU so far), then when it saw
    the last Subscription Ready (monotonic clock, the same for every process) and its CPU
    by then, or the error that stopped it."""

    async def watch() -> None:
        async with _client(cp, 4) as client:
            deadline = time.monotonic() + timeout
            await _watch_ready(client, path, n, deadline, lambda: pipe.send(_cpu_now()))

    try:
        asyncio.run(watch())
        pipe.send((time.monotonic(), _cpu_now()))
    except Exception as exc:  # reported to the parent, which raises it
        pipe.send(f"watch failed: {exc!r}")


def until_ready(
    cp: controlplane.ControlPlane,
    path: str,
    n: int,
    args: Any,
    write: Callable[[], Coroutine[Any, Any, float]],
) -> tuple[float, float, float]:
    """Run `write` while a watch waits for `n` Subscriptions Ready: (seconds `write` took,
    seconds until the watch saw the last one Ready, the watch's CPU seconds meanwhile). Both
    phases stop their clock this way. The watch runs in its own process, so reading its events
    never takes a turn of the writing client's event loop, whose writes are what is timed."""
    here, there = multiprocessing.Pipe()
    proc = multiprocessing.get_context("fork").Process(
        target=_watcher, args=(cp, path, n, args.timeout, there), daemon=True
    )
    proc.start()
    try:
        listed = here.recv() if here.poll(60) else "no answer in 60 s"
        if not isinstance(listed, float):
            raise RuntimeError(f"the watch did not start: {listed}")
        started = time.monotonic()
        written = asyncio.run(write())
        seen = here.recv() if here.poll(args.timeout) else "no answer before the timeout"
        if not isinstance(seen, tuple):
            raise RuntimeError(f"the watch did not see every Subscription Ready: {seen}")
        return written, seen[0] - started, seen[1] - listed
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


def apiserver_requests(cp: controlplane.ControlPlane) -> Counts:
    """The API server's request counters for Subscriptions, Offerings and Events."""
    with cp.http(timeout=60) as client:
        text = client.get("/metrics").text
    counts: Counts = collections.defaultdict(float)
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if not sample.name.endswith("_total"):
                continue
            resource = labels.get("resource", "")
            if resource not in ("subscriptions", "offerings", "events"):
                continue
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            counts[(labels.get("verb", ""), resource, labels.get("code", ""))] += sample.value
    return counts


def controller_reconciles(port: int) -> dict[str, float]:
    """`controller_runtime_reconcile_total` of the subscription controller, by result."""
    text = httpx2.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "controller_runtime_reconcile":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels["controller"] == "subscription":
                found[sample.labels["result"]] = sample.value
    return found


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """User+system CPU seconds each process has used so far (this one's as `benchmark`)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {"benchmark": _cpu_now()}
    for name, pid in pids.items():
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        found[name] = (int(fields[11]) + int(fields[12])) / tick
    return found


def wait_gone(cp: controlplane.ControlPlane, path: str, timeout: float = 120) -> None:
    """Until the list at `path` is empty (deletes of many objects finish in the background)."""
    deadline = time.monotonic() + timeout
    with cp.http() as client:
        while client.get(path).json()["items"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path} still lists objects after {timeout:.0f} s")
            time.sleep(0.5)


def wait_served(cp: controlplane.ControlPlane, path: str, timeout: float = 60) -> None:
    """Until the API server lists `path` (a CRD just installed is served a moment later)."""
    deadline = time.monotonic() + timeout
    with cp.http() as client:
        while (status := client.get(path).status_code) != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path} answers {status} after {timeout:.0f} s")
            time.sleep(0.2)


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


def controller_env(
    cp: controlplane.ControlPlane, ns: str, *, resync_seconds: int
) -> dict[str, str]:
    """The environment a benchmark's controller runs with: the test control plane, no
    database (`--skipDBConnection`), no webhooks, and a resync long enough not to mask
    wake-ups."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "KUBECONFIG": str(cp.kubeconfig),
        "POD_NAMESPACE": ns,
        "POSTGRES_CONNECTION_STRING": "postgresql://unused@db.invalid/finops",
        "OPENCOST_CONNECTION_STRING": "http://opencost.invalid:9003/",
        "OPENCOST_DEPLOYMENT_NAME": "opencost",
        "OPENCOST_DEPLOYMENT_NAMESPACE": ns,
        "ENABLE_WEBHOOKS": "false",
        "FINOPS_RESYNC_SECONDS": str(resync_seconds),
    }


# The controllers' logs, removed when the benchmark exits (one per phase and trial).
_LOGS = tempfile.TemporaryDirectory(prefix="finops-convergence-logs-")


def start_controller(
    cp: controlplane.ControlPlane, ns: str, workers: int, metrics_port: int, profile: str = ""
) -> subprocess.Popen[bytes]:
    probe = ports.free_port()
    env = controller_env(cp, ns, resync_seconds=600)
    if workers:
        env["FINOPS_WORKERS"] = str(workers)
    log_fd, log_name = tempfile.mkstemp(
        prefix="convergence-controller-", suffix=".log", dir=_LOGS.name
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            *(["-m", "cProfile", "-o", profile] if profile else []),
            "-m",
            "finops.operator",
            "--mode=controller",
            "--skipDBConnection",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            "--metrics-secure=false",
        ],
        env=env,
        stdout=log_fd,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx2.get(f"http://127.0.0.1:{probe}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx2.HTTPError:
            time.sleep(0.2)
    proc.kill()
    tail = pathlib.Path(log_name).read_text(errors="replace")[-4000:]
    raise RuntimeError(f"controller did not start; the end of its log:\n{tail}")


@dataclasses.dataclass
class Size:
    families: int
    subscriptions: int
    raw: float
    """The floor: its writes until the watch saw the last Subscription Ready."""
    raw_written: float
    """The floor's writes alone (the watch sees the last one a little later)."""
    created: float
    converged: float
    requests: Counts
    reconciles: dict[str, float]
    cpu: dict[str, float]
    raw_cpu: dict[str, float]
    created_raw: float

    @property
    def ratio(self) -> float:
        return self.converged / self.raw


def warm_up(
    cp: controlplane.ControlPlane, path: str, bodies: list[dict[str, Any]], args: Any
) -> float:
    """The raw create of every body, then their deletion: the same first round on each
    control plane before its timed phase. Returns the create's seconds (orientation)."""
    wait_served(cp, path)
    created = asyncio.run(create_all(cp, path, bodies, args.concurrency))
    with cp.http(timeout=300) as client:
        client.delete(path).raise_for_status()  # no finalizers: gone at once
    wait_gone(cp, path)
    return created


def measure(families: int, args: Any) -> Size:
    """One size: the floor on a fresh control plane, then the controller's run on another.

    Each phase runs second on its control plane, after the same warm-up round (the raw
    create of the same Subscriptions, then their deletion), and each stops its clock when the
    same kind of watch has seen the last Subscription Ready, so neither pays for the other's
    history (etcd and the API server's caches grow with every round on one plane), for a cold
    API server, or for a watch the other lacks."""
    ns = "convergence"
    subs_path = f"{GROUP}/namespaces/{ns}/subscriptions"
    bodies = subscriptions(ns, families)
    n = len(bodies)

    # 1. The floor: the very writes the controller must make, by a bare client, nobody
    # reconciling.
    with controlplane.running(CRDS) as cp:
        cp.create_namespace(ns)
        created_raw = warm_up(cp, subs_path, bodies, args)
        planes = {name: p.pid for name, p in cp._procs}
        raw_before = cpu_seconds(planes)
        raw_written, raw, watched = until_ready(
            cp, subs_path, n, args, lambda: floor_all(cp, ns, bodies, args.concurrency)
        )
        raw_cpu = {k: v - raw_before[k] for k, v in cpu_seconds(planes).items()}
        raw_cpu["watcher"] = watched

    # 2. The controller up, its Offerings ready, then everything at once.
    with controlplane.running(CRDS) as cp:
        cp.create_namespace(ns)
        warm_up(cp, subs_path, bodies, args)
        metrics_port = ports.free_port()
        proc = start_controller(cp, ns, args.workers, metrics_port, args.profile)
        try:
            with cp.http() as client:
                for name, requires in OFFERINGS.items():
                    client.post(
                        f"{GROUP}/namespaces/{ns}/offerings", json=offering(name, ns, requires)
                    ).raise_for_status()
            wait_offerings_ready(cp, ns)
            pids = {name: p.pid for name, p in cp._procs}
            pids["controller"] = proc.pid
            before = apiserver_requests(cp)
            rec_before = controller_reconciles(metrics_port)
            cpu_before = cpu_seconds(pids)
            created, converged, watched = until_ready(
                cp, subs_path, n, args, lambda: create_all(cp, subs_path, bodies, args.concurrency)
            )
            cpu_after = cpu_seconds(pids)
            after = apiserver_requests(cp)
            rec_after = controller_reconciles(metrics_port)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    requests = {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}
    mine = ("POST", "subscriptions", "201")  # the benchmark's own creates
    requests[mine] = requests.get(mine, 0.0) - n
    reconciles = {k: v - rec_before.get(k, 0.0) for k, v in rec_after.items()}
    cpu = {k: v - cpu_before[k] for k, v in cpu_after.items()}
    cpu["watcher"] = watched
    return Size(
        families,
        n,
        raw,
        raw_written,
        created,
        converged,
        requests,
        reconciles,
        cpu,
        raw_cpu,
        created_raw,
    )


def report(size: Size, label: str) -> None:
    n = size.subscriptions
    print(f"{label}: {n:,} Subscriptions in {size.families} families")
    print(f"  raw API create (orientation):     {size.created_raw:8.2f} s")
    print(f"  floor's writes alone:             {size.raw_written:8.2f} s")
    print(f"  floor -> all Ready (no controller): {size.raw:6.2f} s  ({n / size.raw:6.0f} /s)")
    print(f"  create with controller running:   {size.created:8.2f} s")
    rate = n / size.converged
    print(f"  create -> all Ready (controller): {size.converged:8.2f} s  ({rate:6.0f} /s)")
    print(
        f"  per Subscription: {size.converged / n * 1000:.2f} ms to Ready,"
        f" {size.raw / n * 1000:.2f} ms floor; ratio {size.ratio:.2f}"
    )
    total = sum(size.reconciles.values())
    detail = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(size.reconciles.items()) if v)
    print(f"  reconciles: {total:,.0f} ({total / n:.2f} per Subscription; {detail})")
    raw_cpu = ", ".join(f"{k} {v:.1f} s" for k, v in size.raw_cpu.items())
    cpu = ", ".join(f"{k} {v:.1f} s" for k, v in size.cpu.items())
    print(f"  CPU during the floor:  {raw_cpu}")
    print(f"  CPU while converging:  {cpu}")
    api = ("kube-apiserver", "etcd")
    server = sum(size.cpu[k] for k in api) / sum(size.raw_cpu[k] for k in api)
    print(f"  API server + etcd CPU, converging / floor: {server:.2f}")
    floor_cpu, converge_cpu = sum(size.raw_cpu.values()), sum(size.cpu.values())
    cores = os.cpu_count() or 1
    print(
        f"  CPU of every process: floor {floor_cpu:.1f} s, converging {converge_cpu:.1f} s"
        f" ({converge_cpu / floor_cpu:.2f}×); {cores} cores"
        f" {floor_cpu / (size.raw * cores):.0%} / {converge_cpu / (size.converged * cores):.0%}"
        " busy"
    )
    writes = sum(v for (verb, _, _), v in size.requests.items() if verb in ("PATCH", "POST"))
    per_write = size.raw_cpu["benchmark"] / (4 * n)  # the floor client's four requests each
    at_floor = writes * per_write
    print(
        f"  controller: {writes:,.0f} writes, {at_floor:.1f} CPU-s at the floor client's"
        f" {per_write * 1000:.2f} ms each; the other {size.cpu['controller'] - at_floor:.1f} s"
        " its watch, decisions and queue"
    )
    print("  controller requests during convergence (API server counters, own creates excluded):")
    for (verb, resource, code), value in sorted(size.requests.items()):
        if value > 0:
            print(f"    {verb:6} {resource:28} {code}  {value:8,.0f}  ({value / n:.2f} per Sub)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", type=int, default=500, help="families at the largest size")
    p.add_argument("--scales", default="1,2,4", help="multiples of families/4 to run")
    p.add_argument("--workers", type=int, default=0, help="FINOPS_WORKERS (0: its default)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--profile", default="", help="write the controller's cProfile here")
    p.add_argument("--trials", type=int, default=3, help="interleaved trials per size")
    args = p.parse_args(argv)
    scales = [int(s) for s in args.scales.split(",")]
    trials: dict[int, list[Size]] = {scale: [] for scale in scales}
    print(f"load at start: {machine.loadavg()}", flush=True)
    for trial in range(1, args.trials + 1):
        for scale in scales:  # every size once per trial, so drift spreads over all sizes
            families = max(1, args.families * scale // max(scales))
            load = machine.loadavg()
            size = measure(families, args)
            trials[scale].append(size)
            print(
                f"trial {trial} ×{scale}: floor {size.raw:.2f} s, all Ready {size.converged:.2f} s,"
                f" ratio {size.ratio:.2f} (load {load} → {machine.loadavg()})",
                flush=True,
            )
    # The trial with the median ratio (the higher middle one of an even count) stands for its
    # size, printed whole.
    sizes = [sorted(trials[scale], key=lambda t: t.ratio)[args.trials // 2] for scale in scales]
    for scale, size in zip(scales, sizes, strict=True):
        print()
        spread = "/".join(f"{t.ratio:.2f}" for t in trials[scale])
        report(size, f"×{scale}, the median of {args.trials} trials (ratios {spread})")
    last = sizes[-1]
    print(f"\nat {last.subscriptions:,} Subscriptions ({last.families} families):")
    print(f"  ratio converged/floor (median):   {last.ratio:8.2f}")
    if len(sizes) > 1:
        first = sizes[0]
        growth = (last.converged / last.subscriptions) / (first.converged / first.subscriptions)
        print(f"  growth: time per Subscription ×{scales[-1]} / ×{scales[0]}: {growth:8.2f}")
    met = "met" if last.ratio <= TARGET_RATIO else "not met"
    ratios = "/".join(f"{s.ratio:.2f}" for s in sizes)
    print(f"  ratios at each size: {ratios}")
    print(f"  target converged <= {TARGET_RATIO}× floor:   {met}")
    print(f"load at end: {machine.loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

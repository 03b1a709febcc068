"""`finops sandbox`: the whole product on one machine, with nothing to install but the project.

It starts a real kube-apiserver + etcd, a throw-away PostgreSQL, an OpenCost stand-in that
replays real OpenCost captures, and the controller as its own process; applies `examples/`;
then runs the two collection jobs exactly as their CronJobs would, for a few simulated hours,
and prints what every Subscription and Budget costs. The Subscriptions are created just now,
so their activation is moved back to the start of the month (or further, to the first
simulated hour): the month so far is charged as a running install would have charged it, and
the simulated hours end with the current one, so views that end now (the dashboard's "last
7 days") show them. The replay serves any hour.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TextIO

import httpx
import yaml
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig

from finops.api import environment
from finops.billing import money
from finops.collection import plan
from finops.jobs import allocations as allocation_job
from finops.jobs import charges as charge_job
from finops_devenv import controlplane, ports, postgres, sandbox_periods, tls
from finops_devenv import opencost_replay as replay
from finops_devenv import webhooks as local_webhooks

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = REPO_ROOT / "examples"
CRDS = REPO_ROOT / "deploy" / "crds"
CAPTURES = REPO_ROOT / "tests" / "data" / "opencost-real"
SYSTEM_NS = "finops-operator-system"
OPENCOST_DEPLOYMENT = "finops-operator-opencost"
GROUP = "finops.stakater.com/v1alpha1"
PLURALS = {
    "FinOpsProvider": "finopsproviders",
    "PriceBook": "pricebooks",
    "CostJob": "costjobs",
    "Offering": "offerings",
    "Subscription": "subscriptions",
    "Budget": "budgets",
}
FIELD_MANAGER = "finops-sandbox"
HOUR = dt.timedelta(hours=1)


class SandboxError(RuntimeError):
    """Something the sandbox needs did not come up; the message says what."""


def _say(out: TextIO, text: str) -> None:
    print(f"[sandbox] {text}", file=out, flush=True)


def object_path(obj: Mapping[str, Any]) -> str:
    """The API path of one example object (the only kinds `examples/` holds)."""
    kind, meta = obj["kind"], obj["metadata"]
    if obj["apiVersion"] == "v1" and kind == "Namespace":
        return f"/api/v1/namespaces/{meta['name']}"
    if obj["apiVersion"] != GROUP or kind not in PLURALS:
        raise SandboxError(
            f"examples: {obj['apiVersion']}/{kind} is not a kind the sandbox applies"
        )
    scope = f"namespaces/{meta['namespace']}/" if kind != "FinOpsProvider" else ""
    return f"/apis/{GROUP}/{scope}{PLURALS[kind]}/{meta['name']}"


def load_examples(directory: pathlib.Path = EXAMPLES) -> list[dict[str, Any]]:
    """Every object of every YAML file, in file-name order (namespaces first)."""
    objs: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        objs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return objs


def apply(client: httpx.Client, obj: Mapping[str, Any]) -> None:
    """Server-side apply, as `kubectl apply --server-side` would."""
    resp = client.patch(
        object_path(obj),
        params={"fieldManager": FIELD_MANAGER, "force": "true"},
        content=yaml.safe_dump(dict(obj)),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    if resp.status_code >= 300:
        meta = obj["metadata"]
        raise SandboxError(f"applying {obj['kind']} {meta.get('name')}: {resp.text}")


@dataclasses.dataclass
class Services:
    """What is running, for the report and for stopping."""

    kube: controlplane.ControlPlane
    pg: postgres.PostgresCluster
    dsn: str
    opencost: replay.ReplayServer
    controller: subprocess.Popen[bytes]
    controller_log: pathlib.Path
    metrics_url: str
    gateway: subprocess.Popen[bytes]
    gateway_url: str
    gateway_log: pathlib.Path


def _wait(what: str, check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if check():
                return True
        time.sleep(0.5)
    return False


def list_objects(client: httpx.Client, plural: str) -> list[dict[str, Any]]:
    """Every object of one finops kind, across namespaces."""
    items: list[dict[str, Any]] = client.get(f"/apis/{GROUP}/{plural}").json().get("items", [])
    return items


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The condition of that type on an object, or an empty mapping."""
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == kind), {})


ControllerIdentity = Callable[[controlplane.ControlPlane], pathlib.Path]


@contextlib.contextmanager
def services(
    state: pathlib.Path,
    out: TextIO,
    controller_identity: ControllerIdentity | None = None,
    controller_args: Sequence[str] = (),
) -> Iterator[Services]:
    """Start everything; stop everything on exit, in reverse order.

    The controller runs as the control plane's admin unless `controller_identity` is given:
    it is called once the release namespace exists and returns the kubeconfig the controller
    uses instead (how a test runs it under the chart's least-privilege ServiceAccount).
    `controller_args` are appended to the controller's command line (e.g. `--leader-elect`).
    """
    state.mkdir(parents=True, exist_ok=True)
    _say(
        out,
        "preparing kube-apiserver and etcd (built from the Go module proxy on first use; "
        "that takes several minutes once)",
    )
    bins = controlplane.ensure_binaries()
    with contextlib.ExitStack() as stack:
        _say(out, "starting etcd and kube-apiserver")
        kube = stack.enter_context(controlplane.ControlPlane(bins))
        kube.install_crds(sorted(CRDS.glob("*.yaml")))
        _say(out, f"control plane ready at {kube.server}")
        _say(out, "starting PostgreSQL")
        pg = stack.enter_context(postgres.PostgresCluster())
        dsn = pg.create_database("finops")
        _say(out, "starting the OpenCost replay server (real OpenCost captures)")
        opencost = stack.enter_context(replay.ReplayServer(replay.Captures(CAPTURES)))
        _create_system_namespace(kube)
        probe_port, metrics_port = ports.free_port(), ports.free_port()
        webhook_port = ports.free_port()
        ca, cert_dir = _webhook_certs(state)
        log_path = state / "controller.log"
        controller_kubeconfig = (
            controller_identity(kube) if controller_identity is not None else kube.kubeconfig
        )
        env = _controller_env(controller_kubeconfig, dsn, opencost.url, webhook_port)
        args = [
            f"--health-probe-bind-address=127.0.0.1:{probe_port}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            "--metrics-secure=false",  # a local sandbox: plain HTTP for curl
            f"--webhook-cert-path={cert_dir}",
            *controller_args,
        ]
        _say(out, f"starting the controller (log: {log_path})")
        controller = _spawn_controller(env, args, log_path)
        stack.callback(controlplane.stop_process, controller)
        _await_ready(probe_port, log_path)
        _register_webhooks(kube, webhook_port, ca)
        _say(out, f"admission webhooks served on 127.0.0.1:{webhook_port} and registered")
        gw_log = state / "gateway.log"
        gw, gw_url = _start_gateway(stack, dsn, gw_log, out)
        metrics_url = f"http://127.0.0.1:{metrics_port}"
        yield Services(
            kube, pg, dsn, opencost, controller, log_path, metrics_url, gw, gw_url, gw_log
        )


def _webhook_certs(state: pathlib.Path) -> tuple[tls.TinyCA, pathlib.Path]:
    """A throw-away CA and the webhook serving certificate it signed, for 127.0.0.1."""
    ca = tls.TinyCA("finops-sandbox-webhook-ca")
    cert_dir = state / "webhook-certs"
    cert_dir.mkdir(exist_ok=True)
    ca.serving(["127.0.0.1"]).write(cert_dir, "tls")
    return ca, cert_dir


def _await_ready(probe_port: int, log_path: pathlib.Path) -> None:
    if not _wait(
        "controller",
        lambda: httpx.get(f"http://127.0.0.1:{probe_port}/readyz", timeout=2).status_code == 200,
        60,
    ):
        raise SandboxError(f"the controller did not become ready; see {log_path}")


def _create_system_namespace(kube: controlplane.ControlPlane) -> None:
    """The release namespace, holding the OpenCost Deployment stand-in."""
    with kube.http() as client:
        client.post(
            "/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NS}},
        )
        client.post(
            f"/apis/apps/v1/namespaces/{SYSTEM_NS}/deployments", json=_opencost_deployment()
        )


def _controller_env(
    kubeconfig: pathlib.Path, dsn: str, opencost_url: str, webhook_port: int
) -> dict[str, str]:
    return {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "POSTGRES_CONNECTION_STRING": dsn,
        "OPENCOST_CONNECTION_STRING": opencost_url,
        "OPENCOST_DEPLOYMENT_NAME": OPENCOST_DEPLOYMENT,
        "OPENCOST_DEPLOYMENT_NAMESPACE": SYSTEM_NS,
        "POD_NAMESPACE": SYSTEM_NS,
        "OPERATOR_IMAGE": "finops-operator:sandbox",
        "ENABLE_WEBHOOKS": "true",
        "WEBHOOK_BIND_ADDRESS": f"127.0.0.1:{webhook_port}",
        "FINOPS_RESYNC_SECONDS": "20",
    }


def _spawn_controller(
    env: Mapping[str, str], args: Sequence[str], log_path: pathlib.Path
) -> subprocess.Popen[bytes]:
    """`finops.operator --mode=controller` in a child process, its output in `log_path`."""
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "finops.operator", "--mode=controller", *args],
            env=dict(env),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )


def _register_webhooks(kube: controlplane.ControlPlane, port: int, ca: tls.TinyCA) -> None:
    """The validating webhook configuration, pointed at the local controller."""
    with kube.http() as client:
        hooks = local_webhooks.local_configuration(
            "finops-operator-validating-webhook-configuration", port, ca.cert_pem
        )
        resp = client.post(local_webhooks.API, json=hooks)
        if resp.status_code != 201:
            raise SandboxError(f"registering the admission webhooks: {resp.text}")


def _start_gateway(
    stack: contextlib.ExitStack, dsn: str, log_path: pathlib.Path, out: TextIO
) -> tuple[subprocess.Popen[bytes], str]:
    """`finops-gateway` on a free loopback port, without authentication (nothing but this
    machine can reach it); returns the process and its URL once it answers."""
    port = ports.free_port()
    env = {
        **os.environ,
        "PG_CONNECTION_STRING": dsn,
        "PORT": str(port),
        "BIND_HOST": "127.0.0.1",
        "ENABLE_AUTH": "false",
    }
    _say(out, f"starting the gateway (log: {log_path})")
    with log_path.open("wb") as log_file:
        gateway = subprocess.Popen(
            [sys.executable, "-m", "finops.gateway.app"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    stack.callback(controlplane.stop_process, gateway)
    url = f"http://127.0.0.1:{port}"
    if not _wait("gateway", lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200, 60):
        raise SandboxError(f"the gateway did not answer on {url}; see {log_path}")
    _say(out, f"gateway serving the ledger at {url} (ENABLE_AUTH=false: local use only)")
    return gateway, url


def _opencost_deployment() -> dict[str, Any]:
    """A stand-in for the OpenCost Deployment the PriceBook reconciler restarts (it never runs:
    there is no scheduler in the sandbox, but the restart annotation is visible on it)."""
    labels = {"app.kubernetes.io/name": "opencost"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": OPENCOST_DEPLOYMENT, "namespace": SYSTEM_NS},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "opencost", "image": "opencost:replay"}]},
            },
        },
    }


def stop_controller(svc: Services) -> None:
    """Stop the controller process (as uninstalling the chart would)."""
    controlplane.stop_process(svc.controller)


def wait_for_activation(svc: Services, out: TextIO, timeout: float = 90) -> None:
    """Wait until the PriceBook is active and every Subscription has settled."""
    with svc.kube.http() as client:

        def settled() -> bool:
            subs = list_objects(client, "subscriptions")
            return bool(subs) and all(
                condition(s, "Active").get("status") in ("True", "False") for s in subs
            )

        _say(out, "waiting for the controller to activate the Subscriptions")
        if not _wait("subscriptions", settled, timeout):
            pending = [
                s["metadata"]["name"]
                for s in list_objects(client, "subscriptions")
                if condition(s, "Active").get("status") not in ("True", "False")
            ]
            _say(out, f"still waiting for {', '.join(pending)}; continuing anyway")


def job_env(svc: Services, costjob: str, scheduled: dt.datetime) -> dict[str, str]:
    """What a generated CronJob's pod sees for one scheduled run of `costjob` (the DSN as the
    Secret would hand it over), minus the in-cluster identity."""
    return {
        "COSTJOB_NAME": costjob,
        "COSTJOB_NAMESPACE": SYSTEM_NS,
        "POSTGRES_CONNECTION_STRING": svc.dsn,
        "OPENCOST_CONNECTION_STRING": svc.opencost.url,
        "OPENCOST_AGGREGATE": "namespace,pod",  # the aggregate the real captures hold
        "HOURS_LOOKBACK": "1",
        "SCHEDULED_TIMESTAMP": scheduled.strftime("%Y-%m-%dT%H:%M:%SZ"),
        # A month closes two hours after it ends (not 24), so a short simulation shows it.
        environment.Env.FINOPS_PERIOD_GRACE_HOURS: str(sandbox_periods.GRACE_HOURS),
    }


def history_start(now: dt.datetime, hours: int) -> dt.datetime:
    """When the examples' Subscriptions count as activated: the start of `now`'s month, or
    the first of the `hours` simulated hours before the current one when that is earlier."""
    month = now.astimezone(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return min(month, plan.truncate_hour(now) - hours * HOUR)


def backdate_activation(svc: Services, to: dt.datetime, out: TextIO) -> None:
    """Move every activated Subscription's `activatedAt` back to `to` (as its status would
    read had it been running since), through the status subresource."""
    with svc.kube.http() as client:
        for sub in list_objects(client, "subscriptions"):
            if not (sub.get("status") or {}).get("activatedAt"):
                continue
            meta = sub["metadata"]
            url = f"/apis/{GROUP}/namespaces/{meta['namespace']}/subscriptions/{meta['name']}"
            resp = client.patch(
                f"{url}/status",
                json={"status": {"activatedAt": plan.rfc3339(to)}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            if resp.status_code >= 300:
                raise SandboxError(f"backdating Subscription {meta['name']}: {resp.text}")
    _say(out, f"Subscriptions counted as active since {plan.rfc3339(to)}")


def simulate_hours(
    svc: Services,
    hours: int,
    out: TextIO,
    start_offset: int = 0,
    start: dt.datetime | None = None,
) -> dt.datetime:
    """Run both jobs once per simulated hour, as the two hourly CronJobs would, for the
    `hours` hours before the current one and the current hour itself (all moved by
    `start_offset` hours), or for `start` and the `hours` hours after it; return the last
    scheduled time."""
    # The runs fire at the current minute of each hour, as an hourly CronJob would; the last
    # one is now.
    if start is None:
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        start = now + (start_offset - hours) * HOUR
    last = start
    for k in range(hours + 1):
        scheduled = start + k * HOUR
        last = scheduled
        alloc = _run_job(
            svc, allocation_job.run, job_env(svc, "resource-cost-collection", scheduled), scheduled
        )
        charge = _run_job(
            svc,
            charge_job.run,
            job_env(svc, "subscription-charge-collection", scheduled),
            scheduled,
        )
        outcome = "ok" if alloc == charge == 0 else f"allocations={alloc} charges={charge}"
        # The job pins the scheduled time's whole hour; name that hour, not the wall clock.
        hour = plan.rfc3339(plan.truncate_hour(scheduled))
        _say(out, f"collected hour {hour}: {outcome}")
    return last


def simulate_history(svc: Services, hours: int, out: TextIO) -> tuple[dt.datetime, dt.datetime]:
    """Backdate the activation (`history_start`), then collect the `hours` hours before the
    current one and the current hour; return the activation and the last scheduled time."""
    first = history_start(dt.datetime.now(dt.UTC), hours)
    backdate_activation(svc, first, out)
    return first, simulate_hours(svc, hours, out)


JobRun = Callable[..., Coroutine[Any, Any, int]]


def _run_job(svc: Services, job: JobRun, env: Mapping[str, str], at: dt.datetime) -> int:
    """One job run in-process, with the clock pinned to `at`, against the sandbox's server."""

    async def go() -> int:
        client = AsyncClient(
            config=KubeConfig.from_file(str(svc.kube.kubeconfig)), field_manager="finops-operator"
        )
        try:
            return await job(dict(env), now=lambda: at, kube=client)
        finally:
            await client.close()

    return asyncio.run(go())


def _bucket(sub: Mapping[str, Any], granularity: str) -> tuple[int, int]:
    for b in (sub.get("status") or {}).get("costs") or []:
        if b.get("granularity") == granularity:
            return int(b.get("current") or 0), int(b.get("projected") or 0)
    return 0, 0


def cost_table(client: httpx.Client, currency: str = "") -> str:
    """Every Subscription's buckets, one line each, every amount in one money format."""
    header = (
        f"{'SUBSCRIPTION':<32} {'OFFERING':<16} {'ACTIVE':<7} "
        f"{'HOUR':>10} {'DAY':>12} {'MONTH':>14} {'MONTH (PROJECTED)':>18}"
    )
    lines = [header]
    for sub in sorted(
        list_objects(client, "subscriptions"),
        key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"]),
    ):
        meta = sub["metadata"]
        name = f"{meta['namespace']}/{meta['name']}"
        offering = sub["spec"]["offeringRef"]["name"]
        active = condition(sub, "Active").get("status", "-")
        hour, _ = _bucket(sub, "hour")
        day, _ = _bucket(sub, "day")
        month, month_projected = _bucket(sub, "month")
        hour_s, day_s, month_s, projected_s = (
            money.format_money(m, currency) for m in (hour, day, month, month_projected)
        )
        lines.append(
            f"{name:<32} {offering:<16} {active:<7} "
            f"{hour_s:>10} {day_s:>12} {month_s:>14} {projected_s:>18}"
        )
    return "\n".join(lines)


def costs_urls(
    svc: Services, namespaces: Sequence[str], window: tuple[dt.datetime, dt.datetime]
) -> list[str]:
    """The gateway's costs endpoint for each namespace over `window` (half-open)."""
    start, end = (plan.rfc3339(t) for t in window)
    return [
        f"{svc.gateway_url}/api/v1/namespaces/{ns}/costs?from={start}&to={end}" for ns in namespaces
    ]


def budget_table(client: httpx.Client) -> str:
    """Every Budget as the charge run judged it, and the thresholds its period crossed."""
    lines = [
        f"{'NAMESPACE':<12} {'BUDGET':<16} {'PERIOD':<9} {'AMOUNT':>12} {'SPENT':>12} "
        f"{'FORECAST':>12} STATE"
    ]
    for budget in sorted(
        list_objects(client, "budgets"),
        key=lambda b: (b["metadata"]["namespace"], b["metadata"]["name"]),
    ):
        meta, spec, status = budget["metadata"], budget["spec"], budget.get("status") or {}
        currency = spec.get("currency", "")
        amount = money.format_money(int(status.get("amountMicros") or 0), currency)
        lines.append(
            f"{meta['namespace']:<12} {meta['name']:<16} {spec.get('period', ''):<9} "
            f"{amount:>12} {status.get('spent', '-'):>12} {status.get('forecast', '-'):>12} "
            f"{status.get('state', 'not evaluated yet')}"
        )
        crossed = [
            f"{t['percent']}% {t['basis'].lower()} at {t['crossedAt']}"
            for t in status.get("thresholds") or []
        ]
        if crossed:
            lines.append(f"{'':<12} thresholds crossed: {', '.join(crossed)}")
    return "\n".join(lines)


def report(svc: Services, out: TextIO, window: tuple[dt.datetime, dt.datetime]) -> None:
    """The tables, then where to look (`window`: the collected hours, for the gateway URLs)."""
    with svc.kube.http() as client:
        books = list_objects(client, "pricebooks")
        active = [b for b in books if (b.get("status") or {}).get("active")] or books
        currency = next((b["spec"].get("currency", "") for b in active), "")
        table = cost_table(client, currency)
        budgets = budget_table(client)
        namespaces = sorted(
            {s["metadata"]["namespace"] for s in list_objects(client, "subscriptions")}
        )
    print(
        f"\nSubscription costs ({currency or 'no active PriceBook'}; "
        "settled so far, and the month's projection):",
        file=out,
    )
    print(table, file=out)
    print("\nBudgets (spent so far in the period, and its forecast):", file=out)
    print(budgets, file=out)
    curls = "\n".join(f"  curl '{url}'" for url in costs_urls(svc, namespaces, window))
    print(
        f"""
Where to look:
  export KUBECONFIG={svc.kube.kubeconfig}
  kubectl get pricebooks,offerings,subscriptions,costjobs,budgets -A
  kubectl get subscription apps-hosting -n team-apps -o yaml     # status.costs
  kubectl get budget apps-monthly -n team-apps -o yaml           # spent, forecast, thresholds
  psql '{svc.dsn}' -c 'select * from subscription_charges limit 20'
  controller metrics: {svc.metrics_url}/metrics    controller log: {svc.controller_log}
  gateway: {svc.gateway_url}/    (ENABLE_AUTH=false: no token needed; this machine only)
{curls}
""",
        file=out,
        flush=True,
    )


def simulate(
    svc: Services, hours: int, out: TextIO, previous_month: bool
) -> tuple[dt.datetime, dt.datetime]:
    """The simulated hours: up to now (`simulate_history`), or from an activation back-dated
    into the previous month until that month has closed; the first and last scheduled hours."""
    if not previous_month:
        return simulate_history(svc, hours, out)
    at = sandbox_periods.activation(dt.datetime.now(dt.UTC))
    backdate_activation(svc, at, out)
    count = sandbox_periods.hours_until_closed(at)
    return plan.truncate_hour(at), simulate_hours(svc, count, out, start=at)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(
    hours: int,
    exit_after_report: bool,
    state: pathlib.Path,
    out: TextIO,
    previous_month: bool = False,
) -> int:
    """The whole sandbox (with `previous_month`, from the last hours of the previous month
    until it has closed: see `finops_devenv.sandbox_periods`); returns an exit status."""
    # Ctrl-C and SIGTERM both unwind through the context managers, so every service stops
    # and its files go, whatever stage the sandbox is in (a background shell ignores SIGINT
    # unless a handler is installed).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with services(state, out) as svc:
            _say(out, f"applying {EXAMPLES}")
            with svc.kube.http() as client:
                for obj in load_examples():
                    apply(client, obj)
            wait_for_activation(svc, out)
            first, last = simulate(svc, hours, out, previous_month)
            report(svc, out, (first, plan.truncate_hour(last) + HOUR))
            if previous_month:
                sandbox_periods.report(svc.dsn, svc.gateway_url, out)
            if exit_after_report:
                return 0
            _say(out, "running; press Ctrl-C to stop and remove everything")
            try:
                while svc.controller.poll() is None and svc.gateway.poll() is None:
                    time.sleep(1)
            except KeyboardInterrupt:
                _say(out, "stopping")
                return 0
            if svc.gateway.returncode is not None:
                raise SandboxError(
                    f"the gateway exited ({svc.gateway.returncode}); see {svc.gateway_log}"
                )
            raise SandboxError(
                f"the controller exited ({svc.controller.returncode}); see {svc.controller_log}"
            )
    except SandboxError as exc:
        _say(out, f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        _say(out, "interrupted; everything was stopped")
        return 130

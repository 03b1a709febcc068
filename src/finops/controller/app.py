"""The controller manager: watches -> one keyed work queue -> reconcilers, under a Lease.

Startup: probes come up first (a standby replica is alive and ready too), then the Lease is
acquired when `--leader-elect` is set; only the leader starts watches and workers. SIGTERM
stops the workers, releases the Lease so a standby takes over at once, and exits 0. When the
Lease cannot be renewed in time (API server unreachable) the workers pause and resume once it
is renewed, without a restart; seeing another replica hold the Lease exits non-zero so the
pod restarts as a standby.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import lightkube
from lightkube.resources import batch_v1, core_v1

from finops.api import bodies
from finops.controller import (
    config,
    cost_metrics,
    costjob,
    finopsprovider,
    hierarchy_watch,
    metrics,
    period_metrics,
    pricebook,
    serving,
    webhooks,
    workqueue,
)
from finops.kube import client as kube_client
from finops.kube import leader, resources, reviews, watch
from finops.provisioning import costjobs

log = logging.getLogger(__name__)

Key = tuple[str, str, str]
"""(kind, namespace, name) of the object a reconciler owns."""
QUEUE_NAME = "finops"


class KeyReconciler(Protocol):
    controller: str

    async def reconcile(self, key: Key) -> float | None: ...


def spec_or_meta_changed(old: bodies.Object | None, new: bodies.Object | None) -> bool:
    """Creation, deletion, a new generation, or changed labels/annotations.

    Status-only updates (including our own status writes) are skipped: they would only
    wake the reconciler that wrote them. The periodic resync covers anything else.
    """
    if old is None or new is None:
        return True
    o, n = old.get("metadata") or {}, new.get("metadata") or {}
    return (
        o.get("generation") != n.get("generation")
        or o.get("labels") != n.get("labels")
        or o.get("annotations") != n.get("annotations")
        or o.get("deletionTimestamp") != n.get("deletionTimestamp")
    )


def owner_costjob(obj: dict[str, Any]) -> Key | None:
    """The CostJob controlling an owned CronJob/Secret."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == costjobs.KIND and ref.get("controller"):
            return ("CostJob", str(meta.get("namespace") or ""), str(ref.get("name")))
    return None


class Manager:
    """Sources feed keys into one queue; workers run the reconciler of each key's kind."""

    def __init__(
        self,
        client: lightkube.AsyncClient,
        settings: config.ControllerSettings,
        *,
        ledger_dsn: str | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.queue: workqueue.WorkQueue[Key] = workqueue.WorkQueue()
        # The queue's series, looked up once: every watch event enqueues a few keys.
        self._adds = metrics.WORKQUEUE_ADDS.labels(name=QUEUE_NAME)
        self._depth = metrics.WORKQUEUE_DEPTH.labels(name=QUEUE_NAME)
        # Cleared while the Lease cannot be renewed: workers hold still, caches keep syncing.
        self.leading = asyncio.Event()
        self.leading.set()
        # With leader election: whether the Lease is fresh enough to act on (see leader.holds).
        self.may_act: Callable[[], bool] = lambda: True
        self._watch_own_kinds(client)
        self.reconcilers: dict[str, KeyReconciler] = {
            "PriceBook": pricebook.PriceBookReconciler(client, settings, self.pricebooks.store),
            "CostJob": costjob.CostJobReconciler(client, settings),
            "FinOpsProvider": finopsprovider.ProviderReconciler(client, settings),
        }
        # Offerings and Subscriptions: their sources, caches, fan-out and reconcilers.
        self.hierarchy = hierarchy_watch.Wiring(
            client,
            settings,
            self.enqueue,
            self.pricebooks.store,
            ledger_dsn=ledger_dsn,
            pending=self.queue.pending,
        )
        self.sources.extend(self.hierarchy.sources)
        self.reconcilers.update(self.hierarchy.reconcilers)
        # Budgets are only read for their metrics: no reconciler, and the workers do not
        # wait for this cache.
        self.budgets = watch.Source(client, resources.Budget, lambda *_: None, bodies.as_budget)
        if ledger_dsn is not None:
            period_metrics.install(metrics.REGISTRY, ledger_dsn, settings.cluster_id)
        cost_metrics.install(
            metrics.REGISTRY,
            lambda: list(self.hierarchy.subscription_source.store.values()),
            lambda: list(self.pricebooks.store.values()),
            lambda: list(self.costjobs.store.values()),
            lambda: list(self.budgets.store.values()),
        )

    def _watch_own_kinds(self, client: lightkube.AsyncClient) -> None:
        """Typed watch stores of PriceBooks, CostJobs and the provider; the CronJobs and
        Secrets the CostJobs own are watched only to wake their owner."""
        owned = {costjobs.MANAGED_BY_LABEL: costjobs.MANAGED_BY}
        self.pricebooks = watch.Source(
            client, resources.PriceBook, self._on_pricebook, bodies.as_pricebook
        )
        self.costjobs = watch.Source(client, resources.CostJob, self._on_costjob, bodies.as_costjob)
        self.providers = watch.Source(
            client,
            resources.FinOpsProvider,
            self._on_provider,
            bodies.as_finops_provider,
            namespaced=False,
        )
        self.sources: list[watch.Source[Any]] = [
            self.pricebooks,
            self.costjobs,
            self.providers,
            watch.Source(client, batch_v1.CronJob, self._on_owned, watch.raw, labels=owned),
            watch.Source(client, core_v1.Secret, self._on_owned, watch.raw, labels=owned),
        ]

    def enqueue(self, key: Key) -> None:
        self._adds.inc()
        self.queue.add(key)
        self._depth.set(len(self.queue))

    def _on_pricebook(
        self, kind: str, old: bodies.PriceBookBody | None, new: bodies.PriceBookBody | None
    ) -> None:
        if spec_or_meta_changed(old, new):
            self.enqueue(pricebook.KEY)
        self.hierarchy.on_pricebook(old, new)

    def _on_costjob(
        self, kind: str, old: bodies.CostJobBody | None, new: bodies.CostJobBody | None
    ) -> None:
        if new is not None and spec_or_meta_changed(old, new):
            ns, name = watch.object_key(new)
            self.enqueue(("CostJob", ns, name))

    def _on_provider(
        self,
        kind: str,
        old: bodies.FinOpsProviderBody | None,
        new: bodies.FinOpsProviderBody | None,
    ) -> None:
        if new is not None and spec_or_meta_changed(old, new):
            self.enqueue(("FinOpsProvider", "", watch.object_key(new)[1]))

    def _on_owned(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """Any change to a CronJob or Secret we own wakes its CostJob (hand edits revert)."""
        owner = owner_costjob(new or old or {})
        if owner is not None:
            self.enqueue(owner)

    def resync_keys(self) -> list[Key]:
        keys: list[Key] = []
        if self.pricebooks.store:
            keys.append(pricebook.KEY)
        keys.extend(("CostJob", ns, name) for ns, name in self.costjobs.store)
        keys.extend(("FinOpsProvider", "", name) for _, name in self.providers.store)
        keys.extend(self.hierarchy.resync_keys())
        return keys

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            for key in self.resync_keys():
                self.enqueue(key)

    def pause(self) -> None:
        """Stop taking keys (the Lease could not be renewed); in-flight ones finish."""
        self.leading.clear()
        metrics.LEADER.labels(name=leader.ELECTION_ID).set(0)

    def resume(self) -> None:
        self.leading.set()
        metrics.LEADER.labels(name=leader.ELECTION_ID).set(1)

    async def _worker(self) -> None:
        while True:
            await self.leading.wait()
            try:
                key = await self.queue.get()
            except workqueue.ShutDownError:
                return
            self._depth.set(len(self.queue))
            while not self.may_act():  # renewal overdue: hold the key until it is renewed
                await asyncio.sleep(0.1)
            rec = self.reconcilers[key[0]]
            started = time.monotonic()
            try:
                requeue = await rec.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self.queue.add_rate_limited(key)
                metrics.RECONCILE_ERRORS.labels(controller=rec.controller).inc()
                metrics.RECONCILE_TOTAL.labels(controller=rec.controller, result="error").inc()
                metrics.WORKQUEUE_RETRIES.labels(name=QUEUE_NAME).inc()
                log.error(
                    "reconcile failed",
                    extra={
                        "controller": rec.controller,
                        "key": "/".join(key[1:]),
                        "error": str(exc),
                        "retry_in": delay,
                    },
                    exc_info=not isinstance(exc, lightkube.ApiError),
                )
            else:
                self.queue.forget(key)
                result = "success"
                if requeue:
                    self.queue.add_after(key, requeue)
                    result = "requeue_after"
                metrics.RECONCILE_TOTAL.labels(controller=rec.controller, result=result).inc()
            finally:
                metrics.RECONCILE_TIME.labels(controller=rec.controller).observe(
                    time.monotonic() - started
                )
                self.queue.done(key)

    async def run(self, stop: asyncio.Event) -> None:
        """Sync every cache, then reconcile until `stop` is set."""
        tasks = [asyncio.create_task(s.run(), name=f"watch-{s.name}") for s in self.sources]
        tasks.append(asyncio.create_task(self.budgets.run(), name="watch-Budget"))
        try:
            await asyncio.gather(*(s.synced.wait() for s in self.sources))
            log.info("caches synced; starting workers", extra={"workers": self.settings.workers})
            tasks.append(asyncio.create_task(self._resync(), name="resync"))
            tasks.extend(
                asyncio.create_task(self._worker(), name=f"worker-{i}")
                for i in range(self.settings.workers)
            )
            await stop.wait()
        finally:
            await self.queue.shutdown()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.hierarchy.aclose()


def _waiting_for_database(exc: Exception, wait: float) -> None:
    log.info("waiting for PostgreSQL", extra={"reason": str(exc), "retryInSeconds": wait})


def migrate_database(dsn: str) -> list[int]:
    """Apply pending SQL migrations under the store's advisory lock, once PostgreSQL accepts
    connections (a fresh install starts the manager beside its database); a failure to
    connect is reported without the password."""
    from finops.store import migrate, pool, unit

    pool.wait_until_reachable(dsn, on_retry=_waiting_for_database)
    with unit.connect(dsn) as conn:
        return [m.version for m in migrate.apply(conn)]


def _identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def metrics_tls(args: argparse.Namespace) -> serving.TLS:
    """The metrics certificate: the files under `--metrics-cert-path`, re-read when they
    change, or a self-signed one when no path is given (the reference's two cases).

    Raises `serving.CertificateError` when the given files cannot be loaded.
    """
    if not args.metrics_cert_path:
        fixed = serving.self_signed_context()
        return lambda: fixed
    crt, key = serving.cert_files(
        args.metrics_cert_path, args.metrics_cert_name, args.metrics_cert_key
    )
    reloader = serving.CertificateReloader(crt, key, "metrics")
    reloader.check()
    log.info("serving metrics with the certificate from %s", crt)
    return reloader.context


async def _start_servers(
    args: argparse.Namespace, ready: Callable[[], bool], client: lightkube.AsyncClient
) -> list[asyncio.Server]:
    servers: list[asyncio.Server] = []

    async def ok() -> tuple[int, str, bytes]:
        return 200, "text/plain", b"ok\n"

    async def readyz() -> tuple[int, str, bytes]:
        return (200, "text/plain", b"ok\n") if ready() else (503, "text/plain", b"not ready\n")

    async def metrics_route() -> tuple[int, str, bytes]:
        return 200, "text/plain; version=0.0.4; charset=utf-8", metrics.exposition()

    probe = serving.parse_bind_address(args.health_probe_bind_address)
    if probe is not None:
        servers.append(await serving.serve(probe, {"/healthz": ok, "/readyz": readyz}))
    addr = serving.parse_bind_address(args.metrics_bind_address)
    if addr is not None:
        if args.metrics_secure:
            guard = reviews.MetricsAuthorizer(client).check
            servers.append(
                await serving.serve(
                    addr, {"/metrics": metrics_route}, tls=metrics_tls(args), guard=guard
                )
            )
        else:
            servers.append(await serving.serve(addr, {"/metrics": metrics_route}))
    return servers


async def run(args: argparse.Namespace, settings: config.ControllerSettings) -> int:
    """The manager's whole life; returns the process exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    client = kube_client.make_client()
    state = {"ready": False}
    try:
        servers = await _start_servers(args, lambda: state["ready"], client)
    except (serving.CertificateError, OSError) as err:
        log.error("cannot serve probes or metrics", extra={"error": str(err)})
        await client.close()
        return 1
    elector: leader.LeaderElector | None = None
    code = 0
    try:
        if settings.enable_webhooks:  # every replica serves them, leader or standby
            hook = await webhooks.start(
                client,
                settings.webhook_bind_address,
                args.webhook_cert_path,
                args.webhook_cert_name,
                args.webhook_cert_key,
            )
            servers.extend([hook] if hook is not None else [])
        if args.leader_elect:
            elector = _elector(client, settings)
            state["ready"] = True
            log.info("waiting for leadership", extra={"identity": elector.identity})
            if not await elector.acquire(stop):
                return 0
            metrics.LEADER.labels(name=leader.ELECTION_ID).set(1)
        state["ready"] = True
        ledger_dsn = None if args.skipDBConnection else settings.postgres_dsn
        manager = Manager(client, settings, ledger_dsn=ledger_dsn)
        jobs: list[asyncio.Task[Any]] = [asyncio.create_task(manager.run(stop))]
        if elector is not None:
            manager.may_act = elector.holds
            renewing = elector.keep_renewing(stop, manager.pause, manager.resume)
            jobs.append(asyncio.create_task(renewing))
        code = await _until_first_ends(jobs, stop)
    except webhooks.StartError as exc:
        log.error("webhook server failed to start", extra={"error": str(exc)})
        code = 1
    finally:
        if elector is not None and code == 0:
            with contextlib.suppress(Exception):
                await elector.release()
        metrics.LEADER.labels(name=leader.ELECTION_ID).set(0)
        for server in servers:
            server.close()
        with contextlib.suppress(Exception):
            await client.close()
    log.info("manager stopped", extra={"exit_code": code})
    return code


def _elector(
    client: lightkube.AsyncClient, settings: config.ControllerSettings
) -> leader.LeaderElector:
    """Lease timings derived from the lease duration, as controller-runtime's defaults are."""
    return leader.LeaderElector(
        client,
        namespace=settings.pod_namespace,
        identity=_identity(),
        lease_duration=settings.lease_duration_seconds,
        renew_deadline=settings.lease_duration_seconds * 2 / 3,
        retry_period=max(0.5, settings.lease_duration_seconds / 7.5),
    )


async def _until_first_ends(jobs: list[asyncio.Task[Any]], stop: asyncio.Event) -> int:
    """Wait for the first job to end, stop the others; 1 when one ended by failing."""
    code = 0
    done, _ = await asyncio.wait(jobs, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        exc = task.exception()
        if isinstance(exc, leader.LostLeadershipError):
            log.error("another replica leads now; exiting", extra={"error": str(exc)})
            code = 1
        elif exc is not None:
            log.error("manager failed", extra={"error": repr(exc)})
            code = 1
    stop.set()
    await asyncio.gather(*jobs, return_exceptions=True)
    return code


def main(args: argparse.Namespace, environ: dict[str, str] | None = None) -> int:
    """Entry for `--mode=controller`: check env, migrate, run the loop (logging is set up
    from the `--zap-*` flags by the caller)."""
    env = dict(os.environ if environ is None else environ)
    try:
        settings = config.from_env(env)
    except config.ConfigError as exc:
        log.error(str(exc))
        print(f"finops-operator: {exc}", file=sys.stderr)
        return 1
    if args.skipDBConnection:
        log.info("skipping database connection and migrations (--skipDBConnection)")
    else:
        try:
            applied = migrate_database(settings.postgres_dsn)
        except Exception as exc:
            log.error("database migrations failed", extra={"error": str(exc)})
            return 1
        log.info("database migrations applied", extra={"applied": applied})
    return asyncio.run(run(args, settings))

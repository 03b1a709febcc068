"""What the fault tests share: a scripted scenario ("universe"), job runs as killable processes
or in-process, the canonical ledger dump, and the invariants checked after every fault.

A universe is one namespace of Offerings, Subscriptions and two CostJobs plus one ledger
database. Two universes built from the same script differ only in identities the API server
and PostgreSQL hand out (object UIDs, namespace, resourceVersions, surrogate ids, wall-clock
`first_seen_at`); the canonical dump replaces those by names and natural keys, so a faulted
universe can be compared with an uninterrupted one row for row, every other column included.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import psycopg
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from psycopg import conninfo

from finops.jobs import allocations as allocation_job
from finops.jobs import charges as charge_job
from finops_devenv import controlplane

REPO = pathlib.Path(__file__).resolve().parents[2]
FIGURES_DIR = REPO / "build" / "faults"
GROUP = "/apis/finops.stakater.com/v1alpha1"
FINALIZER = "subscriptions.finops.stakater.com/finalizer"
UTC = dt.UTC
HOUR = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)
DAY0 = dt.datetime(2026, 11, 2, tzinfo=UTC)
CLUSTER = "faults"
TENANT_LABELS = {"stakater.com/tenant": "acme", "team": "faults"}
AGGREGATE = "namespace,pod,container"
ALLOCATIONS, CHARGES = "allocations", "charges"
CHARGE_WRITES = ("subscription_charges", "finops_charge_partition")
"""The statements a charge run writes the ledger in: the charge rows, and the month partition
it makes first when the month has none yet (which waits for any lock on the ledger too)."""
FEE_SOURCE = "subscription"


def rfc(t: dt.datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def write_figures(case: str, figures: Mapping[str, Any]) -> None:
    """Print a case's figures and keep them in build/faults/ (git-ignored) for the docs table."""
    FIGURES_DIR.mkdir(parents=True, exist_ok=True)
    text = json.dumps(dict(figures), indent=2, sort_keys=True, default=str)
    (FIGURES_DIR / f"{case}.json").write_text(text + "\n")
    print(f"\n[faults] {case}: {text}")


# ---------------------------------------------------------------- the scripted scenario


OFFERINGS: dict[str, dict[str, Any]] = {
    "hourly": {
        "subscriptionFee": {
            "tickAlignment": "ActivatedAt",
            "period": "60m",
            "priceMicros": 1_000_000,
            "minPeriods": 2,
        }
    },
    "hour-boundary": {
        "subscriptionFee": {"tickAlignment": "HourBoundary", "period": "1", "priceMicros": 400_000}
    },
    "metered": {
        "resourcePricing": [
            {"name": "cpuHour", "margins": {"factorMilli": 1200}},
            {"name": "ramGbHour"},
            {"name": "pvGbHour"},
            {"name": "networkGb", "margins": {"absoluteMicros": 50}},
        ]
    },
    "mixed": {
        "subscriptionFee": {
            "tickAlignment": "HourBoundary",
            "period": "2",
            "priceMicros": 3_000_000,
        },
        "resourcePricing": [{"name": "cpuHour", "margins": {"absoluteMicros": 100}}],
    },
}
BOOK_RATES = {"cpuHour": "0.031", "ramGbHour": "0.004", "pvGbHour": "0.0002", "networkGiB": "0.09"}


@dataclasses.dataclass(frozen=True)
class SubPlan:
    """One Subscription of the script: when it activates, and whether and when it goes."""

    name: str
    offering: str
    sources: tuple[tuple[tuple[str, str], ...], ...]
    activated: dt.datetime
    deactivated: dt.datetime | None = None

    @property
    def deleted(self) -> bool:
        return self.deactivated is not None


def script(count: int, namespaces: int, deactivate_every: int, last_hour: int) -> list[SubPlan]:
    """`count` Subscriptions activated in hour 0 over every Offering; every
    `deactivate_every`-th one is deactivated and deleted at a spread of hours up to
    `last_hour` (see `Universe.churn`), so finalizers wait for the charge job all along."""
    plans: list[SubPlan] = []
    names = list(OFFERINGS)
    for i in range(count):
        offering = names[i % len(names)]
        sources: tuple[tuple[tuple[str, str], ...], ...] = ()
        if "resourcePricing" in OFFERINGS[offering]:
            sources = ((("namespace", f"ns-{i % namespaces:04d}"),),)
            if i % 3 == 0:
                sources += ((("namespace", f"ns-{(i + 1) % namespaces:04d}"),),)
        deactivated = None
        if i % deactivate_every == deactivate_every - 1:
            k = i // deactivate_every
            deactivated = DAY0 + HOUR * (1 + k % max(1, last_hour - 1)) + MINUTE * (i % 7)
        activated = DAY0 + MINUTE * (i % 55)
        plans.append(SubPlan(f"sub-{i:03d}", offering, sources, activated, deactivated))
    return plans


@dataclasses.dataclass
class Universe:
    """One namespace of scripted objects and one ledger database."""

    kube: controlplane.ControlPlane
    namespace: str
    dsn: str
    opencost_url: str
    app: str = dataclasses.field(default_factory=lambda: f"faults-{uuid.uuid4().hex[:8]}")

    @property
    def job_dsn(self) -> str:
        """The DSN the jobs get: tagged, so `pg_stat_activity` shows which sessions are theirs."""
        return conninfo.make_conninfo(self.dsn, application_name=self.app)

    def job_env(self, mode: str, hour: dt.datetime, costjob: str | None = None) -> dict[str, str]:
        scheduled = hour + 7 * MINUTE
        env = {
            "POSTGRES_CONNECTION_STRING": self.job_dsn,
            "CLUSTER_ID": CLUSTER,
            "SCHEDULED_TIMESTAMP": rfc(scheduled),
            "FAULTS_NOW": scheduled.isoformat(),
            "KUBECONFIG": str(self.kube.kubeconfig),
            "COSTJOB_NAMESPACE": self.namespace,
        }
        if mode == ALLOCATIONS:
            env |= {
                "COSTJOB_NAME": costjob or "allocations",
                "OPENCOST_CONNECTION_STRING": self.opencost_url,
                "OPENCOST_AGGREGATE": AGGREGATE,
                "HOURS_LOOKBACK": "2",
            }
        else:
            env |= {"COSTJOB_NAME": costjob or "charges", "FAULTS_NAMESPACE": self.namespace}
        return env

    def spawn(self, mode: str, hour: dt.datetime, costjob: str | None = None) -> JobProcess:
        return JobProcess(mode, self.job_env(mode, hour, costjob))

    def run(self, mode: str, hour: dt.datetime, costjob: str | None = None) -> tuple[int, Timeline]:
        """One uninterrupted run in this process (same `run` the binary calls), timed."""
        return self.run_env(mode, self.job_env(mode, hour, costjob))

    def run_env(self, mode: str, env: dict[str, str]) -> tuple[int, Timeline]:
        """`run` with the environment given (e.g. `job_env` plus a setting)."""
        now = parse_time(env["FAULTS_NOW"])

        async def go() -> int:
            client = AsyncClient(config=KubeConfig.from_file(str(self.kube.kubeconfig)))
            try:
                if mode == ALLOCATIONS:
                    return await allocation_job.run(env, now=lambda: now, kube=client)
                return await charge_job.run(
                    env, now=lambda: now, kube=client, namespace=self.namespace
                )
            finally:
                await client.close()

        with timeline() as seen:
            code = asyncio.run(go())
        return code, seen

    # -- objects ---------------------------------------------------------------------------

    def post(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        with self.kube.http() as client:
            resp = client.post(f"{GROUP}/namespaces/{self.namespace}/{plural}", json=body)
        assert resp.status_code == 201, resp.text
        created: dict[str, Any] = resp.json()
        return created

    def put_status(self, name: str, **fields: Any) -> None:
        """Set status fields (read, change, write; again when the controller wrote first)."""
        url = f"{GROUP}/namespaces/{self.namespace}/subscriptions/{name}"
        with self.kube.http() as client:
            for _ in range(20):
                obj = client.get(url).json()
                obj["status"] = {**(obj.get("status") or {}), **fields}
                resp = client.put(f"{url}/status", json=obj)
                if resp.status_code != 409:
                    break
        assert resp.status_code == 200, resp.text

    def populate(self, plans: list[SubPlan], costjobs: Mapping[str, str] | None = None) -> None:
        """Offerings, CostJobs and Subscriptions as the controller would leave them: our
        finalizer on and `activatedAt` stamped."""
        self.kube.create_namespace(self.namespace, labels=TENANT_LABELS)
        for name, pricing in OFFERINGS.items():
            self.post("offerings", make_object("Offering", name, {"pricing": pricing}))
        jobs = costjobs or {
            "allocations": "ResourceCostCollection",
            "charges": "SubscriptionChargeCollection",
        }
        for name, kind in jobs.items():
            spec: dict[str, Any] = {"type": kind, "interval": "1h"}
            if name.endswith("sharded"):
                spec["sharding"] = {"namespacesPerShard": 3, "concurrency": 2}
            self.post("costjobs", make_object("CostJob", name, spec))
        for plan in plans:
            spec = {"offeringRef": {"name": plan.offering, "namespace": self.namespace}}
            if plan.sources:
                spec["usageSources"] = [dict(s) for s in plan.sources]
            body = make_object("Subscription", plan.name, spec)
            body["metadata"]["finalizers"] = [FINALIZER]
            self.post("subscriptions", body)
            self.put_status(plan.name, activatedAt=rfc(plan.activated), ready="True")

    def churn(self, plans: list[SubPlan], hour: dt.datetime) -> None:
        """Deactivate and delete the Subscriptions the script ends in this hour (before its
        runs), as the controller does when a Subscription is deleted."""
        with self.kube.http() as client:
            for plan in plans:
                if plan.deactivated is None or not hour <= plan.deactivated < hour + HOUR:
                    continue
                self.put_status(plan.name, deactivatedAt=rfc(plan.deactivated))
                url = f"{GROUP}/namespaces/{self.namespace}/subscriptions/{plan.name}"
                assert client.delete(url).status_code in (200, 202)

    def subscriptions(self) -> dict[str, dict[str, Any]]:
        with self.kube.http() as client:
            resp = client.get(f"{GROUP}/namespaces/{self.namespace}/subscriptions")
        resp.raise_for_status()
        return {o["metadata"]["name"]: o for o in resp.json()["items"]}

    def costjob_history(self, name: str) -> list[dict[str, Any]]:
        with self.kube.http() as client:
            obj = client.get(f"{GROUP}/namespaces/{self.namespace}/costjobs/{name}").json()
        history: list[dict[str, Any]] = (obj.get("status") or {}).get("executionHistory") or []
        return history

    def snapshot(self) -> Snapshot:
        subs = self.subscriptions()
        return Snapshot(
            ledger_dump(self.dsn, self.namespace),
            frozenset(subs),
            {n: (o.get("status") or {}).get("costs") for n, o in subs.items()},
        )


def make_object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


# ---------------------------------------------------------------- job runs


Timeline = list[tuple[float, str]]
"""(seconds since the run started, log message) of one run."""


@contextlib.contextmanager
def timeline() -> Iterator[Timeline]:
    """The job loggers' messages with their offsets, for an in-process run."""
    seen: Timeline = []
    started = time.monotonic()

    class Tap(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append((time.monotonic() - started, record.getMessage()))

    tap = Tap(logging.INFO)
    logger = logging.getLogger("finops.jobs")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(tap)
    try:
        yield seen
    finally:
        logger.removeHandler(tap)
        logger.setLevel(old_level)


def offset_of(seen: Timeline, prefix: str) -> float | None:
    return next((t for t, msg in seen if msg.startswith(prefix)), None)


class JobProcess:
    """`python -m tests.faults._jobrun MODE`: a real process whose JSON log lines are read as
    they arrive, so a kill can be aimed at a phase."""

    def __init__(self, mode: str, env: Mapping[str, str]) -> None:
        keep = ("PATH", "HOME", "LANG", "TMPDIR", "VIRTUAL_ENV")
        child_env = {k: os.environ[k] for k in keep if k in os.environ}
        child_env |= {"PYTHONPATH": str(REPO), **env}
        self.mode = mode
        self.started = time.monotonic()
        self.seen: Timeline = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.faults._jobrun", mode],
            cwd=REPO,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").strip()
            try:
                msg = str(json.loads(line)["msg"])
            except (ValueError, KeyError, TypeError):
                msg = line
            with self._cond:
                self.seen.append((time.monotonic() - self.started, msg))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_message(self, prefix: str, timeout: float = 60.0) -> bool:
        """Block until a log line starts with `prefix`; False when the process ended first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if any(m.startswith(prefix) for _, m in self.seen):
                    return True
                if self.proc.poll() is not None and not self._reader.is_alive():
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))

    def last_message(self) -> str:
        with self._cond:
            return self.seen[-1][1] if self.seen else ""

    def kill(self) -> bool:
        """SIGKILL now; True when the process was still running (a real kill)."""
        if self.proc.poll() is not None:
            return False
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=5)
        return self.proc.returncode == -signal.SIGKILL

    def wait(self, timeout: float = 120.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def output(self) -> str:
        with self._cond:
            return "\n".join(m for _, m in self.seen)


# ---------------------------------------------------------------- PostgreSQL probes


@contextlib.contextmanager
def table_locked(dsn: str, table: str) -> Iterator[None]:
    """Hold a lock that blocks writers of `table` (readers pass) until the block ends."""
    with psycopg.connect(dsn) as conn:
        conn.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE".encode())
        try:
            yield
        finally:
            conn.rollback()


def waiting_on_lock(dsn: str, app: str, *statements: str) -> int:
    """How many of the jobs' sessions wait for a lock inside a statement containing any of
    `statements`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND wait_event_type = 'Lock' AND query ILIKE ANY(%s)",
            (app, [f"%{s}%" for s in statements]),
        ).fetchone()
    return int(row[0]) if row else 0


def asking_for_migration_lock(dsn: str, app: str) -> int:
    """How many of the jobs' sessions are asking for the migrations' advisory lock: the
    runner asks again and again (`pg_try_advisory_lock`) rather than blocking in the server,
    so such a session sits idle between tries with that question as its last statement."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND query ILIKE '%%pg_try_advisory_lock%%'",
            (app,),
        ).fetchone()
    return int(row[0]) if row else 0


def wait_until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# ---------------------------------------------------------------- the canonical ledger dump


_DUMPS = {
    "pricebooks": "SELECT (to_jsonb(p) - 'id')::text FROM pricebooks p",
    "provider_allocations": """
        SELECT (to_jsonb(a) - 'pricebook_id'
                || jsonb_build_object('pricebook', p.book_uid || '/' || p.rates_digest))::text
        FROM provider_allocations a JOIN pricebooks p ON p.id = a.pricebook_id""",
    "offering_versions": """
        SELECT (to_jsonb(o) - 'id' - 'uid' - 'resource_version' - 'first_seen_at')::text
        FROM offering_versions o""",
    "subscription_versions": """
        SELECT (to_jsonb(v) - 'id' - 'uid' - 'resource_version' - 'first_seen_at'
                - 'labels_digest')::text
        FROM subscription_versions v""",
    "subscription_charges": """
        SELECT (to_jsonb(c) - 'subscription_uid' - 'offering_version_id'
                - 'subscription_version_id' - 'pricebook_id'
                || jsonb_build_object(
                    'subscription', s.name, 'own_version', s.uid = c.subscription_uid,
                    'subscription_generation', s.generation, 'labels', s.namespace_labels,
                    'offering', o.name, 'offering_generation', o.generation,
                    'pricebook', p.book_uid || '/' || p.rates_digest))::text
        FROM subscription_charges c
        JOIN subscription_versions s ON s.id = c.subscription_version_id
        JOIN offering_versions o ON o.id = c.offering_version_id
        LEFT JOIN pricebooks p ON p.id = c.pricebook_id""",
    "billing_periods": "SELECT (to_jsonb(b) - 'closed_at')::text FROM billing_periods b",
    "charge_corrections": """
        SELECT (to_jsonb(k) - 'id' - 'subscription_uid' - 'offering_version_id'
                - 'subscription_version_id' - 'pricebook_id'
                || jsonb_build_object(
                    'subscription', s.name, 'offering', o.name,
                    'pricebook', p.book_uid || '/' || p.rates_digest))::text
        FROM charge_corrections k
        JOIN subscription_versions s ON s.id = k.subscription_version_id
        JOIN offering_versions o ON o.id = k.offering_version_id
        LEFT JOIN pricebooks p ON p.id = k.pricebook_id""",
}


def ledger_dump(dsn: str, namespace: str) -> dict[str, list[str]]:
    """Every row of every ledger table as sorted JSON text: all columns, with the identities
    two universes cannot share replaced (UIDs and surrogate ids by names and natural keys,
    the namespace by a placeholder) and the wall-clock `first_seen_at`, the first-seen
    `resource_version` and `labels_digest` (a digest of the labels, namespace name included;
    the labels themselves are compared) left out."""
    dump: dict[str, list[str]] = {}
    with psycopg.connect(dsn) as conn:
        for table, query in _DUMPS.items():
            rows = conn.execute(query.encode()).fetchall()
            dump[table] = sorted(str(r[0]).replace(namespace, "<ns>") for r in rows)
    return dump


def rows_in(dump: Mapping[str, list[str]]) -> int:
    return sum(len(rows) for rows in dump.values())


def charges_by_subscription(dump: Mapping[str, list[str]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for text in dump["subscription_charges"]:
        row = json.loads(text)
        out.setdefault(row["subscription"], []).append(row)
    return out


def allocations_by_hour(dump: Mapping[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for text in dump["provider_allocations"]:
        out.setdefault(json.loads(text)["hour"], []).append(text)
    return out


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """A universe between runs: its ledger, which Subscriptions exist, and their costs."""

    ledger: dict[str, list[str]]
    present: frozenset[str]
    costs: dict[str, Any]


# ---------------------------------------------------------------- invariants


def costs_disagreements(
    snapshot: Snapshot, scheduled: dt.datetime, names: frozenset[str] | None = None
) -> list[str]:
    """Every way a Subscription's `status.costs` differs from its ledger rows: each bucket's
    fee entry must equal the fee rows of the hours it has closed, each meter the usage rows
    of its window up to the scheduled hour, and `current` their sum."""
    rows = charges_by_subscription(snapshot.ledger)
    problems: list[str] = []
    anchor = scheduled.replace(minute=0, second=0, microsecond=0)
    for name in sorted(names if names is not None else snapshot.present):
        buckets = snapshot.costs.get(name)
        if not buckets:
            problems.append(f"{name}: no status.costs")
            continue
        mine = [
            (parse_time(r["hour"]), r["source"], int(r["amount_micros"]))
            for r in rows.get(name, [])
        ]
        for bucket in buckets:
            start, end = parse_time(bucket["start"]), parse_time(bucket["endExclusive"])
            want: dict[str, int] = {}
            for hour, source, amount in mine:
                closed = hour < min(end, anchor) if source == FEE_SOURCE else hour <= anchor
                if start <= hour < end and closed:
                    want[source] = want.get(source, 0) + amount
            got = {b["name"]: int(b.get("current") or 0) for b in bucket.get("breakdown") or []}
            want = {k: v for k, v in want.items() if v}
            got = {k: v for k, v in got.items() if v}
            if got != want or int(bucket.get("current") or 0) != sum(want.values()):
                problems.append(f"{name} {bucket['granularity']}: status {got} ledger {want}")
    return problems

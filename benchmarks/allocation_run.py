"""One `--mode=cronjob` run over a generated cluster at three sizes, against a raw `COPY`.

Why a ratio: the run's rows/s depends on the machine; dividing by a raw `COPY` of the very
same rows into a bare table (no key, no index, no upsert) measured in the same run says what
fetching from OpenCost, decoding exactly, staging and merging cost on top of the cheapest
possible load. Everything is real: a kube-apiserver (the run reads its CostJob and its
PriceBook), PostgreSQL, and the OpenCost replay server in its own process. The replay server
builds every answer once before timing and then serves the same bytes (`--prebuilt`), so the
stand-in costs what sending bytes costs, not what generating JSON costs.

The run is its own process (as a CronJob's pod is), so its peak RSS (`VmHWM`) is the job's
alone; it times `collect` (everything between reading the CostJob and recording the outcome)
and its phases.

    .venv/bin/python -m benchmarks.allocation_run [--namespaces 125 --pods 100 --lookback 4]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import psycopg
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from psycopg.types.json import Jsonb

from finops.jobs import allocations as job
from finops.jobs import settings as job_settings
from finops.kube import costjobs
from finops.opencost import client as opencost_client
from finops.opencost import config as opencost_config
from finops.store import migrate
from finops_devenv import controlplane, ports, postgres

CRDS = pathlib.Path(__file__).resolve().parents[1] / "deploy" / "crds"
SCHEDULED = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)
GROUP = "/apis/finops.stakater.com/v1alpha1"
TARGET_RATIO = 0.5
TARGET_RSS_MB = 150.0


def _costjob_spec(args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "ResourceCostCollection", "interval": "1h"}
    if args.shard > 0:
        spec["sharding"] = {"namespacesPerShard": args.shard, "concurrency": args.concurrency}
    return spec


def _setup_kube(cp: controlplane.ControlPlane, spec: Mapping[str, Any]) -> None:
    cp.create_namespace("bench")
    book = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "PriceBook",
        "metadata": {"name": "bench", "namespace": "bench"},
        "spec": {"currency": "USD", "valuationMode": "currency", "rates": {"cpuHour": "0.031"}},
    }
    costjob = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": "collect", "namespace": "bench"},
        "spec": dict(spec),
    }
    with cp.http() as client:
        obj = client.post(f"{GROUP}/namespaces/bench/pricebooks", json=book).json()
        obj["status"] = {"active": True, "ready": "True"}
        client.put(f"{GROUP}/namespaces/bench/pricebooks/bench/status", json=obj).raise_for_status()
        client.post(f"{GROUP}/namespaces/bench/costjobs", json=costjob).raise_for_status()


def _env(dsn: str, url: str, lookback: int) -> dict[str, str]:
    return {
        "COSTJOB_NAME": "collect",
        "COSTJOB_NAMESPACE": "bench",
        "POSTGRES_CONNECTION_STRING": dsn,
        "OPENCOST_CONNECTION_STRING": url,
        "SCHEDULED_TIMESTAMP": SCHEDULED.isoformat(),
        "HOURS_LOOKBACK": str(lookback),
        "OPENCOST_FETCH_TIMEOUT": "10m",
    }


def _child(kubeconfig: str) -> int:
    """The timed run, in this process of its own: one JSON line of figures on stdout."""
    env = dict(os.environ)

    async def go() -> tuple[float, job.RunResult]:
        client = AsyncClient(config=KubeConfig.from_file(kubeconfig))
        try:
            costjob = await costjobs.get_costjob(client, "bench", "collect")
            started = time.perf_counter()
            settings = job_settings.JobSettings.from_env(env)
            result = await job.collect(client, settings, SCHEDULED, costjob)
            return time.perf_counter() - started, result
        finally:
            await client.close()

    seconds, result = asyncio.run(go())
    status = pathlib.Path("/proc/self/status").read_text()
    hwm = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    figures = {
        "seconds": seconds,
        "rows_changed": result.rows_written,
        "peak_rss_kib": int(hwm.split()[1]),
        "phases": dataclasses.asdict(result.phases),
    }
    print(json.dumps(figures))
    return 0


def _run_child(cp: controlplane.ControlPlane, env: Mapping[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.allocation_run", "--child", str(cp.kubeconfig)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the allocation run failed:\n{done.stderr[-4000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _raw_copy(dsn: str) -> tuple[int, float]:
    """COPY the rows the run wrote, as Python values, into a bare table of the same columns."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT * FROM provider_allocations").fetchall()
        conn.execute("CREATE TABLE bare AS SELECT * FROM provider_allocations WITH NO DATA")
        conn.commit()
        started = time.perf_counter()
        with conn.cursor() as cur, cur.copy("COPY bare FROM STDIN") as copy:
            for row in rows:
                copy.write_row([Jsonb(v) if isinstance(v, dict) else v for v in row])
        conn.commit()
        return len(rows), time.perf_counter() - started


@contextlib.contextmanager
def _replay_process(namespaces: int, pods: int) -> Iterator[str]:
    """The replay server in its own process, answering from bytes built once."""
    port = ports.free_port()
    command = [sys.executable, "-m", "finops_devenv.opencost_replay", "--port", str(port)]
    command += ["--namespaces", str(namespaces), "--pods", str(pods), "--containers", "1"]
    command += ["--seed", "1", "--prebuilt"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait()


def _warm(env: Mapping[str, str], spec: Mapping[str, Any], lookback: int) -> float:
    """Ask every query the run will ask (same client, same shards) so each answer is built."""

    async def go() -> None:
        cfg = opencost_config.OpenCostConfig.from_sources(spec, env)
        async with opencost_client.OpenCostClient(cfg) as oc:
            for k in range(lookback + 1):
                hour = SCHEDULED - dt.timedelta(hours=k)
                async for _ in opencost_client.iter_hour_lines(oc, hour, cluster="warm"):
                    pass

    started = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - started


@dataclasses.dataclass(frozen=True)
class Trial:
    """One run and the raw `COPY` of its rows right after it, in a fresh database."""

    run_seconds: float
    copy_seconds: float
    peak_rss_mb: float
    phases: dict[str, float]

    @property
    def ratio(self) -> float:
        return self.copy_seconds / self.run_seconds


@dataclasses.dataclass(frozen=True)
class Measured:
    factor: int
    pods: int
    rows: int
    trials: list[Trial]

    @property
    def median(self) -> Trial:
        """The trial with the median ratio (on a shared machine one trial can be unlucky)."""
        return sorted(self.trials, key=lambda t: t.ratio)[len(self.trials) // 2]

    @property
    def peak_rss_mb(self) -> float:
        return max(t.peak_rss_mb for t in self.trials)


def _trial(
    cp: controlplane.ControlPlane, pg: postgres.PostgresCluster, env: dict[str, str]
) -> tuple[int, Trial]:
    dsn = pg.create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate.apply(conn)
    figures = _run_child(cp, {**env, "POSTGRES_CONNECTION_STRING": dsn})
    rows, copy_seconds = _raw_copy(dsn)
    pg.drop_database(str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]))
    trial = Trial(
        figures["seconds"], copy_seconds, figures["peak_rss_kib"] / 1024, figures["phases"]
    )
    return rows, trial


def _measure(
    cp: controlplane.ControlPlane,
    pg: postgres.PostgresCluster,
    args: argparse.Namespace,
    factor: int,
) -> Measured:
    namespaces = args.namespaces * factor
    with _replay_process(namespaces, args.pods) as url:
        env = _env("", url, args.lookback)
        warm = _warm(env, _costjob_spec(args), args.lookback)
        print(f"×{factor}: replay answers built in {warm:.1f} s (not timed)", flush=True)
        trials: list[Trial] = []
        for _ in range(args.trials):
            rows, trial = _trial(cp, pg, env)
            trials.append(trial)
    return Measured(factor, namespaces * args.pods, rows, trials)


def _report(m: Measured, hours: int) -> None:
    t = m.median
    run_rate, copy_rate = m.rows / t.run_seconds, m.rows / t.copy_seconds
    print(f"×{m.factor}: {m.pods:,} pods × {hours} hours = {m.rows:,} rows", end="")
    print(f"  (the median of {len(m.trials)} trials)")
    print(
        f"  allocation run     {run_rate:>9,.0f} rows/s  {1e6 / run_rate:6.1f} µs/row"
        f"  ({t.run_seconds:.2f} s)"
    )
    print(
        f"  raw COPY           {copy_rate:>9,.0f} rows/s  {1e6 / copy_rate:6.1f} µs/row"
        f"  ({t.copy_seconds:.2f} s)"
    )
    ratios = ", ".join(f"{trial.ratio:.3f}" for trial in m.trials)
    print(f"  ratio run/raw COPY {t.ratio:>9.3f}  (trials: {ratios})")
    p = t.phases
    print(
        f"  phases: fetch {p['fetch']:.2f} s (of which decode {p['decode']:.2f} s)"
        f" | writer thread meanwhile: stage {p['stage']:.2f} s, merge {p['merge']:.2f} s"
        f" | drain {p['drain']:.2f} s, finalize {p['finalize']:.2f} s"
    )
    print(f"  job peak RSS (VmHWM) {m.peak_rss_mb:.1f} MB (highest of the trials)", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--namespaces", type=int, default=125, help="namespaces at ×1")
    p.add_argument("--pods", type=int, default=100, help="pods per namespace")
    p.add_argument("--lookback", type=int, default=4, help="HOURS_LOOKBACK (hours = this + 1)")
    p.add_argument("--shard", type=int, default=10, help="namespacesPerShard (0: unsharded)")
    p.add_argument("--concurrency", type=int, default=4, help="shard queries in flight")
    p.add_argument("--sizes", default="1,2,4", help="multiples of --namespaces to run")
    p.add_argument("--trials", type=int, default=3, help="runs per size (the median is shown)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args.child)
    measured: list[Measured] = []
    with controlplane.running(CRDS) as cp, postgres.PostgresCluster() as pg:
        _setup_kube(cp, _costjob_spec(args))
        for factor in (int(f) for f in args.sizes.split(",")):
            measured.append(_measure(cp, pg, args, factor))
            _report(measured[-1], args.lookback + 1)
    largest = measured[-1]
    ratio = largest.median.ratio
    ratio_met = "met" if ratio >= TARGET_RATIO else "not met"
    rss_met = "met" if largest.peak_rss_mb <= TARGET_RSS_MB else "not met"
    print(
        f"target at ×{largest.factor} ({largest.rows:,} rows): ratio {ratio:.3f}"
        f" ≥ {TARGET_RATIO} {ratio_met}; peak RSS {largest.peak_rss_mb:.1f} MB"
        f" ≤ {TARGET_RSS_MB:.0f} MB {rss_met}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One `--mode=cronjob` run over a generated 10k-pod cluster, against a raw `COPY`.

Why a ratio: the run's rows/s depends on the machine; dividing by a raw `COPY` of the very
same rows into a bare table (no key, no index, no upsert) measured in the same process says
what fetching from OpenCost, parsing exactly, staging and upserting cost on top of the
cheapest possible load. Everything is real: a kube-apiserver (the run reads its CostJob and
writes the execution record), PostgreSQL, and the OpenCost replay server.

    .venv/bin/python -m benchmarks.allocation_run [--namespaces 100 --pods 100 --lookback 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import psycopg
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from psycopg.types.json import Jsonb

from finops.devenv import controlplane, postgres
from finops.jobs import allocations as job
from finops.kube import costjobs
from finops.store import migrate

CRDS = pathlib.Path(__file__).resolve().parents[1] / "deploy" / "crds"
SCHEDULED = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)
GROUP = "/apis/finops.stakater.com/v1alpha1"


def _setup_kube(cp: controlplane.ControlPlane) -> None:
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
        "spec": {"type": "ResourceCostCollection", "interval": "1h"},
    }
    with cp.http() as client:
        obj = client.post(f"{GROUP}/namespaces/bench/pricebooks", json=book).json()
        obj["status"] = {"active": True, "ready": "True"}
        client.put(f"{GROUP}/namespaces/bench/pricebooks/bench/status", json=obj).raise_for_status()
        client.post(f"{GROUP}/namespaces/bench/costjobs", json=costjob).raise_for_status()


def _run(
    cp: controlplane.ControlPlane, dsn: str, url: str, lookback: int
) -> tuple[float, job.RunResult]:
    """One run's collection phase (what `--mode=cronjob` does between reading its CostJob
    and writing the execution record), timed as a whole and by phase."""
    env = {
        "COSTJOB_NAME": "collect",
        "COSTJOB_NAMESPACE": "bench",
        "POSTGRES_CONNECTION_STRING": dsn,
        "OPENCOST_CONNECTION_STRING": url,
        "SCHEDULED_TIMESTAMP": SCHEDULED.isoformat(),
        "HOURS_LOOKBACK": str(lookback),
        "OPENCOST_FETCH_TIMEOUT": "10m",
    }

    async def go() -> tuple[float, job.RunResult]:
        client = AsyncClient(config=KubeConfig.from_file(str(cp.kubeconfig)))
        try:
            costjob = await costjobs.get_costjob(client, "bench", "collect")
            started = time.perf_counter()
            result = await job.collect(client, env, SCHEDULED, costjob)
            return time.perf_counter() - started, result
        finally:
            await client.close()

    return asyncio.run(go())


def _raw_copy(dsn: str) -> tuple[int, float]:
    """COPY the rows the run wrote, as binary values, into a bare table of the same columns."""
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
    """The replay server in its own process, so its JSON work does not share our GIL."""
    port = controlplane.free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "finops.devenv.opencost_replay",
            "--port",
            str(port),
            "--namespaces",
            str(namespaces),
            "--pods",
            str(pods),
            "--containers",
            "1",
            "--seed",
            "1",
        ],
        stdout=subprocess.DEVNULL,
    )
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


def _warm(url: str, lookback: int) -> None:
    """Ask for every hour once, so the server's generated cluster is built before timing."""
    for k in range(lookback + 1):
        start = SCHEDULED - dt.timedelta(hours=k)
        window = f"{start:%Y-%m-%dT%H:%M:%SZ},{start + dt.timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}"
        httpx.get(
            f"{url}/allocation/compute",
            params={"window": window, "aggregate": "namespace"},
            timeout=300,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--namespaces", type=int, default=100)
    p.add_argument("--pods", type=int, default=100, help="pods per namespace")
    p.add_argument("--lookback", type=int, default=5)
    args = p.parse_args(argv)

    with (
        controlplane.running(CRDS) as cp,
        postgres.PostgresCluster() as pg,
        _replay_process(args.namespaces, args.pods) as url,
    ):
        _setup_kube(cp)
        dsn = pg.create_database()
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate.apply(conn)
        _warm(url, args.lookback)
        run_seconds, result = _run(cp, dsn, url, args.lookback)
        rows, copy_seconds = _raw_copy(dsn)

    hours = args.lookback + 1
    pods = args.namespaces * args.pods
    print(f"cluster: {pods} pods, {hours} hours (HOURS_LOOKBACK={args.lookback})")
    print(f"rows written:                  {rows:>10,}")
    print(
        f"allocation run:                {rows / run_seconds:>10,.0f} rows/s  ({run_seconds:.1f} s)"
    )
    copy_rate = rows / copy_seconds
    print(f"raw COPY of the same rows:     {copy_rate:>10,.0f} rows/s  ({copy_seconds:.1f} s)")
    print(f"ratio run/raw COPY:            {copy_seconds / run_seconds:>10.3f}")
    write_rate = rows / result.write_seconds
    print(
        f"  of which fetching from OpenCost (replay server + exact parsing): "
        f"{result.fetch_seconds:.1f} s"
    )
    took = result.write_seconds
    print(f"  of which writing the ledger:  {write_rate:>10,.0f} rows/s  ({took:.1f} s)")
    print(f"ratio ledger write/raw COPY:   {copy_seconds / result.write_seconds:>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`--mode=cronjob` end to end: real API server, real PostgreSQL, OpenCost replaying captures."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from tests.e2e import _support
from tests.e2e._support import active_book
from tests.oracle import ledger as oracle_ledger

from finops.jobs import allocations as job
from finops_devenv import controlplane
from finops_devenv import opencost_replay as replay

SCHEDULED = "2026-10-03T10:20:00Z"
HOUR10 = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
GROUP = "/apis/finops.stakater.com/v1alpha1"


@pytest.fixture(scope="module")
def book(kube: controlplane.ControlPlane) -> Iterator[dict[str, Any]]:
    """One annotated PriceBook marked active and ready, as the controller would leave it."""
    rates = {"cpuHour": "0.031", "ramGbHour": "0.004", "networkGiB": "0.09"}
    with active_book(kube, "onprem-standard", rates) as obj:
        yield obj


@pytest.fixture
def costjob(kube: controlplane.ControlPlane, kube_namespace: str) -> dict[str, Any]:
    return _support.create_allocation_costjob(kube, kube_namespace)


def run_job(kube: controlplane.ControlPlane, env: dict[str, str], now: dt.datetime = HOUR10) -> int:
    async def go() -> int:
        client = AsyncClient(config=KubeConfig.from_file(str(kube.kubeconfig)))
        try:
            return await job.run(env, now=lambda: now, kube=client)
        finally:
            await client.close()

    return asyncio.run(go())


def job_env(costjob: dict[str, Any], dsn: str, opencost_url: str, **extra: str) -> dict[str, str]:
    env = {
        "COSTJOB_NAME": costjob["metadata"]["name"],
        "COSTJOB_NAMESPACE": costjob["metadata"]["namespace"],
        "POSTGRES_CONNECTION_STRING": dsn,
        "OPENCOST_CONNECTION_STRING": opencost_url,
        "OPENCOST_AGGREGATE": "namespace,pod",
        "SCHEDULED_TIMESTAMP": SCHEDULED,
        "HOURS_LOOKBACK": "2",
        "CLUSTER_ID": "test-cluster",
    }
    env.update(extra)
    return env


def costjob_status(kube: controlplane.ControlPlane, costjob: dict[str, Any]) -> dict[str, Any]:
    ns, name = costjob["metadata"]["namespace"], costjob["metadata"]["name"]
    with kube.http() as client:
        status: dict[str, Any] = (
            client.get(f"{GROUP}/namespaces/{ns}/costjobs/{name}").json().get("status", {})
        )
    return status


def table(dsn: str, name: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT * FROM {name} ORDER BY 1, 2, 3, 4, 5").fetchall()


def stored(dsn: str) -> list[oracle_ledger.StoredAllocation]:
    with psycopg.connect(dsn) as conn:
        return oracle_ledger.read(
            conn, cluster="test-cluster", start=HOUR10 - 5 * HOUR, end=HOUR10 + 3 * HOUR
        )


def capture(captures: pathlib.Path) -> dict[str, Any]:
    doc = json.loads((captures / "allocation-pod-60m.json").read_text(), parse_float=Decimal)
    step: dict[str, Any] = doc["data"][0]
    return step


def test_a_run_writes_the_captured_rows_exactly_and_records_success(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
    opencost_captures_dir: pathlib.Path,
) -> None:
    status = run_job(kube, job_env(costjob, ledger_dsn, opencost_captures.url))
    assert status == 0

    rows = stored(ledger_dsn)
    expected = capture(opencost_captures_dir)
    # Three hours (08, 09 lookback; 10 scheduled), each holding every captured allocation.
    assert {r.row.hour for r in rows} == {HOUR10 - 2 * HOUR, HOUR10 - HOUR, HOUR10}
    hour10 = {r.row.name: r for r in rows if r.row.hour == HOUR10}
    assert set(hour10) == set(expected)
    coredns = hour10["kube-system/coredns-7d764666f9-9kk2k"]
    src = expected["kube-system/coredns-7d764666f9-9kk2k"]
    assert coredns.row.namespace == "kube-system"
    assert coredns.row.controller_kind == "deployment"
    assert coredns.row.controller_name == "coredns"
    assert coredns.row.cpu_core_usage_average == src["cpuCoreUsageAverage"]
    assert coredns.row.ram_byte_usage_average == src["ramByteUsageAverage"]
    assert coredns.row.minutes == src["minutes"]
    for name, alloc in expected.items():
        assert hour10[name].row.cpu_core_hours == alloc["cpuCoreHours"], name
        assert hour10[name].row.ram_byte_hours == alloc["ramByteHours"], name

    # Lookback hours final, the scheduled hour still open; all stamped with the book.
    assert {r.is_finalized for r in rows if r.row.hour < HOUR10} == {True}
    assert {r.is_finalized for r in rows if r.row.hour == HOUR10} == {False}
    assert {r.currency for r in rows} == {"USD"}
    with psycopg.connect(ledger_dsn) as conn:
        rate = conn.execute(
            "SELECT DISTINCT p.cpu_hour_micros, p.book_name FROM provider_allocations a "
            "JOIN pricebooks p ON p.id = a.pricebook_id"
        ).fetchall()
    assert rate == [(31000, "onprem-standard")]

    record = costjob_status(kube, costjob)
    assert record["lastExecutionStatus"] == "Success"
    assert record["lastSuccessfulExecutionTime"] == "2026-10-03T10:00:00Z"
    assert record["executionHistory"][0]["status"] == "Success"
    assert "error" not in record["executionHistory"][0]


def test_running_the_same_scheduled_hour_three_times_leaves_identical_tables(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
) -> None:
    env = job_env(costjob, ledger_dsn, opencost_captures.url)
    assert run_job(kube, env) == 0
    first = (table(ledger_dsn, "provider_allocations"), table(ledger_dsn, "pricebooks"))
    for _ in range(2):
        assert run_job(kube, env) == 0
        again = (table(ledger_dsn, "provider_allocations"), table(ledger_dsn, "pricebooks"))
        assert again == first
    assert len(costjob_status(kube, costjob)["executionHistory"]) == 3


def test_a_later_run_finalizes_the_previous_scheduled_hour(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
) -> None:
    assert run_job(kube, job_env(costjob, ledger_dsn, opencost_captures.url)) == 0
    later = job_env(
        costjob, ledger_dsn, opencost_captures.url, SCHEDULED_TIMESTAMP="2026-10-03T11:05:00Z"
    )
    assert run_job(kube, later) == 0
    rows = stored(ledger_dsn)
    assert {r.is_finalized for r in rows if r.row.hour <= HOUR10} == {True}
    assert {r.is_finalized for r in rows if r.row.hour == HOUR10 + HOUR} == {False}
    # Hour 09 was already final and is skipped: only 10 (lookback) and 11 are fetched again.
    windows = [r.params.get("window", "") for r in opencost_captures.requests]
    assert windows.count("2026-10-03T09:00:00Z,2026-10-03T10:00:00Z") == 1


@pytest.mark.parametrize(
    ("fault", "extra", "needle"),
    [
        (replay.Fault("http500", message="boom from opencost"), {}, "boom from opencost"),
        (replay.Fault("bad_json"), {}, "JSON"),
        (replay.Fault("slow", delay=5.0), {"OPENCOST_FETCH_TIMEOUT": "1s"}, "openCostFetchTimeout"),
    ],
    ids=["http-500", "malformed-json", "timeout"],
)
def test_opencost_failures_record_failed_write_nothing_and_exit_non_zero(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_replay: Callable[[replay.Source], replay.ReplayServer],
    opencost_captures_dir: pathlib.Path,
    fault: replay.Fault,
    extra: dict[str, str],
    needle: str,
) -> None:
    server = opencost_replay(replay.Captures(opencost_captures_dir))
    server.inject(fault)
    status = run_job(kube, job_env(costjob, ledger_dsn, server.url, **extra))
    assert status == 1
    assert table(ledger_dsn, "provider_allocations") == []
    record = costjob_status(kube, costjob)
    assert record["lastExecutionStatus"] == "Failed"
    assert "lastSuccessfulExecutionTime" not in record
    assert needle.lower() in record["executionHistory"][0]["error"].lower()


def test_without_an_active_currency_book_the_run_fails_clearly_and_writes_nothing(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
) -> None:
    ns = book["metadata"]["namespace"]
    url = f"{GROUP}/namespaces/{ns}/pricebooks/onprem-standard"
    with kube.http() as client:
        obj = client.get(url).json()
        obj["status"]["ready"] = "False"
        assert client.put(f"{url}/status", json=obj).status_code == 200
    try:
        assert run_job(kube, job_env(costjob, ledger_dsn, opencost_captures.url)) == 1
    finally:
        with kube.http() as client:
            obj = client.get(url).json()
            obj["status"]["ready"] = "True"
            client.put(f"{url}/status", json=obj)
    assert table(ledger_dsn, "provider_allocations") == []
    assert table(ledger_dsn, "pricebooks") == []
    error = costjob_status(kube, costjob)["executionHistory"][0]["error"]
    assert f"PriceBook {ns}/onprem-standard is not ready" in error


def test_a_missing_costjob_exits_non_zero(
    kube: controlplane.ControlPlane, kube_namespace: str, ledger_dsn: str
) -> None:
    env = {
        "COSTJOB_NAME": "nope",
        "COSTJOB_NAMESPACE": kube_namespace,
        "POSTGRES_CONNECTION_STRING": ledger_dsn,
        "OPENCOST_CONNECTION_STRING": "http://127.0.0.1:9",
    }
    assert run_job(kube, env) == 1


def test_missing_required_environment_is_named(caplog: pytest.LogCaptureFixture) -> None:
    assert asyncio.run(job.run({"COSTJOB_NAME": "x"})) == 1
    assert "COSTJOB_NAMESPACE" in caplog.text
    assert "POSTGRES_CONNECTION_STRING" in caplog.text


@pytest.mark.parametrize(("per_shard", "concurrency"), [(1, 1), (3, 2), (7, 4), (100, 3)])
def test_sharded_runs_write_the_same_rows_as_an_unsharded_run(
    kube: controlplane.ControlPlane,
    kube_namespace: str,
    book: dict[str, Any],
    ledger_dsn: str,
    opencost_replay: Callable[[replay.Source], replay.ReplayServer],
    per_shard: int,
    concurrency: int,
) -> None:
    server = opencost_replay(replay.Generated(namespaces=9, pods_per_namespace=3, seed=7))
    jobs = {}
    with kube.http() as client:
        for name, sharding in (
            ("whole", None),
            ("sharded", {"namespacesPerShard": per_shard, "concurrency": concurrency}),
        ):
            spec: dict[str, Any] = {"type": "ResourceCostCollection", "interval": "1h"}
            if sharding:
                spec["sharding"] = sharding
            body = {
                "apiVersion": "finops.stakater.com/v1alpha1",
                "kind": "CostJob",
                "metadata": {"name": name, "namespace": kube_namespace},
                "spec": spec,
            }
            resp = client.post(f"{GROUP}/namespaces/{kube_namespace}/costjobs", json=body)
            assert resp.status_code == 201, resp.text
            jobs[name] = resp.json()

    def collect(name: str) -> list[tuple[Any, ...]]:
        env = job_env(
            jobs[name], ledger_dsn, server.url, OPENCOST_AGGREGATE="namespace,pod,container"
        )
        assert run_job(kube, env) == 0
        rows = table(ledger_dsn, "provider_allocations")
        with psycopg.connect(ledger_dsn) as conn:
            conn.execute("TRUNCATE provider_allocations")
        return rows

    whole = collect("whole")
    assert len(whole) > 9 * 3 * 3  # several hours of every container
    assert collect("sharded") == whole
    assert len({r.params.get("filter", "") for r in server.requests}) > 1


def test_the_operator_binary_runs_the_job_mode_as_a_process(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_captures: replay.ReplayServer,
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("COSTJOB_", "OPENCOST_"))},
        **job_env(costjob, ledger_dsn, opencost_captures.url),
        "KUBECONFIG": str(kube.kubeconfig),
    }
    done = subprocess.run(
        [sys.executable, "-m", "finops.operator", "--mode=cronjob"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    messages = [
        json.loads(line)["msg"] for line in done.stderr.splitlines() if line.startswith("{")
    ]
    assert any(m.startswith("run succeeded") for m in messages), done.stderr
    assert len(stored(ledger_dsn)) > 0
    assert costjob_status(kube, costjob)["lastExecutionStatus"] == "Success"

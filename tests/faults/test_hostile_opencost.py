"""Hostile OpenCost (issue #16, case 5): every bad answer is a Failed run naming the cause.

The allocation job runs as the real `finops-operator --mode=cronjob` process against the real
API server and PostgreSQL, with OpenCost replaced by the replay server told to misbehave:
truncated JSON, NaN/Infinity/negative quantities, a 10 MB string, rows of the wrong hour, a
slow-loris drip, 429/503 with Retry-After, an oversized body.

Invariant, for every case: the process exits 1, the CostJob's newest execution record is
`Failed` with an error naming the cause (and itself short), `provider_allocations` and
`pricebooks` stay empty, and the process's peak resident memory stays under `MEMORY_BOUND`.
The run's wall time has a generous deadline as a safety net only; the figures are printed.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from tests.e2e import _support
from tests.e2e._support import active_book

from finops.opencost import client as opencost_client
from finops_devenv import controlplane
from finops_devenv import opencost_replay as replay

GROUP = "/apis/finops.stakater.com/v1alpha1"
SCHEDULED = "2026-10-03T10:20:00Z"
MiB = 1024 * 1024
MEMORY_BOUND = 192 * MiB  # peak RSS of the job process; it needs about 70 MiB for itself
DEADLINE = 180.0  # safety net only: a hung run fails the test instead of the suite
FIGURES: list[str] = []


def _first(doc: Any) -> dict[str, Any]:
    """The first (name-ordered) allocation of the answer, to be spoiled."""
    step = doc["data"][0]
    first: dict[str, Any] = step[sorted(step)[0]]
    return first


def _setting(key: str, value: Any) -> Callable[[Any], Any]:
    def spoil(doc: Any) -> Any:
        out = copy.deepcopy(doc)
        _first(out)[key] = value
        return out

    return spoil


def _huge_pod(doc: Any) -> Any:
    out = copy.deepcopy(doc)
    _first(out)["properties"]["pod"] = "p" * (10 * MiB)
    return out


def _a_day_early(doc: Any) -> Any:
    out = copy.deepcopy(doc)
    for item in out["data"][0].values():
        for key in ("start", "end"):
            moved = dt.datetime.fromisoformat(item[key]) - dt.timedelta(days=1)
            item[key] = moved.strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    faults: tuple[replay.Fault, ...]
    needles: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


def _status(code: int, retry_after: str, message: str) -> replay.Fault:
    body = replay.dumps({"code": code, "data": None, "message": message})
    return replay.Fault("raw", status=code, body=body, headers=(("Retry-After", retry_after),))


CASES = [
    Case("truncated-json", (replay.Fault("bad_json"),), ("not JSON",)),
    Case(
        "truncated-mid-string",
        (replay.Fault("raw", body=b'{"code":200,"data":[{"ns/pod":{"name":"ns/po'),),
        ("not JSON", "Unterminated string"),
    ),
    Case(
        "nan-quantity",
        (replay.Fault("mutate", mutate=_setting("cpuCoreHours", float("nan"))),),
        ("`cpuCoreHours` is NaN", "allocation 'kube-system/coredns-7d764666f9-9kk2k'"),
    ),
    Case(
        "infinite-quantity",
        (replay.Fault("mutate", mutate=_setting("ramByteHours", float("inf"))),),
        ("`ramByteHours` is Infinity", "not a finite number"),
    ),
    Case(
        "negative-quantity",
        (replay.Fault("mutate", mutate=_setting("cpuCoreHours", Decimal("-0.25"))),),
        ("`cpuCoreHours` is negative (-0.25)",),
    ),
    Case(
        "ten-megabyte-string",
        (replay.Fault("mutate", mutate=_huge_pod),),
        ("`pod` is 10485760 characters long",),
    ),
    Case(
        "ten-megabyte-error-message",
        (replay.Fault("raw", status=500, body=replay.dumps({"message": "m" * (10 * MiB)})),),
        ("HTTP 500",),
    ),
    Case(
        "wrong-window",
        (replay.Fault("mutate", mutate=_a_day_early),),
        ("outside the requested window",),
    ),
    Case(
        "slow-loris",
        (replay.Fault("drip", chunk=1, interval=0.5),),
        ("3s (openCostFetchTimeout)",),
        (("OPENCOST_FETCH_TIMEOUT", "3s"),),
    ),
    Case(
        "http-429-retry-after",
        (_status(429, "1", "too many requests"),),
        ("HTTP 429", "too many requests", "gave up after 3 attempt(s); Retry-After '1'"),
    ),
    Case(
        "http-503-retry-after",
        (_status(503, "1", "opencost is restarting"),),
        ("HTTP 503", "opencost is restarting", "gave up after 3 attempt(s)"),
    ),
    Case(
        "http-503-retry-after-too-long",
        (_status(503, "3600", "come back in an hour"),),
        ("HTTP 503", "Retry-After '3600' is longer than"),
    ),
    Case(
        "oversized-body",
        (replay.Fault("drip", body=b" " * MiB, chunk=MiB, repeat=65),),
        ("larger than 67108864 bytes",),
    ),
    Case(  # no Content-Length: refused while streaming, once past the cap
        "oversized-body-undeclared",
        (replay.Fault("drip", body=b" " * MiB, chunk=MiB, repeat=100, declare_length=False),),
        ("larger than 67108864 bytes",),
    ),
]


@pytest.fixture(scope="module")
def book(kube: controlplane.ControlPlane) -> Iterator[dict[str, Any]]:
    rates = {"cpuHour": "0.031", "ramGbHour": "0.004"}
    with active_book(kube, "hostile-opencost", rates) as obj:
        yield obj


@pytest.fixture
def costjob(kube: controlplane.ControlPlane, kube_namespace: str) -> dict[str, Any]:
    return _support.create_allocation_costjob(kube, kube_namespace)


@dataclasses.dataclass(frozen=True)
class Run:
    code: int
    seconds: float
    max_rss: int
    log: str


# The job's own peak resident memory, read from /proc at exit. (rusage's ru_maxrss would not
# do: Linux carries the forking parent's peak, here pytest's, across fork and exec.)
_PEAK_PROBE = """
import atexit, runpy, sys
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            print("faults-peak-rss-kib", line.split()[1], file=sys.stderr, flush=True)
atexit.register(peak)
sys.argv = ["finops-operator", "--mode=cronjob"]
runpy.run_module("finops.operator", run_name="__main__")
"""


def run_job(kube: controlplane.ControlPlane, env: dict[str, str]) -> Run:
    """The job as its own process, so its wall time and peak memory are its own."""
    full = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("COSTJOB_", "OPENCOST_"))},
        **env,
        "KUBECONFIG": str(kube.kubeconfig),
    }
    with tempfile.TemporaryFile() as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", _PEAK_PROBE], env=full, stdout=out, stderr=subprocess.STDOUT
        )
        try:
            code = proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"the job ran past the {DEADLINE}s safety deadline")
        seconds = time.monotonic() - started
        out.seek(0)
        log = out.read().decode(errors="replace")
    peaks = re.findall(r"^faults-peak-rss-kib (\d+)$", log, flags=re.MULTILINE)
    assert peaks, f"no peak memory reported:\n{log[-3000:]}"
    return Run(code, seconds, int(peaks[-1]) * 1024, log)


def job_env(costjob: dict[str, Any], dsn: str, url: str, **extra: str) -> dict[str, str]:
    return {
        "COSTJOB_NAME": costjob["metadata"]["name"],
        "COSTJOB_NAMESPACE": costjob["metadata"]["namespace"],
        "POSTGRES_CONNECTION_STRING": dsn,
        "OPENCOST_CONNECTION_STRING": url,
        "OPENCOST_AGGREGATE": "namespace,pod",
        "SCHEDULED_TIMESTAMP": SCHEDULED,
        "HOURS_LOOKBACK": "2",
        "CLUSTER_ID": "hostile",
        **extra,
    }


def newest_record(kube: controlplane.ControlPlane, costjob: dict[str, Any]) -> dict[str, Any]:
    ns, name = costjob["metadata"]["namespace"], costjob["metadata"]["name"]
    with kube.http() as client:
        status = client.get(f"{GROUP}/namespaces/{ns}/costjobs/{name}").json().get("status", {})
    assert status.get("executionHistory"), f"no execution record on {ns}/{name}"
    record: dict[str, Any] = status["executionHistory"][0]
    return record


def row_counts(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        allocations = conn.execute("SELECT count(*) FROM provider_allocations").fetchone()
        books = conn.execute("SELECT count(*) FROM pricebooks").fetchone()
    assert allocations is not None and books is not None
    return int(allocations[0]), int(books[0])


def _figure(case: str, run: Run, requests: int) -> None:
    line = f"{case}: exit {run.code}, {run.seconds:.1f}s, peak RSS {run.max_rss / MiB:.0f} MiB"
    FIGURES.append(f"{line}, {requests} request(s)")
    print(FIGURES[-1])


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_a_hostile_answer_fails_the_run_naming_the_cause_and_writes_nothing(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_replay: Callable[[replay.Source], replay.ReplayServer],
    opencost_captures_dir: Any,
    case: Case,
) -> None:
    server = opencost_replay(replay.Captures(opencost_captures_dir))
    for fault in case.faults:
        server.inject(fault)
    run = run_job(kube, job_env(costjob, ledger_dsn, server.url, **dict(case.env)))
    _figure(case.id, run, len(server.requests))

    assert run.code == 1, run.log[-3000:]
    record = newest_record(kube, costjob)
    assert record["status"] == "Failed"
    for needle in case.needles:
        assert needle in record["error"], record["error"][:2000]
    assert len(record["error"]) < 2000, "the error must be a message, not the hostile payload"
    assert row_counts(ledger_dsn) == (0, 0)
    assert run.max_rss < MEMORY_BOUND, f"peak RSS {run.max_rss / MiB:.0f} MiB"


def test_retries_on_429_are_bounded_and_each_waits_for_retry_after(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_replay: Callable[[replay.Source], replay.ReplayServer],
    opencost_captures_dir: Any,
) -> None:
    server = opencost_replay(replay.Captures(opencost_captures_dir))
    server.inject(_status(429, "1", "slow down"))
    run = run_job(kube, job_env(costjob, ledger_dsn, server.url))
    assert run.code == 1
    # The first hour is asked exactly MAX_ATTEMPTS times, then the run stops.
    assert len(server.requests) == opencost_client.MAX_ATTEMPTS
    windows = {r.params["window"] for r in server.requests}
    assert len(windows) == 1
    assert row_counts(ledger_dsn) == (0, 0)


def test_a_429_that_clears_after_its_retry_after_lets_the_run_succeed(
    kube: controlplane.ControlPlane,
    book: dict[str, Any],
    costjob: dict[str, Any],
    ledger_dsn: str,
    opencost_replay: Callable[[replay.Source], replay.ReplayServer],
    opencost_captures_dir: Any,
) -> None:
    server = opencost_replay(replay.Captures(opencost_captures_dir))
    busy = _status(429, "1", "slow down")
    server.inject(dataclasses.replace(busy, times=1))
    run = run_job(kube, job_env(costjob, ledger_dsn, server.url))
    _figure("429-once-then-ok", run, len(server.requests))
    assert run.code == 0, run.log[-3000:]
    assert newest_record(kube, costjob)["status"] == "Success"
    allocations, books = row_counts(ledger_dsn)
    assert allocations > 0 and books == 1
    # Three hours, the first asked twice (the 429, then the answer).
    assert len(server.requests) == 4
    assert run.max_rss < MEMORY_BOUND

"""The client against the replay server: real captures give the right rows, failures the
right errors. (Loopback HTTP only; the replay server is finops_devenv.opencost_replay.)"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import pathlib
import socket
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from tests.oracle import opencost_rows

from finops.billing import allocation
from finops.opencost import client, config, errors
from finops_devenv import opencost_replay as replay

HOUR = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)
Start = Callable[[replay.Source], replay.ReplayServer]


def fetch(url: str, hour: dt.datetime = HOUR, **settings: Any) -> list[allocation.AllocationRow]:
    cfg = config.OpenCostConfig(base_url=url, **settings)

    async def go() -> list[allocation.AllocationRow]:
        async with client.OpenCostClient(cfg) as oc:
            return await opencost_rows.fetch_hour(oc, hour, cluster="default")

    return asyncio.run(go())


def capture_text(folder: pathlib.Path, name: str) -> dict[str, Any]:
    """The capture's step map with every number kept as the literal text of the file."""
    doc = json.loads((folder / name).read_text(), parse_float=str, parse_int=str)
    step: dict[str, Any] = doc["data"][0]
    return step


class TestRequest:
    def test_one_hour_is_asked_as_an_rfc3339_pair_with_the_configured_shape(
        self, opencost_captures: replay.ReplayServer
    ) -> None:
        fetch(opencost_captures.url, aggregate="namespace,pod")
        (req,) = opencost_captures.requests
        assert req.path == "/allocation/compute"
        assert req.params == {
            "window": "2026-10-03T10:00:00Z,2026-10-03T11:00:00Z",
            "aggregate": "namespace,pod",
            "step": "1h",
            "resolution": "1m",
            "accumulate": "true",
            "includeIdle": "false",
        }
        assert "window=2026-10-03T10%3A00%3A00Z%2C2026-10-03T11%3A00%3A00Z" in req.raw_query

    def test_a_base_url_with_a_path_prefix_is_kept(
        self, opencost_captures: replay.ReplayServer
    ) -> None:
        with pytest.raises(errors.OpenCostHTTPError) as exc:
            fetch(opencost_captures.url + "/model", aggregate="namespace,pod")
        assert exc.value.status == 404
        assert opencost_captures.requests[0].path == "/model/allocation/compute"

    @pytest.mark.parametrize(
        "hour",
        [dt.datetime(2026, 10, 3, 10), dt.datetime(2026, 10, 3, 10, 30, tzinfo=dt.UTC)],
    )
    def test_an_hour_that_is_naive_or_not_truncated_is_refused(self, hour: dt.datetime) -> None:
        with pytest.raises(ValueError, match="hour"):
            client.window(hour)


class TestRealCaptures:
    def test_pod_rows_carry_the_captured_names_namespaces_and_exact_quantities(
        self, opencost_captures: replay.ReplayServer, opencost_captures_dir: pathlib.Path
    ) -> None:
        rows = {r.name: r for r in fetch(opencost_captures.url, aggregate="namespace,pod")}
        captured = capture_text(opencost_captures_dir, "allocation-pod-60m.json")
        assert sorted(rows) == sorted(captured)
        for name, item in captured.items():
            r, props = rows[name], item["properties"]
            assert (r.cluster, r.aggregation, r.hour) == ("default", "namespace,pod", HOUR)
            assert r.namespace == props["namespace"] == name.split("/")[0]
            assert r.pod == props.get("pod", "")
            assert r.container == props.get("container", "")
            assert r.controller_name == props.get("controller", "")
            assert r.controller_kind == props.get("controllerKind", "")
            assert r.minutes == Decimal(item["minutes"])
            assert r.cpu_core_hours == Decimal(item["cpuCoreHours"])
            assert r.cpu_core_usage_average == Decimal(item["cpuCoreUsageAverage"])
            assert r.ram_byte_hours == Decimal(item["ramByteHours"])
            assert r.ram_byte_usage_average == Decimal(item["ramByteUsageAverage"])
            assert r.pv_byte_hours == Decimal(item["pvByteHours"])
            assert r.labels == props.get("labels", {})
            # The capture's 09:58-10:58 window is moved onto the asked hour as a whole.
            shift = HOUR - dt.datetime(2026, 10, 3, 9, 58, tzinfo=dt.UTC)
            assert r.start == dt.datetime.fromisoformat(item["start"]) + shift
            assert HOUR <= r.start <= r.end <= HOUR + client.HOUR
        fixed = rows["oc-test/fixed-7996d494d-fbz99"]
        assert (fixed.controller_kind, fixed.controller_name) == ("deployment", "fixed")
        assert fixed.cpu_core_request_average == Decimal("0.5")
        assert fixed.ram_byte_request_average == Decimal(536870912)

    def test_container_rows_are_the_pod_capture_keyed_by_container(
        self, opencost_captures: replay.ReplayServer
    ) -> None:
        # What job pods ask for by default: every pod's quantities exactly, under the
        # container its capture names (a pod of several containers whole, as `__pod__`).
        pods = {r.name: r for r in fetch(opencost_captures.url, aggregate="namespace,pod")}
        containers = fetch(opencost_captures.url, aggregate="namespace,pod,container")
        assert len(containers) == len(pods)
        for row in containers:
            pod = pods[row.name.rsplit("/", 1)[0]]
            assert row.container == (pod.container or replay.MULTI_CONTAINER)
            assert row.name == f"{pod.name}/{row.container}"
            assert row.aggregation == "namespace,pod,container"
            assert (row.namespace, row.pod, row.controller_name) == (
                pod.namespace,
                pod.pod,
                pod.controller_name,
            )
            assert (row.cpu_core_hours, row.ram_byte_hours, row.pv_byte_hours) == (
                pod.cpu_core_hours,
                pod.ram_byte_hours,
                pod.pv_byte_hours,
            )
        whole = [r for r in containers if r.container == replay.MULTI_CONTAINER]
        assert [r.pod for r in whole] == ["prometheus-server-f65957d55-ld28v"]

    def test_controller_rows_keep_unallocated_and_name_their_controllers(
        self, opencost_captures: replay.ReplayServer
    ) -> None:
        rows = {r.name: r for r in fetch(opencost_captures.url, aggregate="namespace,controller")}
        assert rows["oc-test/deployment:fixed"].controller_name == "fixed"
        assert rows["kube-system/daemonset:kindnet"].controller_kind == "daemonset"
        unallocated = rows["prometheus-system/__unallocated__"]
        assert (unallocated.namespace, unallocated.controller_name) == ("prometheus-system", "")
        assert unallocated.pv_byte_hours > 0

    def test_oc_test_cpu_matches_the_capture_authors_oracle(
        self, opencost_captures: replay.ReplayServer, opencost_captures_dir: pathlib.Path
    ) -> None:
        oracle = json.loads((opencost_captures_dir / "expected.json").read_text())["inputs"]
        rows = fetch(opencost_captures.url, aggregate="namespace")
        (oc_test,) = [r for r in rows if r.name == "oc-test"]
        # Idle pods are billed their request: replicas x request x covered hours.
        cores = Decimal(oracle["replicas"]) * Decimal(str(oracle["cpu_request_cores_per_pod"]))
        expected = cores * oc_test.minutes / 60
        assert abs(oc_test.cpu_core_hours - expected) <= expected * Decimal("0.005")

    def test_hours_the_captures_do_not_cover_have_no_rows(
        self, opencost_replay: Start, opencost_captures_dir: pathlib.Path
    ) -> None:
        srv = opencost_replay(replay.Captures(opencost_captures_dir, hours=[HOUR]))
        assert fetch(srv.url, HOUR + client.HOUR, aggregate="namespace,pod") == []
        assert len(fetch(srv.url, HOUR, aggregate="namespace,pod")) == 16


class TestFailures:
    @pytest.fixture
    def server(self, opencost_replay: Start) -> replay.ReplayServer:
        return opencost_replay(replay.Generated(namespaces=4, pods_per_namespace=2))

    def test_a_json_500_raises_an_http_error_carrying_status_and_message(
        self, server: replay.ReplayServer
    ) -> None:
        server.inject(replay.Fault("http500", message="error computing allocation: boom"))
        with pytest.raises(errors.OpenCostHTTPError) as exc:
            fetch(server.url)
        assert (exc.value.status, exc.value.message) == (500, "error computing allocation: boom")
        assert "HTTP 500" in str(exc.value) and "window=2026-10-03T10:00:00Z" in str(exc.value)

    def test_a_plain_text_400_raises_an_http_error_with_the_text(
        self, server: replay.ReplayServer, opencost_captures_dir: pathlib.Path
    ) -> None:
        text = (opencost_captures_dir / "error-bad-window.json").read_text().strip()
        server.inject(replay.Fault("http400", message=text))
        with pytest.raises(errors.OpenCostHTTPError) as exc:
            fetch(server.url)
        assert (exc.value.status, exc.value.message) == (400, text)

    def test_malformed_json_raises_a_response_error(self, server: replay.ReplayServer) -> None:
        server.inject(replay.Fault("bad_json"))
        with pytest.raises(errors.OpenCostResponseError, match="not JSON"):
            fetch(server.url)

    def test_an_answer_slower_than_the_fetch_timeout_raises_a_timeout_error(
        self, server: replay.ReplayServer
    ) -> None:
        server.inject(replay.Fault("slow", delay=5))
        began = time.monotonic()
        with pytest.raises(errors.OpenCostTimeoutError, match="openCostFetchTimeout"):
            fetch(server.url, fetch_timeout=dt.timedelta(milliseconds=300))
        assert time.monotonic() - began < 3

    def test_a_slow_answer_within_the_timeout_still_succeeds(
        self, server: replay.ReplayServer
    ) -> None:
        server.inject(replay.Fault("slow", delay=0.05))
        assert fetch(server.url)

    def test_an_unreachable_server_raises_an_unavailable_error(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with pytest.raises(errors.OpenCostUnavailableError):
            fetch(f"http://127.0.0.1:{port}")

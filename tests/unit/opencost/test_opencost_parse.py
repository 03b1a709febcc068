"""OpenCost response bodies become exact rows: envelope shapes, nulls, steps, pseudo-rows."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
from decimal import Decimal
from typing import Any

import pytest

from finops.opencost import errors, parse

HOUR = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)


def alloc(name: str, namespace: str, **fields: Any) -> dict[str, Any]:
    """A minimal Allocation object in OpenCost's JSON shape."""
    base: dict[str, Any] = {
        "name": name,
        "properties": {"namespace": namespace, "pod": "p", "container": "c"},
        "window": {"start": "2026-10-03T10:00:00Z", "end": "2026-10-03T11:00:00Z"},
        "start": "2026-10-03T10:00:00Z",
        "end": "2026-10-03T11:00:00Z",
        "minutes": 60,
        "cpuCoreHours": 1,
    }
    base.update(fields)
    return base


def body(*steps: dict[str, Any], status: str | None = None) -> str:
    doc: dict[str, Any] = {"code": 200, "data": list(steps)}
    if status is not None:
        doc["status"] = status
    return json.dumps(doc)


def rows_of(text: str | bytes) -> list[Any]:
    return parse.rows(parse.decode(text), cluster="default", aggregation="namespace", hour=HOUR)


class TestEnvelope:
    def test_with_and_without_status_give_the_same_rows(self) -> None:
        step = {"a": alloc("a", "a")}
        assert rows_of(body(step)) == rows_of(body(step, status="success"))
        assert [r.name for r in rows_of(body(step))] == ["a"]

    def test_an_error_code_in_the_envelope_is_an_http_error_with_its_message(self) -> None:
        text = '{"code":500,"data":null,"message":"invalid filter: boom"}'
        with pytest.raises(errors.OpenCostHTTPError) as exc:
            parse.decode(text)
        assert exc.value.status == 500
        assert exc.value.message == "invalid filter: boom"

    @pytest.mark.parametrize(
        "text",
        [
            '{"code":200,"data":[{"a":',  # cut off
            "Invalid 'window' parameter: illegal window: x",  # plain text
            '{"code":200,"data":null}',
            '{"code":200,"data":{"a":{}}}',  # a map, not a list of steps
            '{"code":200,"data":[["a"]]}',
            '{"code":200,"data":[{"a":1}]}',
            '{"code":200,"data":[{"a":{"minutes":NaN}}]}',
            "[]",
        ],
    )
    def test_bodies_that_are_not_allocation_json_are_response_errors(self, text: str) -> None:
        with pytest.raises(errors.OpenCostResponseError):
            parse.decode(text)

    def test_a_number_written_as_a_string_is_a_response_error_naming_the_allocation(self) -> None:
        with pytest.raises(errors.OpenCostResponseError, match=r"'web'.*cpuCoreHours"):
            rows_of(body({"web": alloc("web", "web", cpuCoreHours="1.5")}))

    def test_error_message_prefers_the_json_message_and_falls_back_to_plain_text(self) -> None:
        assert parse.error_message(b'{"code":500,"data":null,"message":" bad "}') == "bad"
        assert parse.error_message(b"Invalid step parameter: x\n") == "Invalid step parameter: x"
        assert parse.error_message(b"") == "empty body"


class TestNumbers:
    def test_quantities_are_the_exact_decimals_of_the_text(self) -> None:
        text = body(
            {"a": alloc("a", "a", cpuCoreHours="@1", ramByteHours="@2", ramByteUsageAverage="@3")}
        )
        # Digits a float would not keep.
        text = text.replace('"@1"', "0.30000000000000004").replace(
            '"@2"', "123456789012345678.12345"
        )
        text = text.replace('"@3"', "1e-05")
        (r,) = rows_of(text)
        assert r.cpu_core_hours == Decimal("0.30000000000000004")
        assert r.ram_byte_hours == Decimal("123456789012345678.12345")
        assert r.ram_byte_usage_average == Decimal("0.00001")
        assert all(
            isinstance(getattr(r, f), Decimal)
            for f in ("minutes", "cpu_core_hours", "ram_byte_hours", "gpu_usage_average")
        )

    def test_null_means_nan_and_becomes_zero(self) -> None:
        (r,) = rows_of(body({"a": alloc("a", "a", cpuCoreHours=None, networkTransferBytes=None)}))
        assert r.cpu_core_hours == 0
        assert r.network_transfer_bytes == 0

    def test_gpu_usage_is_read_from_the_top_level_or_from_gpu_allocation(self) -> None:
        old = alloc("a", "a", gpuUsageAverage=0.5)
        new = alloc("a", "a", gpuAllocation={"gpuUsageAverage": 0.25, "isGPUShared": None})
        assert rows_of(body({"a": old}))[0].gpu_usage_average == Decimal("0.5")
        assert rows_of(body({"a": new}))[0].gpu_usage_average == Decimal("0.25")
        nulled = alloc("a", "a", gpuAllocation=None)
        assert rows_of(body({"a": nulled}))[0].gpu_usage_average == 0


class TestSteps:
    def test_empty_steps_are_skipped(self) -> None:
        assert [r.name for r in rows_of(body({}, {}, {"a": alloc("a", "a")}, {}))] == ["a"]
        assert rows_of(body({}, {})) == []
        assert rows_of('{"code":200,"data":[]}') == []

    def test_an_allocation_in_several_steps_merges_into_one_row_for_the_hour(self) -> None:
        first = alloc(
            "a",
            "a",
            start="2026-10-03T10:00:00Z",
            end="2026-10-03T10:30:00Z",
            minutes=30,
            cpuCoreHours=0.5,
            cpuCoreRequestAverage=1,
        )
        second = alloc(
            "a",
            "a",
            start="2026-10-03T10:30:00Z",
            end="2026-10-03T10:40:00Z",
            minutes=10,
            cpuCoreHours=0.25,
            cpuCoreRequestAverage=3,
        )
        (r,) = rows_of(body({"a": first}, {}, {"a": second}))
        assert r.start == dt.datetime(2026, 10, 3, 10, 0, tzinfo=dt.UTC)
        assert r.end == dt.datetime(2026, 10, 3, 10, 40, tzinfo=dt.UTC)
        assert r.minutes == 40
        assert r.cpu_core_hours == Decimal("0.75")
        # (1 core x 30 min + 3 cores x 10 min) / 40 min
        assert r.cpu_core_request_average == Decimal("1.5")


class TestPseudoAllocations:
    def test_idle_rows_are_dropped_and_unallocated_and_unmounted_rows_kept(self) -> None:
        step = {
            "__idle__": alloc("__idle__", ""),
            "cluster-one/__idle__": alloc("cluster-one/__idle__", ""),
            "kube-system/__unallocated__": alloc("kube-system/__unallocated__", "kube-system"),
            "__unmounted__": alloc("__unmounted__", "__unmounted__"),
        }
        names = [r.name for r in rows_of(body(step))]
        assert names == ["__unmounted__", "kube-system/__unallocated__"]

    def test_namespace_discovery_keeps_pseudo_namespaces_but_not_idle(self) -> None:
        step = {n: alloc(n, n) for n in ("__idle__", "__unmounted__", "b", "a")}
        assert parse.namespaces(parse.decode(body(step, {}))) == ["__unmounted__", "a", "b"]

    def test_the_real_idle_capture_yields_every_namespace_but_idle(
        self, opencost_captures_dir: pathlib.Path
    ) -> None:
        text = (opencost_captures_dir / "allocation-namespace-idle.json").read_bytes()
        captured = json.loads(text)["data"][0]
        assert "__idle__" in captured
        names = [r.name for r in rows_of(text)]
        assert names == sorted(set(captured) - {"__idle__"})

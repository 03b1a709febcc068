"""The fast decoder gives exactly the exact parser's `COPY` lines, or refuses with its very error.

The oracle is `fastparse.exact_lines`: `fastparse.exact_rows` (`parse.decode` + `parse.rows` +
`parse.check_hour`, the path every earlier release used) through `allocation.row_line`, byte for
byte. Bodies come from hypothesis (OpenCost-shaped documents with
hostile values anywhere, and byte-level damage to a valid body) and from the real captures.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from finops.opencost import fastparse
from finops_devenv import opencost_replay

HOUR = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)
AGGREGATION = "namespace,pod,container"
CAPTURES = pathlib.Path(__file__).resolve().parents[2] / "data" / "opencost-real"


class Raw:
    """JSON text written as is (numbers exactly as OpenCost or an attacker writes them)."""

    def __init__(self, text: str) -> None:
        self.text = text


def to_json(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{to_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(to_json(v) for v in value) + "]"
    return json.dumps(value)


def line_outcome(decode: Callable[..., fastparse.Lines], body: bytes, hour: dt.datetime) -> Any:
    """The names and `COPY` bytes, or the error's type and message."""
    try:
        found = decode(body, cluster="c", aggregation=AGGREGATION, hour=hour, query="q")
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))
    return found.names, found.text


def assert_same(body: bytes, hour: dt.datetime = HOUR) -> None:
    """`COPY` lines through the fast path are the exact path's (or its error)."""
    exact = line_outcome(fastparse.exact_lines, body, hour)
    assert line_outcome(fastparse.lines, body, hour) == exact


# ------------------------------------------------------------------------ generated bodies

numbers = st.one_of(
    st.integers(0, 10**20).map(str),
    st.decimals(min_value=0, max_value=10**12, allow_nan=False, places=5).map(str),
    st.sampled_from(["0", "-0", "0.0", "-0.0", "1e5", "1E-3", "2.50", "60", "1E400", "7e+2"]),
)
hostile = st.sampled_from(
    ["-1", "-0.5", '"1.5"', "true", "false", "[]", "{}", "NaN", "Infinity", "-Infinity", "1" * 4301]
)
quantity = st.one_of(numbers, st.just("null"), hostile).map(Raw)
in_hour = st.sampled_from(
    [
        "2026-10-03T10:00:00Z",
        "2026-10-03T10:25:00Z",
        "2026-10-03T11:00:00Z",
        "2026-10-03T12:00:00+02:00",
    ]
)
times = st.one_of(
    in_hour,
    st.sampled_from(["2026-10-03T09:59:00Z", "2026-10-03T11:01:00Z", "2026-10-03T10:30:00", "x"]),
    st.integers(0, 5),
    st.none(),
)
texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["ns-a", "tab\there", "new\nline", "back\\slash", "ü", "x" * 2049]),
    st.integers(),
    st.none(),
)
labels = st.one_of(
    st.none(),
    st.dictionaries(st.text(max_size=6), st.one_of(st.text(max_size=6), st.integers()), max_size=3),
    st.just({"big": "v" * (256 * 1024)}),
    st.just(["not", "a", "map"]),
)
QUANTITY_KEYS = [
    "minutes",
    "cpuCoreRequestAverage",
    "cpuCoreUsageAverage",
    "cpuCoreHours",
    "gpuCount",
    "gpuHours",
    "ramByteRequestAverage",
    "ramByteUsageAverage",
    "ramByteHours",
    "pvByteHours",
    "networkTransferBytes",
    "networkReceiveBytes",
]


@st.composite
def allocations(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {"start": draw(times), "end": draw(times)}
    for key in draw(st.lists(st.sampled_from(QUANTITY_KEYS), unique=True)):
        item[key] = draw(quantity)
    if draw(st.booleans()):
        props = {k: draw(texts) for k in ("namespace", "pod", "container", "controllerKind")}
        props["labels"] = draw(labels)
        item["properties"] = props
    else:
        item["properties"] = draw(st.sampled_from([None, "props", {"node": "n1"}]))
    where = draw(st.sampled_from(["top", "gpuAllocation", "none", "bad"]))
    if where == "top":
        item["gpuUsageAverage"] = draw(quantity)
    elif where == "gpuAllocation":
        item["gpuAllocation"] = {"gpuUsageAverage": draw(quantity), "isGPUShared": None}
    elif where == "bad":
        item["gpuAllocation"] = draw(st.sampled_from([[1], "gpu", None]))
    if draw(st.booleans()):  # fields the ledger never reads, with anything in them
        item["cpuCost"] = draw(quantity)
        item["window"] = {"start": draw(times), "end": draw(times)}
    return item


names = st.sampled_from(
    ["ns-a/p1/c1", "ns-a/p2/c1", "ns-b/p1/c1", "__idle__", "c1/__idle__", "ns/" + "n" * 2050]
)
steps = st.dictionaries(
    names, st.one_of(allocations(), st.sampled_from([None, 1, "x"])), max_size=4
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    doc: dict[str, Any] = {}
    code = draw(st.sampled_from([200, 200, 200, None, 500, "200", True]))
    if code is not None:
        doc["code"] = code
    if draw(st.booleans()):
        doc["status"] = "success"
    doc["data"] = draw(
        st.one_of(
            st.lists(st.one_of(steps, st.just({})), min_size=1, max_size=3),
            st.sampled_from([None, {}, "data"]),
        )
    )
    if code == 500:
        doc["message"] = "boom"
    return to_json(doc).encode()


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_any_opencost_shaped_body_gives_the_exact_rows_or_the_exact_error(body: bytes) -> None:
    assert_same(body)


def plain_body(count: int = 3) -> bytes:
    items = {
        f"ns-{i}/pod-{i}/c": {
            "name": f"ns-{i}/pod-{i}/c",
            "properties": {"namespace": f"ns-{i}", "pod": f"pod-{i}", "labels": {"app": "a"}},
            "start": "2026-10-03T10:05:00Z",
            "end": "2026-10-03T11:00:00Z",
            "minutes": Raw("55"),
            "cpuCoreHours": Raw(f"0.{i}1234"),
            "ramByteHours": Raw("1.5e9"),
            "networkTransferBytes": Raw("null"),
            "totalCost": Raw("1.25"),
        }
        for i in range(count)
    }
    return to_json({"code": 200, "data": [items]}).encode()


@settings(max_examples=600, deadline=None)
@given(st.data())
def test_a_damaged_body_gives_the_exact_rows_or_the_exact_error(data: st.DataObject) -> None:
    body = bytearray(plain_body())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body) - 1))
        what = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = data.draw(st.sampled_from(list(b'"{}[],:0-.eE \\\x00\xff\xc3tnu9')))
        if what == "replace":
            body[at] = byte
        elif what == "insert":
            body.insert(at, byte)
        else:
            del body[at]
    assert_same(bytes(body))


def test_the_fast_path_itself_decodes_a_plain_body() -> None:
    body = plain_body()
    lines = fastparse._fast_lines(body, "c", AGGREGATION, HOUR)
    assert (lines.names, lines.text) == line_outcome(fastparse.exact_lines, body, HOUR)
    assert b"\t1.5E+9\t" in lines.text  # as `str(Decimal("1.5e9"))`, not the JSON text


# JSON numbers as OpenCost (Go) or anyone else could write them: signs, leading `0.`, long
# fractions, trailing zeros, exponents, and the `0.000000…` that `Decimal` prints as `1E-7`.
number_texts = st.builds(
    lambda sign, whole, fraction, exponent: sign + whole + fraction + exponent,
    st.sampled_from(["", "", "-"]),
    st.one_of(st.just("0"), st.from_regex(r"[1-9][0-9]{0,30}", fullmatch=True)),
    st.one_of(
        st.just(""),
        st.from_regex(r"\.[0-9]{1,30}", fullmatch=True),
        st.from_regex(r"\.0{4,9}[0-9]{0,3}", fullmatch=True),
    ),
    st.one_of(st.just(""), st.just(""), st.from_regex(r"[eE][+-]?[0-9]{1,3}", fullmatch=True)),
)


@settings(max_examples=800, deadline=None)
@given(st.lists(st.one_of(number_texts, st.just("null")), min_size=13, max_size=13))
def test_every_json_number_gives_the_exact_copy_text(numbers: list[str]) -> None:
    item: dict[str, Any] = {
        "properties": {"namespace": "ns", "pod": "p", "labels": {"app": "a"}},
        "start": "2026-10-03T10:00:00Z",
        "end": "2026-10-03T11:00:00Z",
        **{key: Raw(text) for key, text in zip(QUANTITY_KEYS, numbers, strict=False)},
        "gpuAllocation": {"gpuUsageAverage": Raw(numbers[-1])},
    }
    body = to_json({"code": 200, "data": [{"ns/p/c": item}]}).encode()
    assert_same(body)
    if not any(text.startswith("-") and text.strip("-0.eE+") for text in numbers):
        # No negative value: the fast path itself writes the line (no fallback).
        found = fastparse._fast_lines(body, "c", AGGREGATION, HOUR)
        assert (found.names, found.text) == line_outcome(fastparse.exact_lines, body, HOUR)


@pytest.mark.parametrize(
    "body",
    [
        # msgspec would skip these where json refuses them: bad UTF-8, a huge integer.
        plain_body().replace(b'"totalCost":1.25', b'"totalCost":"\xff"'),
        plain_body().replace(b'"totalCost":1.25', b'"totalCost":' + b"1" * 4301),
        # json reads these where msgspec refuses them: a BOM, UTF-16, a lone surrogate.
        b"\xef\xbb\xbf" + plain_body(),
        plain_body().decode().encode("utf-16"),
        plain_body().replace(b'"app":"a"', b'"app":"\\ud800"'),
        # The same allocation in two steps is merged by the exact path.
        to_json({"code": 200, "data": [json.loads(plain_body())["data"][0]] * 2}).encode(),
    ],
)
def test_bytes_the_two_decoders_could_read_differently_go_the_exact_way(body: bytes) -> None:
    assert_same(body)


# ---------------------------------------------------------------------------- real captures


@pytest.mark.parametrize("capture", sorted(CAPTURES.glob("allocation-*.json")), ids=str)
def test_every_real_capture_decodes_as_the_exact_parser_does(capture: pathlib.Path) -> None:
    raw = capture.read_bytes()
    # As captured (windows 09:58 to 10:58): the same rows or the same refusal at either hour.
    assert_same(raw, HOUR)
    assert_same(raw, HOUR - dt.timedelta(hours=1))
    # Moved onto 10:00 to 11:00 by editing only the timestamps: the fast path itself takes
    # it (not the fallback) and gives the exact lines, numbers with their captured text.
    moved = raw.replace(b"T09:58:00Z", b"T10:00:00Z").replace(b"T10:58:00Z", b"T11:00:00Z")
    lines = fastparse._fast_lines(moved, "c", AGGREGATION, HOUR)
    assert lines.names
    assert (lines.names, lines.text) == line_outcome(fastparse.exact_lines, moved, HOUR)


def test_replay_answers_decode_alike_through_both_paths() -> None:
    source = opencost_replay.Generated(namespaces=3, pods_per_namespace=4, containers_per_pod=2)
    server = opencost_replay.ReplayServer(source)
    params = {"window": "2026-10-03T10:00:00Z,2026-10-03T11:00:00Z", "aggregate": AGGREGATION}
    _, _, body = server.answer("/allocation/compute", params)
    assert fastparse._fast_lines(body, "c", AGGREGATION, HOUR).names
    assert_same(body)

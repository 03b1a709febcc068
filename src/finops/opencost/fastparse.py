"""The fast path of `parse`: one OpenCost hour body straight into `COPY` lines, or the exact path.

Why: the exact path builds the whole JSON document as Python objects (every cost field of
every allocation, which the ledger never reads) and then an `AllocationRow` per allocation;
at 10k+ allocations an hour that is most of an allocation run. Here `msgspec` decodes only
the fields a row needs into typed structs (numbers as their raw JSON text), and each
allocation becomes one line of `COPY` text in `allocation.ROW_FIELDS` order (see `lines` below).

The exact parser stays the oracle: whenever the body is anything but the plain shape (an
envelope error, a number that is not a non-negative JSON number, an over-long text, a
timestamp outside the hour, an allocation repeated across steps that must be merged, bytes
`msgspec` and `json` might read differently), the fast path gives up and the body goes through
`parse` instead, which returns the same rows or raises the same error. Tests prove the
two equal over generated bodies and the real captures.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any

import msgspec

from finops.billing import allocation
from finops.opencost import parse

RowTuple = tuple[Any, ...]

# A JSON integer longer than this is refused by `json` (Python's int conversion limit) even
# where the ledger never reads it; msgspec would skip it, so such bodies go the exact way.
_MAX_INT_DIGITS = 4300
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * (_MAX_INT_DIGITS + 1)


class _Fallback(Exception):
    """The body is not the plain shape; the exact path decides."""


def _quantity(value: Any) -> Decimal:
    """As `parse._Fields.quantity`, but anything unusual gives up instead of naming it."""
    kind = type(value)
    if kind is Decimal:
        if value < 0:
            raise _Fallback
        return value  # type: ignore[no-any-return]
    if kind is int:
        if value < 0:
            raise _Fallback
        return Decimal(value)
    if value is None:
        return allocation.ZERO
    raise _Fallback


def _labels(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if type(value) is not dict:
        raise _Fallback
    labels = {k: v for k, v in value.items() if type(v) is str}
    if sum(len(k) + len(v) for k, v in labels.items()) > parse.MAX_LABELS_TEXT:
        raise _Fallback
    return labels


def _time_reader(hour: dt.datetime) -> Callable[[Any], dt.datetime]:
    """Parse RFC 3339 times (memoized: a body repeats a handful of them) inside the hour."""
    seen: dict[str, dt.datetime] = {}
    end_of_hour = hour + parse.HOUR

    def read(value: Any) -> dt.datetime:
        if type(value) is not str:
            raise _Fallback
        found = seen.get(value)
        if found is None:
            try:
                parsed = dt.datetime.fromisoformat(value)
            except ValueError as exc:
                raise _Fallback from exc
            if parsed.tzinfo is None:
                raise _Fallback
            found = seen[value] = parsed.astimezone(dt.UTC)
        if found < hour or found > end_of_hour:
            raise _Fallback
        return found

    return read


def _plain_bytes(body: bytes) -> None:
    """Refuse bytes `json` would read differently from msgspec (bad UTF-8, huge integers)."""
    if not body.isascii():
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Fallback from exc
    if body.translate(_DIGITS_AS_ZERO).find(_LONG_DIGIT_RUN) >= 0:
        raise _Fallback


def exact_rows(
    body: bytes, *, cluster: str, aggregation: str, hour: dt.datetime, query: str = ""
) -> list[RowTuple]:
    """The oracle: `parse.decode`, `parse.rows` and `parse.check_hour`, as row tuples."""
    found = parse.rows(
        parse.decode(body, query=query),
        cluster=cluster,
        aggregation=aggregation,
        hour=hour,
        query=query,
    )
    parse.check_hour(found, hour, query=query)
    return [as_tuple(r) for r in found]


def as_tuple(row: allocation.AllocationRow) -> RowTuple:
    """An `AllocationRow` as a row tuple (labels as a plain dict)."""
    values = [getattr(row, name) for name in allocation.ROW_FIELDS]
    values[allocation.ROW_FIELDS.index("labels")] = dict(row.labels)
    return tuple(values)


# ----------------------------------------------------------------------------- row lines
#
# The allocation run does not need row tuples: it needs `COPY` text. Building it straight
# from the body skips a `Decimal` per quantity (and its `str()` later): a number is taken as
# its JSON text when that text is what `str(Decimal(text))` gives back (a plain non-negative
# literal, not `0.000000…`, which `Decimal` prints in exponent form), and through exactly
# the exact path's conversion otherwise. Tests hold the lines equal to `row_line` of
# `exact_rows`, error for error.


@dataclasses.dataclass(frozen=True, slots=True)
class Lines:
    """One body's rows as `allocation.row_line` lines, each ended by a newline, in name order."""

    names: list[str]
    text: bytes


_ZERO_RAW = msgspec.Raw(b"0")
_Text = Annotated[str, msgspec.Meta(max_length=parse.MAX_TEXT)]
# What a plain non-negative JSON number is made of (msgspec has checked each is a number).
_NUMBER_BYTES = b"0123456789.\t"
# `Decimal` prints `0.000000…` in exponent form (`str(Decimal("0.0000001"))` is `1E-7`).
_TINY = b"0.000000"


class _LineGpu(msgspec.Struct):
    gpuUsageAverage: msgspec.Raw = _ZERO_RAW


class _LineProps(msgspec.Struct, rename="camel"):
    namespace: _Text | None = None
    controller_kind: _Text | None = None
    controller: _Text | None = None
    pod: _Text | None = None
    container: _Text | None = None
    node: _Text | None = None
    labels: dict[str, str] | None = None


class _LineAlloc(msgspec.Struct, rename="camel"):
    properties: _LineProps | None = None
    start: str | None = None
    end: str | None = None
    minutes: msgspec.Raw = _ZERO_RAW
    cpu_core_request_average: msgspec.Raw = _ZERO_RAW
    cpu_core_usage_average: msgspec.Raw = _ZERO_RAW
    cpu_core_hours: msgspec.Raw = _ZERO_RAW
    gpu_count: msgspec.Raw = _ZERO_RAW
    gpu_hours: msgspec.Raw = _ZERO_RAW
    gpu_usage_average: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    gpu_allocation: _LineGpu | None = None
    ram_byte_request_average: msgspec.Raw = _ZERO_RAW
    ram_byte_usage_average: msgspec.Raw = _ZERO_RAW
    ram_byte_hours: msgspec.Raw = _ZERO_RAW
    pv_byte_hours: msgspec.Raw = _ZERO_RAW
    network_transfer_bytes: msgspec.Raw = _ZERO_RAW
    network_receive_bytes: msgspec.Raw = _ZERO_RAW


class _LineEnvelope(msgspec.Struct):
    code: Any = 200
    data: list[dict[str, _LineAlloc]] | None = None


_LINE_DECODER = msgspec.json.Decoder(_LineEnvelope)
_LINE_PROPS = _LineProps()
_LINE_GPU = _LineGpu()


def _numbers_text(numbers: tuple[msgspec.Raw, ...]) -> str:
    """The quantities as `str()` of the exact path's values, tab-separated."""
    joined = b"\t".join(numbers)
    if b"null" in joined:  # only ever a whole value: no number contains it
        joined = joined.replace(b"null", b"0")
    if (
        not joined.translate(None, _NUMBER_BYTES)
        and b"\t" + _TINY not in joined
        and not joined.startswith(_TINY)
    ):
        return joined.decode()  # plain non-negative literals, each as `str(Decimal)` gives it
    return "\t".join(str(_quantity(parse_number(bytes(n)))) for n in numbers)


def parse_number(text: bytes) -> Any:
    """One JSON value as the exact path reads it; anything `json` refuses gives up."""
    try:
        return parse.load_json(text)
    except ValueError as exc:
        raise _Fallback from exc


def _labels_text(labels: dict[str, str] | None) -> str:
    if not labels:
        return "{}"
    encoded = msgspec.json.encode(labels)
    # The JSON is at least as long as the characters it holds, so short is small enough.
    if len(encoded) > parse.MAX_LABELS_TEXT:
        _labels(labels)
    return encoded.decode()


def _times_reader(hour: dt.datetime) -> Callable[[Any, Any], str]:
    """`hour`, `start` and `end` as `COPY` text (memoized per pair), checked as `_row` does."""
    seen: dict[tuple[Any, Any], str] = {}
    time = _time_reader(hour)
    hour_text = str(hour)

    def read(start: Any, end: Any) -> str:
        found = seen.get((start, end))
        if found is None:
            begins, ends = time(start), time(end)
            if ends < begins:
                raise _Fallback
            found = seen[(start, end)] = f"{hour_text}\t{begins}\t{ends}"
        return found

    return read


def _line(
    name: str, item: _LineAlloc, head: str, aggregation: str, times: Callable[[Any, Any], str]
) -> str:
    """One allocation as `allocation.row_line` gives it for the exact path's row."""
    props = item.properties or _LINE_PROPS
    gpu = item.gpu_usage_average
    if gpu is msgspec.UNSET:
        gpu = (item.gpu_allocation or _LINE_GPU).gpuUsageAverage
    minutes, quantities = _numbers_text(
        (
            item.minutes,
            item.cpu_core_request_average,
            item.cpu_core_usage_average,
            item.cpu_core_hours,
            item.gpu_count,
            item.gpu_hours,
            gpu,
            item.ram_byte_request_average,
            item.ram_byte_usage_average,
            item.ram_byte_hours,
            item.pv_byte_hours,
            item.network_transfer_bytes,
            item.network_receive_bytes,
        )
    ).split("\t", 1)
    values = (
        head,
        name,
        props.namespace or "",
        aggregation,
        times(item.start, item.end),
        minutes,
        props.controller_kind or "",
        props.controller or "",
        props.pod or "",
        props.container or "",
        props.node or "",
        _labels_text(props.labels),
        quantities,
    )
    return "\t".join(values)  # `_fast_lines` checks there is nothing to escape


_TABS = len(allocation.ROW_FIELDS) - 1


def _fast_lines(body: bytes, cluster: str, aggregation: str, hour: dt.datetime) -> Lines:
    _plain_bytes(body)
    try:
        doc = _LINE_DECODER.decode(body)
    except msgspec.MsgspecError as exc:
        raise _Fallback from exc
    if type(doc.code) is not int or doc.code != 200 or doc.data is None:
        raise _Fallback
    times = _times_reader(hour)
    out: dict[str, str] = {}
    for step in doc.data:
        for name, item in step.items():
            if len(name) > parse.MAX_TEXT or name in out:
                raise _Fallback  # too long to name, or to be merged across steps
            if parse.IDLE in name and parse.is_idle(name):
                continue
            out[name] = _line(name, item, cluster, aggregation, times)
    names = sorted(out)
    if not names:
        return Lines(names, b"")
    text = "\n".join([out[n] for n in names])
    escape = "\\" in text or "\r" in text or text.count("\n") != len(names) - 1
    if escape or text.count("\t") != _TABS * len(names):
        raise _Fallback  # a value with something to escape: rare, and `row_line` knows how
    return Lines(names, (text + "\n").encode())


def exact_lines(
    body: bytes, *, cluster: str, aggregation: str, hour: dt.datetime, query: str = ""
) -> Lines:
    """The oracle of `lines`: `exact_rows`, each through `allocation.row_line`."""
    found = exact_rows(body, cluster=cluster, aggregation=aggregation, hour=hour, query=query)
    text = "".join([allocation.row_line(r) + "\n" for r in found]).encode()
    return Lines([str(r[_NAME_AT]) for r in found], text)


_NAME_AT = allocation.ROW_FIELDS.index("name")


def lines(
    body: bytes, *, cluster: str, aggregation: str, hour: dt.datetime, query: str = ""
) -> Lines:
    """The hour's rows as `COPY` lines in name order, exactly as `exact_lines` gives them
    (or its error)."""
    try:
        return _fast_lines(body, cluster, aggregation, hour)
    except _Fallback:
        return exact_lines(body, cluster=cluster, aggregation=aggregation, hour=hour, query=query)

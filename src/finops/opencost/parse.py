"""Turn OpenCost `/allocation` response bodies into `AllocationRow`s, exactly and without I/O.

Numbers are parsed from the JSON text as `Decimal` (never float); OpenCost writes NaN/Inf as
`null`, which becomes zero. A body that is not OpenCost's is refused with a message naming the
allocation and field: a bare `NaN`/`Infinity`, a negative quantity, a string longer than any
Kubernetes name or label could be, or a row outside the hour that was asked for. `data` is a
list with one map per step; empty steps (`{}`) are skipped, and an allocation that appears in
several steps is merged into one row for the hour.

Pseudo-allocations (see research/opencost-api.md §7):
- `__unallocated__` (e.g. `kube-system/__unallocated__`) and `__unmounted__` rows are KEPT.
  They carry real usage OpenCost attributes to a namespace (static pods, unmounted volumes)
  and the docs require a sharded run to keep the pseudo-namespaces an unfiltered one returns.
- `__idle__` rows are DROPPED. Idle is unused cluster capacity, not consumption by any
  workload: it has no namespace a Subscription's `usageSources` could select, its cost can be
  negative, and it only appears when `includeIdle=true`, which the client never sends.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from finops.billing import allocation
from finops.opencost import errors

HOUR = dt.timedelta(hours=1)
IDLE = "__idle__"
UNALLOCATED = "__unallocated__"
UNMOUNTED = "__unmounted__"

Step = Mapping[str, Mapping[str, object]]

# AllocationRow quantity field -> top-level key of the OpenCost Allocation object.
_QUANTITIES: dict[str, str] = {
    "minutes": "minutes",
    "cpu_core_request_average": "cpuCoreRequestAverage",
    "cpu_core_usage_average": "cpuCoreUsageAverage",
    "cpu_core_hours": "cpuCoreHours",
    "gpu_count": "gpuCount",
    "gpu_hours": "gpuHours",
    "ram_byte_request_average": "ramByteRequestAverage",
    "ram_byte_usage_average": "ramByteUsageAverage",
    "ram_byte_hours": "ramByteHours",
    "pv_byte_hours": "pvByteHours",
    "network_transfer_bytes": "networkTransferBytes",
    "network_receive_bytes": "networkReceiveBytes",
}
# Averages are combined weighted by minutes when steps are merged; the rest add up.
_AVERAGES = (
    "cpu_core_request_average",
    "cpu_core_usage_average",
    "gpu_count",
    "gpu_usage_average",
    "ram_byte_request_average",
    "ram_byte_usage_average",
)
_SUMS = (
    "minutes",
    "cpu_core_hours",
    "gpu_hours",
    "ram_byte_hours",
    "pv_byte_hours",
    "network_transfer_bytes",
    "network_receive_bytes",
)
# Enough digits that a merged average times its hours gives back the summed integral.
_MERGE_CONTEXT = decimal.Context(prec=50)
# No Kubernetes name or label is anywhere near this; a longer string is not OpenCost's.
MAX_TEXT = 2048
# Kubernetes caps an object's labels and annotations at 256 KiB in total.
MAX_LABELS_TEXT = 256 * 1024
_SHORT = 80


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def load_json(body: str | bytes) -> object:
    """Parse JSON with every non-integer number as an exact `Decimal`."""
    return json.loads(body, parse_float=Decimal, parse_constant=_reject_constant)


def short(text: str) -> str:
    """`text` cut for an error message: a hostile 10 MB name must not become a 10 MB error."""
    if len(text) <= _SHORT:
        return repr(text)
    return f"{text[:_SHORT]!r}… ({len(text)} characters)"


def _non_finite(value: object, path: str = "") -> tuple[str, Decimal] | None:
    """(dotted path, value) of the first NaN/Infinity inside `value`, or None."""
    if isinstance(value, Decimal) and not value.is_finite():
        return path, value
    children: Iterable[tuple[str, object]] = ()
    if isinstance(value, dict):
        children = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        children = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    for where, child in children:
        found = _non_finite(child, where)
        if found is not None:
            return found
    return None


def decode(body: str | bytes, *, query: str = "") -> list[Step]:
    """Unwrap the `{code, data}` envelope (with or without `status`) into its step maps.

    Raises `OpenCostHTTPError` for an envelope whose `code` is an error, and
    `OpenCostResponseError` for anything that is not the allocation JSON shape.
    """
    constants: list[str] = []

    def constant(name: str) -> Decimal:
        constants.append(name)
        return Decimal(name)  # NaN, Infinity, -Infinity: found and named below

    try:
        doc = json.loads(body, parse_float=Decimal, parse_constant=constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.OpenCostResponseError(f"body is not JSON ({exc})", query=query) from exc
    if not isinstance(doc, dict):
        raise errors.OpenCostResponseError("body is not a JSON object", query=query)
    code = doc.get("code", 200)
    if isinstance(code, bool) or not isinstance(code, int):
        raise errors.OpenCostResponseError(
            f"`code` is not an integer: {_clip(repr(code), 100)}", query=query
        )
    if code != 200:
        message = doc.get("message")
        raise errors.OpenCostHTTPError(
            code, _clip(str(message)) if message else "error without message", query=query
        )
    data = doc.get("data")
    if not isinstance(data, list):
        raise errors.OpenCostResponseError(
            f"`data` is {type(data).__name__}, expected a list of step maps", query=query
        )
    steps: list[Step] = []
    for index, step in enumerate(data):
        if not isinstance(step, dict):
            raise errors.OpenCostResponseError(f"step {index} is not a map", query=query)
        for name, item in step.items():
            if not isinstance(item, dict):
                raise errors.OpenCostResponseError(
                    f"step {index}: allocation {short(name)} is not an object", query=query
                )
            found = _non_finite(item) if constants else None
            if found is not None:
                raise errors.OpenCostResponseError(
                    f"allocation {short(name)}: `{_clip(found[0], 200)}` is {found[1]}, "
                    "not a finite number",
                    query=query,
                )
        steps.append(step)
    if constants:  # outside any allocation (e.g. in the envelope)
        raise errors.OpenCostResponseError(
            f"body holds the non-standard JSON constant {constants[0]}", query=query
        )
    return steps


def _clip(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def error_message(body: str | bytes) -> str:
    """The human message of an error body: JSON `message` if present, else the plain text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("message"):
        return _clip(str(doc["message"]).strip())
    text = text.strip()
    return _clip(text) if text else "empty body"


def is_idle(name: str) -> bool:
    """`__idle__` itself or a per-cluster/per-node idle key such as `cluster-one/__idle__`."""
    return IDLE in name.split("/")


def namespaces(steps: Iterable[Step]) -> list[str]:
    """Namespaces an `aggregate=namespace` answer names, pseudo-namespaces included, idle not."""
    return sorted({name for step in steps for name in step if not is_idle(name)})


class _Fields:
    """Typed reads from one allocation object, with the allocation's name in every error."""

    def __init__(self, name: str, item: Mapping[str, object], query: str) -> None:
        self.name = name
        self.item = item
        self.query = query

    def fail(self, what: str) -> errors.OpenCostResponseError:
        return errors.OpenCostResponseError(
            f"allocation {short(self.name)}: {what}", query=self.query
        )

    def quantity(self, obj: Mapping[str, object], key: str) -> Decimal:
        """A non-negative number; null is zero (OpenCost's NaN)."""
        value = obj.get(key)
        if value is None:
            return allocation.ZERO
        if isinstance(value, int) and not isinstance(value, bool):
            value = Decimal(value)
        if not isinstance(value, Decimal):
            raise self.fail(f"`{key}` is not a number: {short(str(value))}")
        if value < 0:
            raise self.fail(f"`{key}` is negative ({value}); usage cannot be")
        return value

    def time(self, key: str) -> dt.datetime:
        value = self.item.get(key)
        if not isinstance(value, str):
            raise self.fail(f"`{key}` is not a timestamp: {value!r}")
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError as exc:
            raise self.fail(f"`{key}` is not RFC 3339: {value!r}") from exc
        if parsed.tzinfo is None:
            raise self.fail(f"`{key}` has no time zone: {value!r}")
        return parsed.astimezone(dt.UTC)

    def mapping(self, obj: Mapping[str, object], key: str) -> Mapping[str, object]:
        value = obj.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"`{key}` is not an object")
        return value

    def text(self, obj: Mapping[str, object], key: str) -> str:
        value = obj.get(key)
        if not isinstance(value, str):
            return ""
        if len(value) > MAX_TEXT:
            raise self.fail(f"`{key}` is {len(value)} characters long, more than {MAX_TEXT}")
        return value

    def labels(self, props: Mapping[str, object]) -> dict[str, str]:
        labels = {k: v for k, v in self.mapping(props, "labels").items() if isinstance(v, str)}
        size = sum(len(k) + len(v) for k, v in labels.items())
        if size > MAX_LABELS_TEXT:
            raise self.fail(
                f"`properties.labels` hold {size} characters, more than {MAX_LABELS_TEXT}"
            )
        return labels


def row(
    name: str,
    item: Mapping[str, object],
    *,
    cluster: str,
    aggregation: str,
    hour: dt.datetime,
    query: str = "",
) -> allocation.AllocationRow:
    """One Allocation object (one step) as a row of the collected `hour`.

    `cluster` is the operator's CLUSTER_ID, not OpenCost's `properties.cluster`, because the
    ledger scopes rows by the former.
    """
    f = _Fields(name, item, query)
    if len(name) > MAX_TEXT:
        raise f.fail(f"the name is {len(name)} characters long, more than {MAX_TEXT}")
    props = f.mapping(item, "properties")
    labels = f.labels(props)
    quantities = {field: f.quantity(item, key) for field, key in _QUANTITIES.items()}
    # gpuUsageAverage moved from the top level (OC 2024) into gpuAllocation (OC 1.121).
    gpu_usage = f.quantity(item, "gpuUsageAverage")
    if "gpuUsageAverage" not in item:
        gpu_usage = f.quantity(f.mapping(item, "gpuAllocation"), "gpuUsageAverage")
    return allocation.AllocationRow(
        cluster=cluster,
        name=name,
        namespace=f.text(props, "namespace"),
        aggregation=aggregation,
        hour=hour,
        start=f.time("start"),
        end=f.time("end"),
        controller_kind=f.text(props, "controllerKind"),
        controller_name=f.text(props, "controller"),
        pod=f.text(props, "pod"),
        container=f.text(props, "container"),
        node=f.text(props, "node"),
        labels=labels,
        gpu_usage_average=gpu_usage,
        **quantities,
    )


def check_hour(
    rows: Iterable[allocation.AllocationRow], hour: dt.datetime, *, query: str = ""
) -> None:
    """Every row must lie inside the hour asked for: OpenCost clips allocations to the window,
    so a row outside it is an answer to some other question (e.g. the wrong window)."""
    end_of_hour = hour + HOUR
    for r in rows:
        if r.start < hour or r.end > end_of_hour or r.end < r.start:
            raise errors.OpenCostResponseError(
                f"allocation {short(r.name)}: runs {r.start.isoformat()} to {r.end.isoformat()},"
                f" outside the requested window {hour.isoformat()} to {end_of_hour.isoformat()}",
                query=query,
            )


def _weighted(values: Sequence[tuple[Decimal, Decimal]]) -> Decimal:
    total = sum((minutes for _, minutes in values), Decimal(0))
    if total == 0:
        return max(value for value, _ in values)
    weighted = sum((value * minutes for value, minutes in values), Decimal(0))
    return _MERGE_CONTEXT.divide(weighted, total)


def merge(parts: Sequence[allocation.AllocationRow]) -> allocation.AllocationRow:
    """Combine one allocation's rows from several steps of the same hour into one row.

    Integrals (hours, bytes, minutes) add up; averages are weighted by each step's minutes;
    a property survives only if every part agrees (as OpenCost's own aggregation does).
    """
    first = parts[0]
    if len(parts) == 1:
        return first
    changes: dict[str, Any] = {
        "start": min(p.start for p in parts),
        "end": max(p.end for p in parts),
    }
    for field in _SUMS:
        changes[field] = sum((getattr(p, field) for p in parts), Decimal(0))
    for field in _AVERAGES:
        changes[field] = _weighted([(getattr(p, field), p.minutes) for p in parts])
    for field in ("namespace", "controller_kind", "controller_name", "pod", "container", "node"):
        values = {getattr(p, field) for p in parts}
        changes[field] = values.pop() if len(values) == 1 else ""
    common = set(first.labels.items())
    for p in parts[1:]:
        common &= set(p.labels.items())
    changes["labels"] = dict(sorted(common))
    return dataclasses.replace(first, **changes)


def rows(
    steps: Iterable[Step],
    *,
    cluster: str,
    aggregation: str,
    hour: dt.datetime,
    query: str = "",
) -> list[allocation.AllocationRow]:
    """All rows of one hour's answer, in name order: empty steps skipped, idle dropped."""
    by_name: dict[str, list[allocation.AllocationRow]] = {}
    for step in steps:
        for name, item in step.items():
            if is_idle(name):
                continue
            by_name.setdefault(name, []).append(
                row(name, item, cluster=cluster, aggregation=aggregation, hour=hour, query=query)
            )
    return [merge(by_name[name]) for name in sorted(by_name)]

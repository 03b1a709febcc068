"""An OpenCost-compatible `/allocation` server for tests and the local sandbox.

It answers `GET /allocation/compute` (and `/allocation`) on 127.0.0.1 from either
- the real OpenCost 1.121.3 captures (`Captures`), re-timed onto whichever hour is asked for,
  served only for the aggregates they were captured with, or
- generated clusters of N namespaces x M pods x K containers (`Generated`), deterministic by
  seed, in the same JSON shape, with exact 5-decimal numbers like OpenCost's.

It honours `window` (RFC 3339 `Z` pairs and unix pairs), `step`, `accumulate`, `aggregate`,
`includeIdle` and `filter` (`field:"a","b"`, `field!:"a"`, joined by `+`), answers errors the
way OpenCost does (plain-text 400 for a bad window or step, JSON 500 for a bad filter), and can
be told to fail (`Fault`): JSON 500, plain-text 400, malformed JSON, a slow answer, or the
hostile answers of the fault suite (any status, headers and bytes; the normal document
altered; a slow-loris drip).
Every request is recorded, with the peak number served at once, so tests can check encoding
and concurrency. With `prebuilt=True` (`--prebuilt`) each distinct answer is built once and
its bytes served again from memory, so a benchmark can ask every query once before timing and
then time the client, not the stand-in. No network beyond loopback is used.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime as dt
import decimal
import http.server
import json
import pathlib
import random
import re
import signal
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, Protocol

from finops.collection import durations
from finops.opencost import parse

HOUR = dt.timedelta(hours=1)
PATHS = ("/allocation/compute", "/allocation")
HEALTH_PATH = "/healthz"  # OpenCost's liveness and readiness path: 200 while serving
DEFAULT_DIMENSIONS = ("cluster", "node", "namespace", "pod", "container")
_TS = "%Y-%m-%dT%H:%M:%SZ"
_FIVE = Decimal("0.00001")
_GIB = Decimal(2**30)

Alloc = dict[str, Any]
Props = Mapping[str, object]


class ReplayError(Exception):
    """An answer OpenCost would give as an error: plain text (400s) or the JSON envelope."""

    def __init__(self, status: int, message: str, *, plain: bool) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.plain = plain


# ---------------------------------------------------------------- JSON with exact numbers

_RAW = "\x00"
_RAW_STRING = re.compile(r'"\\u0000(-?[0-9.]+)\\u0000"')


def number_text(value: Decimal) -> str:
    """A Decimal as Go prints a float64: shortest plain form (`0`, `60`, `0.04694`)."""
    text = format(value.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def _encode_decimal(value: object) -> str:
    if isinstance(value, Decimal):
        return _RAW + number_text(value) + _RAW
    raise TypeError(f"cannot encode {type(value).__name__}")


def dumps(doc: object) -> bytes:
    """Compact JSON in which every Decimal is written as its exact digits."""
    text = json.dumps(doc, default=_encode_decimal, separators=(",", ":"))
    return _RAW_STRING.sub(r"\1", text).encode()


def round5(value: Decimal) -> Decimal:
    """OpenCost's `math.Round(f*1e5)/1e5`: five decimals, halves away from zero."""
    return value.quantize(_FIVE, rounding=decimal.ROUND_HALF_UP)


# ---------------------------------------------------------------------- query parameters

_RFC3339_PAIR = re.compile(
    r"(\d\d\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ),(\d\d\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
)
_UNIX_PAIR = re.compile(r"(\d+)[,|-](\d+)")


def parse_window(text: str) -> tuple[dt.datetime, dt.datetime]:
    """The absolute window forms OpenCost accepts; anything else is its plain-text 400."""
    illegal = ReplayError(400, f"Invalid 'window' parameter: illegal window: {text}", plain=True)
    if m := _RFC3339_PAIR.fullmatch(text):
        start, end = (dt.datetime.strptime(g, _TS).replace(tzinfo=dt.UTC) for g in m.groups())
    elif m := _UNIX_PAIR.fullmatch(text):
        start, end = (dt.datetime.fromtimestamp(int(g), dt.UTC) for g in m.groups())
    else:
        raise illegal
    if end <= start:
        raise illegal
    return start, end


def parse_aggregate(text: str) -> tuple[str, ...]:
    """Lower-cased dimensions in the order given; empty means OpenCost's default five."""
    dims = tuple(d.strip().lower() for d in text.split(",") if d.strip())
    return dims or DEFAULT_DIMENSIONS


_FILTER_FIELDS = {
    "namespace": "namespace",
    "pod": "pod",
    "container": "container",
    "node": "node",
    "cluster": "cluster",
    "controllername": "controller",
    "controllerkind": "controllerKind",
}
_COMPARISON = re.compile(r'\s*([A-Za-z]+)\s*(!?:)\s*("[^"]*"(?:\s*,\s*"[^"]*")*)\s*')


def _filter_error(detail: str) -> ReplayError:
    return ReplayError(500, f"invalid filter: parsing filter: {detail}", plain=False)


def parse_filter(text: str) -> Callable[[Props], bool]:
    """The subset of OpenCost's v2.1 filter grammar tests need: equality comparisons on
    plain fields, optionally negated, joined by `+` (AND)."""
    if not text.strip():
        return lambda props: True
    tests: list[tuple[str, bool, frozenset[str]]] = []
    for clause in text.split("+"):
        m = _COMPARISON.fullmatch(clause)
        if m is None:
            raise _filter_error(f"1 error occurred:\n\t* cannot parse {clause!r}\n\n")
        field, op, values = m.groups()
        if field.lower() not in _FILTER_FIELDS:
            raise _filter_error(f"1 error occurred:\n\t* at '{field}': expect filter field\n\n")
        wanted = frozenset(re.findall(r'"([^"]*)"', values))
        tests.append((_FILTER_FIELDS[field.lower()], op == "!:", wanted))

    def keep(props: Props) -> bool:
        for key, negated, wanted in tests:
            value = props.get(key)
            hit = isinstance(value, str) and value in wanted
            if hit == negated:
                return False
        return True

    return keep


def filter_namespaces(text: str) -> frozenset[str]:
    """Namespaces named by `namespace:"…"` comparisons in a raw filter (for fault matching)."""
    return frozenset(
        v
        for m in re.finditer(r'namespace\s*:\s*("[^"]*"(?:\s*,\s*"[^"]*")*)', text)
        for v in re.findall(r'"([^"]*)"', m.group(1))
    )


@dataclasses.dataclass(frozen=True, slots=True)
class StepQuery:
    """What a data source must answer: one step set of one request."""

    path: str
    start: dt.datetime
    end: dt.datetime
    aggregate: tuple[str, ...]
    include_idle: bool
    keep: Callable[[Props], bool]


class Source(Protocol):
    """Where allocations come from; returns one step's name → Allocation map."""

    def step(self, query: StepQuery) -> dict[str, Alloc]: ...


# ----------------------------------------------------------------------------- captures

# The real captures ship with the repository (a copy of the project's shared test data).
DEFAULT_CAPTURES = pathlib.Path(__file__).resolve().parents[3] / "tests" / "data" / "opencost-real"

_CAPTURE_FILES: dict[tuple[str, tuple[str, ...], bool], str] = {
    ("/allocation/compute", ("namespace",), False): "allocation-compute-60m.json",
    ("/allocation", ("namespace",), False): "allocation-namespace-60m.json",
    ("/allocation/compute", ("namespace",), True): "allocation-namespace-idle.json",
    ("/allocation", ("namespace",), True): "allocation-namespace-idle.json",
    ("/allocation/compute", ("namespace", "pod"), False): "allocation-pod-60m.json",
    ("/allocation", ("namespace", "pod"), False): "allocation-pod-60m.json",
    ("/allocation/compute", ("namespace", "controller"), False): "allocation-controller-60m.json",
    ("/allocation", ("namespace", "controller"), False): "allocation-controller-60m.json",
    # Captured with filter=namespace:"oc-test": only that namespace's pods are in it.
    ("/allocation/compute", ("pod",), False): "allocation-namespace-filtered.json",
    ("/allocation", ("pod",), False): "allocation-namespace-filtered.json",
}

_CONTAINER_LEVEL = ("namespace", "pod", "container")
"""Served from the pod capture (see `container_level`): what job pods ask for by default."""

MULTI_CONTAINER = "__pod__"
"""The container name the stand-in gives a pod whose capture names no single container."""


def container_level(pods: dict[str, Alloc]) -> dict[str, Alloc]:
    """The pod capture as OpenCost's `namespace,pod,container` answer would key it.

    A pod-level allocation whose properties name one `container` is exactly that container's
    allocation (OpenCost drops the property when a pod has several), so it is served as
    `namespace/pod/container`. A pod with several containers cannot be split exactly; it is
    served whole as container `__pod__`, which keeps every namespace and controller total as
    captured (nothing is billed per container).
    """
    out: dict[str, Alloc] = {}
    for name, item in pods.items():
        container = (item.get("properties") or {}).get("container") or MULTI_CONTAINER
        moved = copy.deepcopy(item)
        moved["name"] = f"{name}/{container}"
        moved.setdefault("properties", {})["container"] = container
        out[moved["name"]] = moved
    return out


def _ts(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime(_TS)


def _parse_ts(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value).astimezone(dt.UTC)


class Captures:
    """The real captures, each answered for any one-hour step that starts on the hour.

    A capture covers 60 minutes starting at 09:58; it is shifted as a whole onto the asked
    hour (window, `start`, `end` moved by the same offset), so durations and quantities stay
    exactly as captured. `hours` limits which hours have data (None: every hour); other
    steps are empty sets `{}`. Only the captured aggregates are served (see
    `_CAPTURE_FILES`), plus `namespace,pod,container` derived from the pod capture (see
    `container_level`); any other is answered 404 so a test cannot silently get wrong data.
    """

    def __init__(
        self, directory: pathlib.Path = DEFAULT_CAPTURES, hours: Iterable[dt.datetime] | None = None
    ) -> None:
        self.directory = directory
        self.hours = None if hours is None else frozenset(h.astimezone(dt.UTC) for h in hours)
        self._cache: dict[str, tuple[dict[str, Alloc], dt.datetime]] = {}

    def load(self, filename: str) -> tuple[dict[str, Alloc], dt.datetime]:
        """A capture's single step map (numbers as Decimal) and its window start."""
        if filename not in self._cache:
            doc = parse.load_json((self.directory / filename).read_bytes())
            assert isinstance(doc, dict) and isinstance(doc["data"], list)
            step = doc["data"][0]
            first = next(iter(step.values()))
            self._cache[filename] = (step, _parse_ts(first["window"]["start"]))
        return self._cache[filename]

    def step(self, query: StepQuery) -> dict[str, Alloc]:
        if query.aggregate == _CONTAINER_LEVEL and not query.include_idle:
            pods = dataclasses.replace(query, aggregate=_CONTAINER_LEVEL[:2])
            return container_level(self.step(pods))
        key = (query.path, query.aggregate, query.include_idle)
        filename = _CAPTURE_FILES.get(key)
        if filename is None:
            raise ReplayError(
                404,
                f"replay: no capture for path={query.path} aggregate={','.join(query.aggregate)}"
                f" includeIdle={str(query.include_idle).lower()}",
                plain=False,
            )
        if query.end - query.start != HOUR or query.start.minute or query.start.second:
            return {}
        if self.hours is not None and query.start not in self.hours:
            return {}
        captured, window_start = self.load(filename)
        delta = query.start - window_start
        out: dict[str, Alloc] = {}
        for name, item in captured.items():
            if not is_idle_name(name) and not query.keep(item.get("properties") or {}):
                continue
            moved = copy.deepcopy(item)
            moved["window"] = {"start": _ts(query.start), "end": _ts(query.end)}
            for key_ in ("start", "end"):
                moved[key_] = _ts(_parse_ts(item[key_]) + delta)
            out[name] = moved
        return out


def is_idle_name(name: str) -> bool:
    return parse.IDLE in name.split("/")


# ---------------------------------------------------------------------------- generated

# Top-level keys of an OpenCost 1.121.3 Allocation, in the order it writes them.
_ALLOC_KEYS = tuple(
    [
        "name",
        "properties",
        "window",
        "start",
        "end",
        "minutes",
        "cpuCores",
        "cpuCoreRequestAverage",
        "cpuCoreLimitAverage",
        "cpuCoreUsageAverage",
        "cpuCoreHours",
        "cpuCost",
        "cpuCostAdjustment",
        "cpuCostIdle",
        "cpuEfficiency",
        "gpuCount",
        "gpuHours",
        "gpuCost",
        "gpuCostAdjustment",
        "gpuCostIdle",
        "gpuEfficiency",
        "networkTransferBytes",
        "networkReceiveBytes",
        "networkCost",
        "networkCrossZoneCost",
        "networkCrossRegionCost",
        "networkInternetCost",
        "networkNatGatewayEgressCost",
        "networkNatGatewayIngressCost",
        "networkCostAdjustment",
        "loadBalancerCost",
        "loadBalancerCostAdjustment",
        "pvBytes",
        "pvByteHours",
        "pvCost",
        "pvs",
        "pvCostAdjustment",
        "ramBytes",
        "ramByteRequestAverage",
        "ramByteLimitAverage",
        "ramByteUsageAverage",
        "ramByteHours",
        "ramCost",
        "ramCostAdjustment",
        "ramCostIdle",
        "ramEfficiency",
        "externalCost",
        "sharedCost",
        "totalCost",
        "totalEfficiency",
        "rawAllocationOnly",
        "lbAllocations",
        "gpuAllocation",
    ]
)
_SUMMED = (
    "cpuCoreHours",
    "gpuHours",
    "ramByteHours",
    "pvByteHours",
    "networkTransferBytes",
    "networkReceiveBytes",
)
_AVERAGED = (
    "cpuCoreRequestAverage",
    "cpuCoreLimitAverage",
    "cpuCoreUsageAverage",
    "ramByteRequestAverage",
    "ramByteLimitAverage",
    "ramByteUsageAverage",
)
CPU_RATE = Decimal(2)  # per core-hour, as in the captures
RAM_RATE = Decimal(1)  # per GiB-hour
PV_RATE = Decimal("0.0001")  # per GiB-hour
NET_RATE = Decimal("0.01")  # per GiB


@dataclasses.dataclass(frozen=True, slots=True)
class _Member:
    """One container-level allocation before aggregation."""

    props: dict[str, Any]
    start: dt.datetime
    end: dt.datetime
    values: dict[str, Decimal | None]


def _minutes(start: dt.datetime, end: dt.datetime) -> Decimal:
    return Decimal((end - start) // dt.timedelta(seconds=1)) / 60


@dataclasses.dataclass
class Generated:
    """A synthetic cluster: `namespaces` x `pods_per_namespace` x `containers_per_pod`.

    Every hour (or only `hours`) has data; values depend only on (seed, hour, namespace,
    pod, container), so two servers with the same arguments answer byte for byte the same.
    Some pods start or stop inside the hour, some have no controller, some containers have
    no network metrics (`null`), and an `__unmounted__` pseudo-allocation holds a volume.
    """

    namespaces: int = 10
    pods_per_namespace: int = 5
    containers_per_pod: int = 2
    seed: int = 0
    hours: frozenset[dt.datetime] | None = None
    cluster: str = "replay-cluster"
    nodes: int = 3
    _cache: dict[dt.datetime, list[_Member]] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _lock: threading.Lock = dataclasses.field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def namespace_names(self) -> list[str]:
        return [f"ns-{i:04d}" for i in range(self.namespaces)]

    def members(self, hour: dt.datetime) -> list[_Member]:
        """The hour's container-level allocations (cached: shards of one hour share them)."""
        with self._lock:
            if hour not in self._cache:
                if len(self._cache) > 8:
                    self._cache.clear()
                self._cache[hour] = self._generate(hour)
            return self._cache[hour]

    def _generate(self, hour: dt.datetime) -> list[_Member]:
        out: list[_Member] = []
        stamp = int(hour.timestamp())
        for i, ns in enumerate(self.namespace_names()):
            for j in range(self.pods_per_namespace):
                rng = random.Random(f"{self.seed}:{stamp}:{i}:{j}")
                kind = rng.choice(["deployment", "deployment", "statefulset", "daemonset", ""])
                controller = f"app-{j % 3}" if kind else ""
                pod = f"{controller or 'static'}-{rng.getrandbits(32):08x}"
                start = hour + dt.timedelta(minutes=rng.choice([0, 0, 0, 0, 10, 25, 40]))
                end = hour + HOUR - dt.timedelta(minutes=rng.choice([0, 0, 0, 0, 0, 5, 30]))
                if end <= start:
                    end = hour + HOUR
                node = f"node-{rng.randrange(self.nodes)}"
                for k in range(self.containers_per_pod):
                    out.append(
                        self._container(
                            rng, hour, ns, pod, f"c{k}", kind, controller, node, start, end
                        )
                    )
        out.append(self._unmounted(hour))
        return out

    def _container(
        self,
        rng: random.Random,
        hour: dt.datetime,
        ns: str,
        pod: str,
        container: str,
        kind: str,
        controller: str,
        node: str,
        start: dt.datetime,
        end: dt.datetime,
    ) -> _Member:
        hours = _minutes(start, end) / 60
        cpu_req = Decimal(rng.randrange(0, 2001)) / 1000
        cpu_use = round5(Decimal(rng.randrange(0, 3_000_000)) / 1_000_000)
        ram_req = Decimal(rng.randrange(0, 4097)) * 2**20
        ram_use = Decimal(rng.randrange(0, 5_000_000)) * 1000 + Decimal(rng.randrange(0, 100)) / 100
        pv = Decimal(rng.choice([0, 0, 0, 1, 10])) * 2**30
        net: Decimal | None = None
        if rng.random() > 0.1:
            net = Decimal(rng.randrange(0, 10**9))
        props: dict[str, Any] = {
            "cluster": self.cluster,
            "node": node,
            "container": container,
            "namespace": ns,
            "pod": pod,
            "providerID": f"replay://{node}",
            "labels": {"app": controller or "static", "tier": rng.choice(["web", "db", "batch"])},
            "namespaceLabels": {"kubernetes_io_metadata_name": ns},
        }
        if kind:
            props["controller"] = controller
            props["controllerKind"] = kind
        values: dict[str, Decimal | None] = {
            "cpuCoreRequestAverage": cpu_req,
            "cpuCoreLimitAverage": cpu_req * 2,
            "cpuCoreUsageAverage": cpu_use,
            "cpuCoreHours": round5(max(cpu_req, cpu_use) * hours),
            "gpuHours": Decimal(0),
            "ramByteRequestAverage": ram_req,
            "ramByteLimitAverage": ram_req * 2,
            "ramByteUsageAverage": ram_use,
            "ramByteHours": round5(max(ram_req, ram_use) * hours),
            "pvByteHours": round5(pv * hours),
            "networkTransferBytes": net,
            "networkReceiveBytes": None if net is None else net // 3,
        }
        return _Member(props, start, end, values)

    def _unmounted(self, hour: dt.datetime) -> _Member:
        props: dict[str, Any] = {
            "cluster": self.cluster,
            "namespace": parse.UNMOUNTED,
            "pod": parse.UNMOUNTED,
            "container": parse.UNMOUNTED,
        }
        values: dict[str, Decimal | None] = {k: Decimal(0) for k in _SUMMED + _AVERAGED}
        values["pvByteHours"] = Decimal(5 * 2**30)
        return _Member(props, hour, hour + HOUR, values)

    def step(self, query: StepQuery) -> dict[str, Alloc]:
        members: list[_Member] = []
        hour = query.start.replace(minute=0, second=0, microsecond=0)
        while hour < query.end:
            if hour >= query.start and (self.hours is None or hour in self.hours):
                members.extend(m for m in self.members(hour) if query.keep(m.props))
            hour += HOUR
        groups: dict[str, list[_Member]] = {}
        for m in members:
            groups.setdefault(_key(m.props, query.aggregate), []).append(m)
        out = {name: _allocation(name, group, query) for name, group in sorted(groups.items())}
        if query.include_idle and members:
            out = {parse.IDLE: self._idle(members, query), **out}
        return dict(sorted(out.items()))

    def _idle(self, members: Sequence[_Member], query: StepQuery) -> Alloc:
        used = sum((m.values["cpuCoreHours"] or Decimal(0) for m in members), Decimal(0))
        start = min(m.start for m in members)
        end = max(m.end for m in members)
        capacity = Decimal(self.nodes * 64) * _minutes(start, end) / 60
        cpu_cost = round5((capacity - used) * CPU_RATE)
        idle: Alloc = {k: Decimal(0) for k in _ALLOC_KEYS[5:]}
        idle.update(
            name=parse.IDLE,
            properties={"cluster": self.cluster},
            window={"start": _ts(query.start), "end": _ts(query.end)},
            start=_ts(start),
            end=_ts(end),
            minutes=round5(_minutes(start, end)),
            cpuCost=cpu_cost,
            totalCost=cpu_cost,
            pvs=None,
            lbAllocations=None,
            gpuAllocation=None,
        )
        idle.pop("rawAllocationOnly")
        return {k: idle[k] for k in _ALLOC_KEYS if k in idle}


def _dimension(props: Props, dim: str) -> str | None:
    """One segment of an allocation name, as OpenCost's GenerateKey builds it."""
    if dim in ("cluster", "node", "namespace", "pod", "container"):
        value = props.get(dim)
        return value if isinstance(value, str) else ""
    if dim == "controller":
        kind, name = props.get("controllerKind"), props.get("controller")
        return f"{kind}:{name}" if kind and name else parse.UNALLOCATED
    if dim == "controllerkind":
        kind = props.get("controllerKind")
        return kind if isinstance(kind, str) and kind else parse.UNALLOCATED
    return None  # unknown dimensions are dropped silently, as OpenCost does


def _key(props: Props, aggregate: Sequence[str]) -> str:
    return "/".join(s for d in aggregate if (s := _dimension(props, d)) is not None)


def _intersect(group: Sequence[_Member]) -> dict[str, Any]:
    first = group[0].props
    out: dict[str, Any] = {}
    for key, value in first.items():
        if all(m.props.get(key) == value for m in group[1:]):
            out[key] = value
    return out


def _ratio(num: Decimal, den: Decimal) -> Decimal | None:
    return None if den == 0 else round5(num / den)


def _allocation(name: str, group: Sequence[_Member], query: StepQuery) -> Alloc:
    """Aggregate container members the way OpenCost adds allocations, rounded to 5 places."""
    start = min(m.start for m in group)
    end = max(m.end for m in group)
    minutes = _minutes(start, end)
    zero = Decimal(0)
    sums = {k: sum((m.values[k] or zero for m in group), zero) for k in _SUMMED}
    nulls = {k for k in _SUMMED if all(m.values[k] is None for m in group)}
    avgs = _averages(group, minutes)
    hours = minutes / 60
    alloc: Alloc = {k: zero for k in _ALLOC_KEYS}
    alloc.update(
        name=name,
        properties=_intersect(group),
        window={"start": _ts(query.start), "end": _ts(query.end)},
        start=_ts(start),
        end=_ts(end),
        minutes=round5(minutes),
        cpuCores=_ratio(sums["cpuCoreHours"], hours) if hours else zero,
        pvBytes=_ratio(sums["pvByteHours"], hours) if hours else zero,
        pvs=None,
        ramBytes=_ratio(sums["ramByteHours"], hours) if hours else zero,
        lbAllocations=None,
        gpuAllocation={"isGPUShared": None, "gpuUsageAverage": None, "gpuRequestAverage": zero},
        **_costs(sums, avgs),
        **avgs,
        **sums,
    )
    for k in nulls:
        alloc[k] = None
    if len(group) == 1:
        alloc["rawAllocationOnly"] = {
            "cpuCoreUsageMax": avgs["cpuCoreUsageAverage"],
            "ramByteUsageMax": avgs["ramByteUsageAverage"],
            "gpuUsageMax": None,
        }
    else:
        del alloc["rawAllocationOnly"]
    return alloc


def _averages(group: Sequence[_Member], minutes: Decimal) -> dict[str, Decimal]:
    """Minute-weighted averages of the members (zero over an empty window)."""
    zero = Decimal(0)
    return {
        k: round5(
            sum(((m.values[k] or zero) * _minutes(m.start, m.end) for m in group), zero) / minutes
        )
        if minutes
        else zero
        for k in _AVERAGED
    }


def _costs(sums: Mapping[str, Decimal], avgs: Mapping[str, Decimal]) -> dict[str, Any]:
    """The cost and efficiency fields, priced at the replay's fixed rates."""
    zero = Decimal(0)
    cpu_cost = round5(sums["cpuCoreHours"] * CPU_RATE)
    ram_cost = round5(sums["ramByteHours"] / _GIB * RAM_RATE)
    pv_cost = round5(sums["pvByteHours"] / _GIB * PV_RATE)
    net_cost = round5(
        (sums["networkTransferBytes"] + sums["networkReceiveBytes"]) / _GIB * NET_RATE
    )
    cpu_eff = _ratio(avgs["cpuCoreUsageAverage"], avgs["cpuCoreRequestAverage"])
    ram_eff = _ratio(avgs["ramByteUsageAverage"], avgs["ramByteRequestAverage"])
    return {
        "cpuCost": cpu_cost,
        "cpuEfficiency": cpu_eff,
        "networkCost": net_cost,
        "networkInternetCost": net_cost,
        "pvCost": pv_cost,
        "ramCost": ram_cost,
        "ramEfficiency": ram_eff,
        "totalCost": cpu_cost + ram_cost + pv_cost + net_cost,
        "totalEfficiency": _ratio(
            (cpu_eff or zero) * cpu_cost + (ram_eff or zero) * ram_cost, cpu_cost + ram_cost
        )
        or zero,
    }


# ------------------------------------------------------------------------------- faults

FaultKind = Literal["http500", "http400", "bad_json", "slow", "raw", "mutate", "drip"]


@dataclasses.dataclass(frozen=True, slots=True)
class Fault:
    """Make matching requests fail.

    `http500`: JSON envelope with `message`; `http400`: plain text `message`; `bad_json`: a
    200 whose body is cut off mid-document; `slow`: wait `delay` seconds, then answer
    normally (any kind may also carry a `delay`). The hostile kinds: `raw` answers `status`,
    `headers` and `body` as given; `mutate` answers 200 with the normal answer's document
    passed through `mutate` (floats are written as Python's `json` does: `NaN`, `Infinity`);
    `drip` (slow-loris) sends the headers at once, then the body (`body`, else the normal
    answer) repeated `repeat` times, `chunk` bytes every `interval` seconds, with no
    Content-Length when `declare_length` is false (the body then ends with the connection). A fault
    matches requests whose filter names `namespace` (None: all) and whose aggregate is
    `aggregate` (None: all), at most `times` times (None: always).
    """

    kind: FaultKind
    message: str = "replay: injected failure"
    delay: float = 0.0
    namespace: str | None = None
    aggregate: str | None = None
    times: int | None = None
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    mutate: Callable[[Any], Any] | None = None
    interval: float = 0.0
    chunk: int = 1
    repeat: int = 1
    declare_length: bool = True


@dataclasses.dataclass(slots=True)
class _Armed:
    fault: Fault
    uses: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Recorded:
    """One request as the server saw it."""

    path: str
    raw_query: str
    params: dict[str, str]


# ------------------------------------------------------------------------------- server


class ReplayServer:
    """The HTTP server, run in a daemon thread on 127.0.0.1 (port 0 = any free port)."""

    def __init__(
        self, source: Source, *, host: str = "127.0.0.1", port: int = 0, prebuilt: bool = False
    ) -> None:
        self.source = source
        self._built: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[int, str, bytes]] = {}
        self._prebuilt = prebuilt
        self.requests: list[Recorded] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._faults: list[_Armed] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = http.server.ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ReplayServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll
            name="opencost-replay",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(_Armed(fault))

    def clear(self) -> None:
        """Forget faults, recorded requests and the concurrency peak."""
        with self._lock:
            self._faults.clear()
            self.requests.clear()
            self.max_in_flight = 0

    def _take_fault(self, params: Mapping[str, str]) -> Fault | None:
        named = filter_namespaces(params.get("filter", ""))
        with self._lock:
            for armed in self._faults:
                fault = armed.fault
                if fault.times is not None and armed.uses >= fault.times:
                    continue
                if fault.namespace is not None and fault.namespace not in named:
                    continue
                if fault.aggregate is not None and fault.aggregate != params.get("aggregate"):
                    continue
                armed.uses += 1
                return fault
        return None

    def _enter(self, record: Recorded) -> None:
        with self._lock:
            self.requests.append(record)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def answer(self, path: str, params: Mapping[str, str]) -> tuple[int, str, bytes]:
        """Status, content type and body for one request (faults applied by the handler)."""
        if not self._prebuilt:
            return self._build(path, params)
        key = (path, tuple(sorted(params.items())))
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = self._build(path, params)
        return built

    def _build(self, path: str, params: Mapping[str, str]) -> tuple[int, str, bytes]:
        try:
            if path not in PATHS:
                raise ReplayError(404, "404 page not found", plain=True)
            start, end = parse_window(params.get("window", ""))
            step = _parse_step(params.get("step"), end - start)
            keep = parse_filter(params.get("filter", ""))
            accumulate = params.get("accumulate", "").lower() in ("true", "1", "all")
            include_idle = params.get("includeIdle", "").lower() in ("true", "1", "t")
            aggregate = parse_aggregate(params.get("aggregate", ""))
            sets: list[Alloc] = []
            for s, e in _steps(start, end, end - start if accumulate else step):
                sets.append(self.source.step(StepQuery(path, s, e, aggregate, include_idle, keep)))
        except ReplayError as exc:
            if exc.plain:
                return exc.status, "text/plain; charset=utf-8", f"{exc.message}\n".encode()
            body = dumps({"code": exc.status, "data": None, "message": exc.message})
            return exc.status, "application/json", body
        return 200, "application/json", dumps({"code": 200, "data": sets})


def _parse_step(raw: str | None, default: dt.timedelta) -> dt.timedelta:
    if raw is None or raw == "":
        return default
    try:
        step = durations.parse(raw)
    except ValueError:
        step = dt.timedelta(0)
    if step <= dt.timedelta(0):
        raise ReplayError(400, f"Invalid step parameter: {raw}", plain=True)
    return step


def _steps(
    start: dt.datetime, end: dt.datetime, step: dt.timedelta
) -> Iterator[tuple[dt.datetime, dt.datetime]]:
    """Step sets forward from the window start; the last one is not clipped (as OpenCost)."""
    s = start
    while s < end:
        yield s, s + step
        s += step


def _faulty_answer(
    server: ReplayServer, fault: Fault | None, path: str, params: Mapping[str, str]
) -> tuple[int, str, bytes]:
    """Status, content type and body for a request, as the armed `fault` (if any) has it."""
    if fault is None or fault.kind == "slow":
        return server.answer(path, params)
    if fault.kind == "http500":
        return 500, "application/json", dumps({"code": 500, "data": None, "message": fault.message})
    if fault.kind == "http400":
        return 400, "text/plain; charset=utf-8", f"{fault.message}\n".encode()
    if fault.kind == "raw":
        return fault.status, "application/json", fault.body or b""
    status, ctype, body = server.answer(path, params)
    if fault.kind == "mutate":
        if status == 200 and fault.mutate is not None:
            body = dumps(fault.mutate(parse.load_json(body)))
        return status, ctype, body
    return 200, ctype, body[: max(1, len(body) // 2)]  # bad_json: cut off mid-document


class _Handler(http.server.BaseHTTPRequestHandler):
    """One request; `replay` is the ReplayServer (set on a subclass per server)."""

    replay: ReplayServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        self.replay._enter(Recorded(url.path, url.query, params))
        try:
            self._serve(url.path, params)
        finally:
            self.replay._leave()

    def _serve(self, path: str, params: dict[str, str]) -> None:
        if path == HEALTH_PATH:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._head(200, "text/plain; charset=utf-8", 3, ())
                self.wfile.write(b"ok\n")
            return
        fault = self.replay._take_fault(params)
        if fault is not None and fault.delay and self.replay._stopping.wait(fault.delay):
            return
        if fault is not None and fault.kind == "drip":
            self._drip(fault, path, params)
            return
        status, ctype, body = _faulty_answer(self.replay, fault, path, params)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._head(status, ctype, len(body), fault.headers if fault is not None else ())
            self.wfile.write(body)

    def _head(
        self, status: int, ctype: str, length: int | None, headers: Iterable[tuple[str, str]]
    ) -> None:
        """Status and headers; without a `length` the body runs until the connection closes."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length is None:
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(length))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()

    def _drip(self, fault: Fault, path: str, params: dict[str, str]) -> None:
        """Slow-loris: headers now, then the body a few bytes at a time (stop aborts)."""
        body = fault.body
        if body is None:
            body = self.replay.answer(path, params)[2]
        step = max(1, fault.chunk)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            length = len(body) * fault.repeat if fault.declare_length else None
            self._head(fault.status, "application/json", length, fault.headers)
            self.wfile.flush()
            for _ in range(fault.repeat):
                for i in range(0, len(body), step):
                    if fault.interval and self.replay._stopping.wait(fault.interval):
                        return
                    self.wfile.write(body[i : i + step])
                    self.wfile.flush()


def _handler_for(server: ReplayServer) -> type[http.server.BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"replay": server})


@contextlib.contextmanager
def serving(source: Source) -> Iterator[ReplayServer]:
    """A started server for the `with` block, stopped afterwards."""
    with ReplayServer(source) as srv:
        yield srv


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m finops_devenv.opencost_replay`: serve captures or a generated cluster.

    Runs in the foreground until SIGINT or SIGTERM (handled, so it also stops as a
    container's PID 1), answering `/healthz` besides the allocation paths.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: all)")
    ap.add_argument("--port", type=int, default=9003, help="0: any free port")
    ap.add_argument("--captures", type=pathlib.Path, help="folder of real captures")
    ap.add_argument("--namespaces", type=int, default=10)
    ap.add_argument("--pods", type=int, default=5, help="pods per namespace")
    ap.add_argument("--containers", type=int, default=2, help="containers per pod")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--prebuilt", action="store_true", help="build each distinct answer once, then replay it"
    )
    args = ap.parse_args(argv)
    source: Source = (
        Captures(args.captures)
        if args.captures
        else Generated(args.namespaces, args.pods, args.containers, args.seed)
    )
    srv = ReplayServer(source, host=args.host, port=args.port, prebuilt=args.prebuilt)
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    srv.start()
    print(f"OpenCost replay on {srv.url}", flush=True)
    try:
        while not stop.wait(0.5):  # short waits: the handler runs between them
            pass
    finally:
        srv.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    main()

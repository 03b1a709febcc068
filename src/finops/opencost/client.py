"""Fetch one hour of allocations from OpenCost, whole or sharded by namespace.

The unit of work is one hour `[hour, hour+1h)`, asked for as an RFC 3339 `Z` pair (the only
absolute form OpenCost accepts) with `accumulate=true`, so the answer is one set for the hour
whatever `OPENCOST_STEP` says. With `spec.sharding`, a cheap `aggregate=namespace` query lists
the hour's namespaces (pseudo-namespaces included), and namespace-filtered queries of at most
`namespacesPerShard` namespaces run with at most `concurrency` in flight; the first failure
cancels the others and is raised, so the caller rolls the hour back.

Typical use by the allocation run::

    async with client.OpenCostClient(cfg) as oc, client.hour_deadline(oc, hour):
        async for lines in client.iter_hour_lines(oc, hour, cluster=cluster_id):
            ...  # COPY the batch into the hour's transaction
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.utils
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import NoReturn, TypeVar

import httpx

from finops.billing import allocation
from finops.collection import durations
from finops.opencost import config, errors, fastparse, parse

log = logging.getLogger(__name__)
B = TypeVar("B")

ALLOCATION_PATH = "/allocation/compute"
HOUR = dt.timedelta(hours=1)
# Busy or rate-limited answers are asked again, a bounded number of times.
RETRIED_STATUSES = frozenset({429, 503})
MAX_ATTEMPTS = 3
MAX_RETRY_AFTER = 10.0
# Only the start of an error body is read: it is a message, not data.
ERROR_BODY_BYTES = 64 * 1024


def window(hour: dt.datetime) -> str:
    """OpenCost's window parameter for exactly the hour starting at `hour`."""
    _check_hour(hour)
    start = hour.astimezone(dt.UTC)
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return f"{start.strftime(fmt)},{(start + HOUR).strftime(fmt)}"


def _check_hour(hour: dt.datetime) -> None:
    if hour.tzinfo is None:
        raise ValueError(f"hour must be timezone-aware: {hour!r}")
    if hour.astimezone(dt.UTC) != hour.astimezone(dt.UTC).replace(
        minute=0, second=0, microsecond=0
    ):
        raise ValueError(f"hour must be truncated to the hour: {hour.isoformat()}")


def namespace_filter(namespaces: Sequence[str]) -> str:
    """A v2.1 filter selecting any of `namespaces`: `namespace:"a","b"` (unencoded)."""
    if not namespaces:
        raise ValueError("a namespace filter needs at least one namespace")
    for ns in namespaces:
        if '"' in ns or "\\" in ns:
            raise ValueError(f"namespace {ns!r} cannot be quoted in an OpenCost filter")
    return "namespace:" + ",".join(f'"{ns}"' for ns in namespaces)


def split(namespaces: Sequence[str], per_shard: int) -> list[tuple[str, ...]]:
    """Consecutive groups of at most `per_shard` namespaces, in the given order."""
    if per_shard < 1:
        raise ValueError("per_shard must be at least 1")
    return [tuple(namespaces[i : i + per_shard]) for i in range(0, len(namespaces), per_shard)]


def shardable(aggregate: str) -> bool:
    """Sharding by namespace is exact only if rows never merge across namespaces."""
    return "namespace" in [d.strip().lower() for d in aggregate.split(",")]


class OpenCostClient:
    """An async HTTP client for OpenCost's allocation API; one per run."""

    def __init__(
        self,
        cfg: config.OpenCostConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = cfg
        self._timeout = cfg.fetch_timeout.total_seconds()
        self.decode_seconds = 0.0  # time spent in the fast decoder, for the run's phase split
        self._http = httpx.AsyncClient(
            base_url=cfg.base_url,
            timeout=httpx.Timeout(self._timeout),
            transport=transport,
            headers={"Accept": "application/json"},
        )

    async def __aenter__(self) -> OpenCostClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def params(
        self, hour: dt.datetime, *, aggregate: str, namespaces: Sequence[str] | None = None
    ) -> dict[str, str]:
        """Query parameters for one hour (httpx percent-encodes them, `+` as `%2B`)."""
        out = {
            "window": window(hour),
            "aggregate": aggregate,
            "step": self.config.step,
            "resolution": self.config.resolution,
            "accumulate": "true",
            "includeIdle": "false",
        }
        if namespaces is not None:
            out["filter"] = namespace_filter(namespaces)
        return out

    async def query(
        self, hour: dt.datetime, *, aggregate: str, namespaces: Sequence[str] | None = None
    ) -> list[parse.Step]:
        """GET one hour of `/allocation/compute` and return its step maps (numbers as Decimal).

        Every failure is an `OpenCostError` subclass whose message names the query (see
        `body`).
        """
        params = self.params(hour, aggregate=aggregate, namespaces=namespaces)
        described = _describe(params)
        return parse.decode(await self.body(params, described), query=described)

    async def body(self, params: dict[str, str], described: str) -> bytes:
        """The bytes of a 200 answer to `params`.

        A 429 or 503 is asked again after its `Retry-After` (at most `MAX_ATTEMPTS` times in
        all, each wait at most `MAX_RETRY_AFTER`). Any other answer raises `OpenCostHTTPError`.
        """
        for attempt in range(1, MAX_ATTEMPTS + 1):
            status, headers, body = await self._get(params, described)
            if status == 200:
                return body
            wait = retry_after(headers.get("retry-after"))
            if status not in RETRIED_STATUSES or attempt == MAX_ATTEMPTS or wait is None:
                break
            if wait > MAX_RETRY_AFTER:
                _raise_http(
                    status,
                    body,
                    described,
                    f"Retry-After {parse.short(headers['retry-after'])} is longer "
                    f"than the {MAX_RETRY_AFTER:g}s the client waits",
                )
            log.warning("OpenCost answered %d to %s; retrying in %gs", status, described, wait)
            await asyncio.sleep(wait)
        note = ""
        if status in RETRIED_STATUSES:
            note = f"gave up after {attempt} attempt(s)"
            if "retry-after" in headers:
                note += f"; Retry-After {parse.short(headers['retry-after'])}"
        _raise_http(status, body, described, note)

    async def _get(
        self, params: dict[str, str], described: str
    ) -> tuple[int, httpx.Headers, bytes]:
        """One GET, its body read to at most `max_response_bytes`, within the fetch timeout."""
        try:
            async with (
                asyncio.timeout(self._timeout),
                self._http.stream("GET", ALLOCATION_PATH, params=params) as response,
            ):
                limit = self.config.max_response_bytes
                if response.status_code != 200:
                    limit = min(limit, ERROR_BODY_BYTES)
                body = await _read_capped(response, limit, described)
                return response.status_code, response.headers, body
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise errors.OpenCostTimeoutError(
                f"OpenCost did not answer {described} within "
                f"{durations.format_seconds(self.config.fetch_timeout)} (openCostFetchTimeout)"
            ) from exc
        except httpx.TransportError as exc:
            raise errors.OpenCostUnavailableError(
                f"OpenCost at {self.config.base_url} is unreachable for {described}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    async def rows(
        self,
        hour: dt.datetime,
        *,
        cluster: str,
        namespaces: Sequence[str] | None = None,
    ) -> list[allocation.AllocationRow]:
        """The hour's rows at the configured aggregate, optionally for some namespaces only."""
        aggregate = self.config.aggregate
        steps = await self.query(hour, aggregate=aggregate, namespaces=namespaces)
        described = _describe(self.params(hour, aggregate=aggregate, namespaces=namespaces))
        rows = parse.rows(steps, cluster=cluster, aggregation=aggregate, hour=hour, query=described)
        parse.check_hour(rows, hour, query=described)
        return rows

    async def row_lines(
        self,
        hour: dt.datetime,
        *,
        cluster: str,
        namespaces: Sequence[str] | None = None,
    ) -> fastparse.Lines:
        """As `rows`, as `COPY` lines through the fast decoder (the same rows, the same errors)."""
        aggregate = self.config.aggregate
        params = self.params(hour, aggregate=aggregate, namespaces=namespaces)
        described = _describe(params)
        body = await self.body(params, described)
        started = time.perf_counter()
        found = fastparse.lines(
            body, cluster=cluster, aggregation=aggregate, hour=hour, query=described
        )
        self.decode_seconds += time.perf_counter() - started
        return found

    async def namespaces(self, hour: dt.datetime) -> list[str]:
        """The hour's namespaces as OpenCost sees them (deleted and pseudo ones included)."""
        return parse.namespaces(await self.query(hour, aggregate="namespace"))


async def _read_capped(response: httpx.Response, limit: int, described: str) -> bytes:
    """The body, refused as soon as it passes `limit` bytes (error bodies: truncated)."""
    declared = response.headers.get("content-length", "")
    too_big = errors.OpenCostResponseError(
        f"the body is larger than {limit} bytes; refusing it (shard the CostJob with "
        "spec.sharding to get smaller answers)",
        query=described,
    )
    if response.status_code == 200 and declared.isdigit() and int(declared) > limit:
        raise too_big
    # Chunks joined once at the end: growing a bytearray and copying it out cost a third
    # more CPU (measured on 1.7 MB bodies: about 1 µs per allocation).
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            if response.status_code != 200:
                return b"".join(chunks)[:limit]
            raise too_big
    return b"".join(chunks)


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a `Retry-After` header (delay-seconds or HTTP-date), or None."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


def _raise_http(status: int, body: bytes, described: str, note: str) -> NoReturn:
    message = parse.error_message(body)
    raise errors.OpenCostHTTPError(
        status, f"{message} ({note})" if note else message, query=described
    )


def _describe(params: dict[str, str]) -> str:
    parts = [f"window={params['window']}", f"aggregate={params['aggregate']}"]
    if "filter" in params:
        parts.append(f"filter={params['filter']}")
    return f"GET {ALLOCATION_PATH}?" + "&".join(parts)


async def iter_hour_lines(
    oc: OpenCostClient,
    hour: dt.datetime,
    *,
    cluster: str,
) -> AsyncGenerator[fastparse.Lines, None]:
    """The hour's rows as `COPY` lines (`fastparse.lines`) in batches: one batch unsharded,
    one per shard when sharded. At most `concurrency` shard responses are in flight or waiting
    for the consumer at any time, which bounds memory. The first failing shard cancels the rest
    and its error is raised. Each request is bounded by `openCostFetchTimeout`; the caller
    bounds the whole hour (`hour_deadline`)."""

    def fetch(shard: Sequence[str] | None) -> Awaitable[fastparse.Lines]:
        return oc.row_lines(hour, cluster=cluster, namespaces=shard)

    async with aclosing(_batches(oc, hour, fetch, _line_names)) as batches:
        async for batch in batches:
            yield batch


def _line_names(batch: fastparse.Lines) -> Iterable[str]:
    return batch.names


async def _batches(
    oc: OpenCostClient,
    hour: dt.datetime,
    fetch: Callable[[Sequence[str] | None], Awaitable[B]],
    names: Callable[[B], Iterable[str]],
) -> AsyncGenerator[B, None]:
    """One batch unsharded, else one per shard (see `iter_hour_lines`)."""
    _check_hour(hour)
    sharding = _usable_sharding(oc.config)
    if sharding is None:
        yield await fetch(None)
        return
    async with aclosing(_iter_shards(oc, hour, sharding, fetch, names)) as batches:
        async for batch in batches:
            yield batch


def _usable_sharding(cfg: config.OpenCostConfig) -> config.ShardPlan | None:
    """The configured sharding, or None when the aggregate could merge rows across shards."""
    if cfg.sharding is not None and not shardable(cfg.aggregate):
        log.warning(
            "aggregate=%s has no namespace dimension, so rows could merge across shards; "
            "running the hour unsharded",
            cfg.aggregate,
        )
        return None
    return cfg.sharding


async def _iter_shards(
    oc: OpenCostClient,
    hour: dt.datetime,
    sharding: config.ShardPlan,
    fetch: Callable[[Sequence[str] | None], Awaitable[B]],
    names: Callable[[B], Iterable[str]],
) -> AsyncGenerator[B, None]:
    """One batch per namespace shard, at most `concurrency` in flight (see `iter_hour_lines`)."""
    shards = split(await oc.namespaces(hour), sharding.namespaces_per_shard)
    log.info(
        "hour %s: %d shard(s) of at most %d namespaces, %d at a time",
        hour.isoformat(),
        len(shards),
        sharding.namespaces_per_shard,
        sharding.concurrency,
    )
    seen: set[str] = set()
    pending: set[asyncio.Future[B]] = set()
    remaining = iter(shards)

    def start_next() -> None:
        shard = next(remaining, None)
        if shard is not None:
            pending.add(asyncio.ensure_future(fetch(shard)))

    for _ in range(sharding.concurrency):
        start_next()
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending.difference_update(done)
            for task in done:  # surface any failure before handing out more rows
                if task.exception() is not None:
                    task.result()
            for task in done:
                batch = task.result()
                _claim(names(batch), seen)
                yield batch
                start_next()
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def _claim(names: Iterable[str], seen: set[str]) -> None:
    """Record the batch's allocation names; one already seen came from two shards."""
    for name in names:
        if name in seen:
            raise errors.OpenCostResponseError(
                f"allocation {parse.short(name)} came back from two namespace shards"
            )
        seen.add(name)


def hour_deadline(
    oc: OpenCostClient, hour: dt.datetime
) -> contextlib.AbstractAsyncContextManager[None]:
    """Bound everything inside to `openCostFetchTimeout`, raising `OpenCostTimeoutError`."""
    return _deadline(oc.config.fetch_timeout, hour)


@contextlib.asynccontextmanager
async def _deadline(limit: dt.timedelta, hour: dt.datetime) -> AsyncIterator[None]:
    try:
        async with asyncio.timeout(limit.total_seconds()):
            yield
    except TimeoutError as exc:
        raise errors.OpenCostTimeoutError(
            f"fetching hour {hour.isoformat()} from OpenCost took longer than "
            f"{durations.format_seconds(limit)} (openCostFetchTimeout)"
        ) from exc

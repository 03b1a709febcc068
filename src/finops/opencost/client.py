"""Fetch one hour of allocations from OpenCost, whole or sharded by namespace.

The unit of work is one hour `[hour, hour+1h)`, asked for as an RFC 3339 `Z` pair (the only
absolute form OpenCost accepts) with `accumulate=true`, so the answer is one set for the hour
whatever `OPENCOST_STEP` says. With `spec.sharding`, a cheap `aggregate=namespace` query lists
the hour's namespaces (pseudo-namespaces included), and namespace-filtered queries of at most
`namespacesPerShard` namespaces run with at most `concurrency` in flight; the first failure
cancels the others and is raised, so the caller rolls the hour back.

Typical use by the allocation run::

    cfg = config.OpenCostConfig.from_sources(costjob["spec"], os.environ)
    async with client.OpenCostClient(cfg) as oc:
        async for batch in client.iter_hour(oc, hour, cluster=cluster_id):
            ...  # write the batch into the hour's transaction
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from types import TracebackType

import httpx

from finops.billing import allocation
from finops.collection import durations
from finops.opencost import config, errors, parse

log = logging.getLogger(__name__)

ALLOCATION_PATH = "/allocation/compute"
HOUR = dt.timedelta(hours=1)


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

        Every failure is an `OpenCostError` subclass whose message names the query.
        """
        params = self.params(hour, aggregate=aggregate, namespaces=namespaces)
        described = _describe(params)
        try:
            async with asyncio.timeout(self._timeout):
                response = await self._http.get(ALLOCATION_PATH, params=params)
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
        if response.status_code != 200:
            raise errors.OpenCostHTTPError(
                response.status_code, parse.error_message(response.content), query=described
            )
        return parse.decode(response.content, query=described)

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
        return parse.rows(
            steps,
            cluster=cluster,
            aggregation=aggregate,
            hour=hour,
            query=_describe(self.params(hour, aggregate=aggregate, namespaces=namespaces)),
        )

    async def namespaces(self, hour: dt.datetime) -> list[str]:
        """The hour's namespaces as OpenCost sees them (deleted and pseudo ones included)."""
        return parse.namespaces(await self.query(hour, aggregate="namespace"))


def _describe(params: dict[str, str]) -> str:
    parts = [f"window={params['window']}", f"aggregate={params['aggregate']}"]
    if "filter" in params:
        parts.append(f"filter={params['filter']}")
    return f"GET {ALLOCATION_PATH}?" + "&".join(parts)


async def iter_hour(
    oc: OpenCostClient,
    hour: dt.datetime,
    *,
    cluster: str,
) -> AsyncGenerator[list[allocation.AllocationRow], None]:
    """Yield the hour's rows in batches: one batch unsharded, one per shard when sharded.

    At most `concurrency` shard responses are in flight or waiting for the consumer at any
    time, which bounds memory. The first failing shard cancels the rest and its error is
    raised. Each request is bounded by `openCostFetchTimeout`; the caller bounds the whole
    hour (`asyncio.timeout(cfg.fetch_timeout)`), or uses `fetch_hour`, which does.
    """
    _check_hour(hour)
    sharding = _usable_sharding(oc.config)
    if sharding is None:
        yield await oc.rows(hour, cluster=cluster)
        return
    async with aclosing(_iter_shards(oc, hour, cluster, sharding)) as batches:
        async for batch in batches:
            yield batch


def _usable_sharding(cfg: config.OpenCostConfig) -> config.Sharding | None:
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
    oc: OpenCostClient, hour: dt.datetime, cluster: str, sharding: config.Sharding
) -> AsyncGenerator[list[allocation.AllocationRow], None]:
    """One batch per namespace shard, at most `concurrency` in flight (see `iter_hour`)."""
    shards = split(await oc.namespaces(hour), sharding.namespaces_per_shard)
    log.info(
        "hour %s: %d shard(s) of at most %d namespaces, %d at a time",
        hour.isoformat(),
        len(shards),
        sharding.namespaces_per_shard,
        sharding.concurrency,
    )
    seen: set[str] = set()
    pending: set[asyncio.Task[list[allocation.AllocationRow]]] = set()
    remaining = iter(shards)

    def start_next() -> None:
        shard = next(remaining, None)
        if shard is not None:
            pending.add(asyncio.create_task(oc.rows(hour, cluster=cluster, namespaces=shard)))

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
                _claim(batch, seen)
                yield batch
                start_next()
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def _claim(batch: list[allocation.AllocationRow], seen: set[str]) -> None:
    """Record the batch's allocation names; one already seen came from two shards."""
    for r in batch:
        if r.name in seen:
            raise errors.OpenCostResponseError(
                f"allocation {r.name!r} came back from two namespace shards"
            )
        seen.add(r.name)


async def fetch_hour(
    oc: OpenCostClient,
    hour: dt.datetime,
    *,
    cluster: str,
) -> list[allocation.AllocationRow]:
    """All of the hour's rows in name order, the whole hour bounded by `openCostFetchTimeout`."""
    out: list[allocation.AllocationRow] = []
    try:
        async with asyncio.timeout(oc.config.fetch_timeout.total_seconds()):
            async with aclosing(iter_hour(oc, hour, cluster=cluster)) as batches:
                async for batch in batches:
                    out.extend(batch)
    except TimeoutError as exc:
        raise errors.OpenCostTimeoutError(
            f"fetching hour {hour.isoformat()} from OpenCost took longer than "
            f"{durations.format_seconds(oc.config.fetch_timeout)} (openCostFetchTimeout)"
        ) from exc
    out.sort(key=lambda r: r.name)
    return out

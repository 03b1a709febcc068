"""The hour's allocations as row objects: the reference the product's line stream is held to.

The allocation run streams `COPY` lines (`finops.opencost.client.iter_hour_lines`); these read
the same batches, with the same sharding, retries and deadline, as parsed rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncGenerator, Awaitable, Iterable, Sequence
from contextlib import aclosing

from finops.billing import allocation
from finops.opencost import client


async def iter_hour(
    oc: client.OpenCostClient,
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

    def fetch(shard: Sequence[str] | None) -> Awaitable[list[allocation.AllocationRow]]:
        return oc.rows(hour, cluster=cluster, namespaces=shard)

    async with aclosing(client._batches(oc, hour, fetch, _row_names)) as batches:
        async for batch in batches:
            yield batch


def _row_names(batch: list[allocation.AllocationRow]) -> Iterable[str]:
    return (row.name for row in batch)


async def fetch_hour(
    oc: client.OpenCostClient,
    hour: dt.datetime,
    *,
    cluster: str,
) -> list[allocation.AllocationRow]:
    """All of the hour's rows in name order, the whole hour bounded by `openCostFetchTimeout`."""
    out: list[allocation.AllocationRow] = []
    async with (
        client.hour_deadline(oc, hour),
        aclosing(iter_hour(oc, hour, cluster=cluster)) as batches,
    ):
        async for batch in batches:
            out.extend(batch)
    out.sort(key=lambda r: r.name)
    return out

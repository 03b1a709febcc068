"""Sharding by namespace returns exactly the rows one unfiltered query returns, keeps at most
`concurrency` queries in flight, and aborts the hour on the first failing shard."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
from tests.oracle import opencost_rows

from finops.billing import allocation
from finops.opencost import client, config, errors
from finops_devenv import opencost_replay as replay

HOUR = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)
Start = Callable[[replay.Source], replay.ReplayServer]


def fetch(
    url: str, sharding: config.ShardPlan | None, **settings: Any
) -> list[allocation.AllocationRow]:
    cfg = config.OpenCostConfig(base_url=url, sharding=sharding, **settings)

    async def go() -> list[allocation.AllocationRow]:
        async with client.OpenCostClient(cfg) as oc:
            return await opencost_rows.fetch_hour(oc, HOUR, cluster="default")

    return asyncio.run(go())


@pytest.fixture
def cluster(opencost_replay: Start) -> replay.ReplayServer:
    """13 namespaces x 4 pods x 2 containers, plus the `__unmounted__` pseudo-namespace."""
    return opencost_replay(replay.Generated(namespaces=13, pods_per_namespace=4, seed=7))


class TestSameRows:
    @pytest.mark.parametrize(
        ("per_shard", "concurrency"), [(1, 1), (1, 4), (2, 3), (5, 2), (13, 4), (25, 4), (100, 1)]
    )
    def test_sharded_rows_equal_unsharded_rows(
        self, cluster: replay.ReplayServer, per_shard: int, concurrency: int
    ) -> None:
        whole = fetch(cluster.url, None)
        assert len(whole) == 13 * 4 * 2 + 1
        assert any(r.namespace == "__unmounted__" for r in whole)
        cluster.clear()
        assert fetch(cluster.url, config.ShardPlan(per_shard, concurrency)) == whole
        shards = -(-14 // per_shard)  # 13 namespaces + __unmounted__
        assert len(cluster.requests) == 1 + shards
        assert cluster.requests[0].params["aggregate"] == "namespace"

    @pytest.mark.parametrize("aggregate", ["namespace", "namespace,pod", "namespace,controller"])
    def test_sharded_rows_equal_unsharded_rows_on_the_real_captures(
        self, opencost_captures: replay.ReplayServer, aggregate: str
    ) -> None:
        whole = fetch(opencost_captures.url, None, aggregate=aggregate)
        assert len(whole) >= 5
        assert fetch(opencost_captures.url, config.ShardPlan(2, 2), aggregate=aggregate) == whole

    def test_an_hour_without_namespaces_has_no_rows_and_no_shard_queries(
        self, opencost_replay: Start
    ) -> None:
        empty = opencost_replay(replay.Generated(namespaces=3, hours=frozenset()))
        assert fetch(empty.url, config.ShardPlan(2, 2)) == []
        assert [r.params["aggregate"] for r in empty.requests] == ["namespace"]

    def test_an_aggregate_without_namespace_runs_unsharded(
        self, cluster: replay.ReplayServer
    ) -> None:
        rows = fetch(cluster.url, config.ShardPlan(2, 2), aggregate="controllerKind")
        assert {r.name for r in rows} >= {"deployment", "__unallocated__"}
        assert len(cluster.requests) == 1
        assert "filter" not in cluster.requests[0].params


class TestQueries:
    def test_the_filter_names_each_shards_namespaces_and_is_percent_encoded(
        self, cluster: replay.ReplayServer
    ) -> None:
        fetch(cluster.url, config.ShardPlan(5, 1))
        raw = [r.raw_query for r in cluster.requests[1:]]
        first = 'namespace:"__unmounted__","ns-0000","ns-0001","ns-0002","ns-0003"'
        assert "filter=" + urllib.parse.quote(first, safe="") in raw[0]
        assert "filter=namespace%3A%22" in raw[0] and '"' not in raw[0]
        named = [replay.filter_namespaces(r.params["filter"]) for r in cluster.requests[1:]]
        assert [len(n) for n in named] == [5, 5, 4]
        assert set().union(*named) == {"__unmounted__", *(f"ns-{i:04d}" for i in range(13))}

    @pytest.mark.parametrize("concurrency", [1, 3])
    def test_no_more_than_concurrency_shards_are_in_flight(
        self, cluster: replay.ReplayServer, concurrency: int
    ) -> None:
        # Every shard answers slowly, so shards overlap whenever the client lets them.
        cluster.inject(replay.Fault("slow", delay=0.03, aggregate="namespace,pod,container"))
        fetch(cluster.url, config.ShardPlan(2, concurrency))
        assert cluster.max_in_flight == concurrency


class TestFailure:
    def test_the_first_failing_shard_aborts_the_hour_and_cancels_the_rest(
        self, cluster: replay.ReplayServer
    ) -> None:
        # One shard hangs, another fails: the failure must not wait for the hang.
        cluster.inject(replay.Fault("slow", delay=10, namespace="ns-0000"))
        cluster.inject(replay.Fault("http500", message="shard broke", namespace="ns-0002"))
        began = time.monotonic()
        with pytest.raises(errors.OpenCostHTTPError, match="shard broke") as exc:
            fetch(cluster.url, config.ShardPlan(2, 3))
        assert time.monotonic() - began < 5
        assert 'namespace:"ns-0001","ns-0002"' in exc.value.query
        # 7 shards; the failure came back before the later shards were ever started.
        assert len(cluster.requests) < 1 + 7

    def test_a_failing_discovery_query_fails_the_hour(self, cluster: replay.ReplayServer) -> None:
        cluster.inject(replay.Fault("bad_json", aggregate="namespace"))
        with pytest.raises(errors.OpenCostResponseError):
            fetch(cluster.url, config.ShardPlan(2, 2))
        assert len(cluster.requests) == 1

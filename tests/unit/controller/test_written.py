"""Read-your-writes: the overlay answers with our write only while the cache lags behind it."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.hierarchy import builders as b

from finops.controller import written


def at(obj: dict[str, Any], version: int, **status: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(version)
    out["status"] = {**(obj.get("status") or {}), **status}
    return out


SUB = b.subscription("acme", "vm")


def test_the_written_object_answers_while_the_cache_shows_the_version_it_replaced() -> None:
    fresh = written.Written()
    v1, v2 = at(SUB, 1), at(SUB, 2, ready="True")
    fresh.record(v1, v2)
    assert fresh.latest(v1) == v2
    fresh.seen(v1, v2)  # the watch delivers our write
    assert fresh.latest(v2) is v2
    assert len(fresh) == 0


def test_a_chain_of_our_writes_answers_for_every_version_it_replaced() -> None:
    fresh = written.Written()
    v1, v2, v3 = at(SUB, 1), at(SUB, 2), at(SUB, 3, ready="True")
    fresh.record(v1, v2)  # finalizer
    fresh.record(v2, v3)  # status
    assert fresh.latest(v1) == v3
    fresh.seen(v1, v2)  # the finalizer's version arrives: still behind our status write
    assert fresh.latest(v2) == v3


def test_someone_elses_version_in_the_cache_wins_and_drops_the_entry() -> None:
    fresh = written.Written()
    v1, v2, other = at(SUB, 1), at(SUB, 2, ready="True"), at(SUB, 7, ready="False")
    fresh.record(v1, v2)
    assert fresh.latest(other) is other
    fresh.seen(v2, other)
    assert len(fresh) == 0
    assert fresh.latest(None) is None  # gone stays gone


def test_a_deletion_forgets_the_entry() -> None:
    fresh = written.Written()
    v1, v2 = at(SUB, 1), at(SUB, 2)
    fresh.record(v1, v2)
    fresh.seen(v1, None)
    assert len(fresh) == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=30))
def test_the_answer_is_never_older_than_the_cache(steps: list[tuple[bool, bool]]) -> None:
    """Against a model: versions increase; we write some, others write some, the watch
    delivers them in order. `latest` is the cache, or our newest write the cache has not
    reached yet; never anything older than the cache."""
    fresh = written.Written()
    server = at(SUB, 1)  # what the API server holds now
    cache = server  # what the watch has delivered
    delivered: list[dict[str, Any]] = []  # versions still on their way, in order
    version = 1
    mine: list[dict[str, Any]] = []
    for ours, deliver in steps:
        version += 1
        new = at(server, version, n=version)
        if ours:
            fresh.record(server, new)
            mine.append(new)
        delivered.append(new)
        server = new
        if deliver:
            for obj in delivered:
                fresh.seen(cache, obj)
                cache = obj
            delivered.clear()
        got = fresh.latest(cache)
        assert got is not None
        got_version = int(got["metadata"]["resourceVersion"])
        assert got_version >= int(cache["metadata"]["resourceVersion"])
        if got is not cache:
            assert got == mine[-1]
            assert got_version > int(cache["metadata"]["resourceVersion"])

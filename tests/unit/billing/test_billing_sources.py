"""Which allocation rows a Subscription's usageSources select."""

from __future__ import annotations

import dataclasses
import datetime as dt

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tests.oracle import usage as oracle_usage

from finops.billing import allocation, sources

HOUR = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)


def row(
    namespace: str, kind: str = "", controller: str = "", pod: str = ""
) -> allocation.AllocationRow:
    name = "/".join(
        part for part in (namespace, f"{kind}:{controller}" if kind else "", pod) if part
    )
    return allocation.AllocationRow(
        cluster="default-cluster",
        name=name,
        namespace=namespace,
        aggregation="namespace,controller,pod",
        hour=HOUR,
        start=HOUR,
        end=HOUR + dt.timedelta(hours=1),
        controller_kind=kind,
        controller_name=controller,
        pod=pod,
    )


API = row("acme-prod", "deployment", "acme-api", "acme-api-7f9c-abcde")
WORKER = row("acme-prod", "deployment", "acme-worker", "acme-worker-5d4c-fghij")
DB = row("acme-prod", "statefulset", "acme-db", "acme-db-0")
OTHER_API = row("acme-staging", "deployment", "acme-api", "acme-api-1a2b-klmno")
UNALLOCATED = row("acme-prod")
ROWS = [API, WORKER, DB, OTHER_API, UNALLOCATED]


def pick(*entries: dict[str, str]) -> list[allocation.AllocationRow]:
    spec = {"usageSources": list(entries)}
    return oracle_usage.select(sources.from_subscription_spec(spec), ROWS)


def test_a_namespace_alone_selects_everything_measured_there() -> None:
    assert pick({"namespace": "acme-prod"}) == [API, WORKER, DB, UNALLOCATED]


def test_fields_within_one_entry_combine() -> None:
    entry = {"resourceType": "Deployment", "name": "acme-api", "namespace": "acme-prod"}
    assert pick(entry) == [API]


def test_a_kind_and_name_without_namespace_match_across_namespaces() -> None:
    assert pick({"resourceType": "Deployment", "name": "acme-api"}) == [API, OTHER_API]


def test_a_kind_matches_opencosts_lower_case_controller_kind() -> None:
    assert pick({"resourceType": "StatefulSet", "namespace": "acme-prod"}) == [DB]


def test_entries_add_and_a_row_matched_twice_is_selected_once() -> None:
    selected = pick(
        {"resourceType": "Deployment", "name": "acme-api", "namespace": "acme-prod"},
        {"resourceType": "StatefulSet", "name": "acme-db"},
        {"namespace": "acme-prod", "name": "acme-api"},
    )
    assert selected == [API, DB]


def test_pod_switches_name_to_the_pod_name() -> None:
    assert pick({"resourceType": "Pod", "name": "acme-db-0"}) == [DB]
    assert pick({"resourceType": "Pod", "name": "acme-db"}) == []


def test_pod_adds_no_filter_of_its_own() -> None:
    assert pick({"resourceType": "Pod", "namespace": "acme-prod"}) == pick(
        {"namespace": "acme-prod"}
    )


def test_a_name_without_a_kind_is_a_controller_name() -> None:
    assert pick({"name": "acme-worker"}) == [WORKER]


def test_an_empty_entry_selects_nothing_rather_than_everything() -> None:
    assert pick({}) == []
    assert pick({"namespace": ""}) == []


def test_a_subscription_without_sources_selects_nothing() -> None:
    assert sources.from_subscription_spec({"offeringRef": {"name": "x", "namespace": "y"}}) == ()


ENTRIES = st.builds(
    sources.SourceFilter,
    resource_type=st.sampled_from(["", "Deployment", "StatefulSet", "Pod"]),
    name=st.sampled_from(["", "acme-api", "acme-db", "acme-db-0", "acme-worker"]),
    namespace=st.sampled_from(["", "acme-prod", "acme-staging"]),
)


@settings(deadline=None)
@given(st.lists(ENTRIES, max_size=4), st.lists(ENTRIES, max_size=4))
def test_selection_of_several_entries_is_the_union_of_each(
    first: list[sources.SourceFilter], second: list[sources.SourceFilter]
) -> None:
    both = oracle_usage.select(first + second, ROWS)
    expected = [
        r
        for r in ROWS
        if r in oracle_usage.select(first, ROWS) or r in oracle_usage.select(second, ROWS)
    ]
    assert both == expected


@settings(deadline=None)
@given(ENTRIES, st.sampled_from(["acme-prod", "acme-staging"]))
def test_adding_a_namespace_to_an_entry_never_widens_it(
    entry: sources.SourceFilter, namespace: str
) -> None:
    assume(entry.namespace == "" and not entry.is_empty())
    narrowed = dataclasses.replace(entry, namespace=namespace)
    wide = oracle_usage.select([entry], ROWS)
    assert all(r in wide for r in oracle_usage.select([narrowed], ROWS))

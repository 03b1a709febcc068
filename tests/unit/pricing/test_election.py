"""PriceBook election: annotated, then sticky incumbent, then newest; ties by namespace, name."""

from __future__ import annotations

import datetime as dt

from finops.pricing import election

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def book(
    name: str,
    minutes: int,
    namespace: str = "ns",
    annotated: bool = False,
    incumbent: bool = False,
) -> election.Candidate:
    return election.Candidate(
        namespace, name, T0 + dt.timedelta(minutes=minutes), annotated, incumbent
    )


def test_no_books_elects_nothing() -> None:
    assert election.elect([]) is None


def test_annotated_book_beats_newer_incumbent() -> None:
    chosen = election.elect([book("a", 0, annotated=True), book("b", 5, incumbent=True)])
    assert chosen is not None and chosen.name == "a"


def test_incumbent_keeps_the_slot_against_a_newer_book() -> None:
    chosen = election.elect([book("old", 0, incumbent=True), book("new", 9)])
    assert chosen is not None and chosen.name == "old"


def test_without_annotation_or_incumbent_the_newest_book_is_bootstrapped() -> None:
    chosen = election.elect([book("old", 0), book("new", 9), book("mid", 4)])
    assert chosen is not None and chosen.name == "new"


def test_two_annotated_books_the_newer_one_wins() -> None:
    chosen = election.elect([book("first", 0, annotated=True), book("second", 1, annotated=True)])
    assert chosen is not None and chosen.name == "second"


def test_equal_creation_times_break_on_namespace_then_name() -> None:
    books = [book("b", 0, "ns2"), book("z", 0, "ns1"), book("a", 0, "ns1")]
    chosen = election.elect(books)
    assert chosen is not None and chosen.key == ("ns1", "a")


def test_candidate_reads_annotation_status_and_timestamp_from_the_object() -> None:
    obj = {
        "metadata": {
            "name": "onprem-standard",
            "namespace": "finops-operator-system",
            "creationTimestamp": "2026-03-01T10:00:00Z",
            "annotations": {"finops.stakater.com/active": "true"},
        },
        "status": {"active": True},
    }
    c = election.Candidate.from_object(obj)
    assert c.annotated and c.incumbent
    assert c.created == dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC)


def test_annotation_must_be_exactly_the_string_true() -> None:
    obj = {"metadata": {"name": "x", "annotations": {"finops.stakater.com/active": "True"}}}
    assert not election.Candidate.from_object(obj).annotated


def pricebook(
    name: str, *, active: bool, mode: str = "currency", ready: str = "True", minute: int = 0
) -> dict[str, object]:
    return {
        "metadata": {
            "name": name,
            "namespace": "finops",
            "creationTimestamp": f"2026-01-01T00:{minute:02d}:00Z",
        },
        "spec": {"currency": "USD", "valuationMode": mode, "rates": {"cpuHour": "0.031"}},
        "status": {"active": active, "ready": ready},
    }


def test_rate_source_is_the_book_the_controller_marked_active() -> None:
    src = election.rate_source([pricebook("a", active=False), pricebook("b", active=True)])
    assert src.book is not None and src.book["metadata"]["name"] == "b"  # type: ignore[index]


def test_rate_source_without_an_active_book_says_so() -> None:
    src = election.rate_source([pricebook("a", active=False)])
    assert src.book is None and "no PriceBook is active" in src.problem


def test_rate_source_refuses_a_percent_book() -> None:
    src = election.rate_source([pricebook("p", active=True, mode="percent")])
    assert src.book is None and "valuationMode 'percent'" in src.problem


def test_rate_source_refuses_an_unready_active_book() -> None:
    src = election.rate_source([pricebook("bad", active=True, ready="False")])
    assert src.book is None and "finops/bad is not ready" in src.problem


def test_two_marked_books_resolve_by_the_election_rules() -> None:
    src = election.rate_source(
        [pricebook("old", active=True, minute=1), pricebook("new", active=True, minute=2)]
    )
    assert src.book is not None and src.book["metadata"]["name"] == "new"  # type: ignore[index]

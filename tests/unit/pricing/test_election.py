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

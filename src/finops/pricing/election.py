"""Elect the one active PriceBook of the cluster.

Three tiers, first non-empty tier wins: books annotated `finops.stakater.com/active: "true"`,
then the sticky incumbent (`status.active: true`), then every book. Inside a tier the newest
`creationTimestamp` wins, ties broken by namespace then name ascending. Readiness is ignored
on purpose: an unready winner stays active and shows its error instead of failing over.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable

from finops.api import bodies

ACTIVE_ANNOTATION = "finops.stakater.com/active"


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """What the election needs to know about one PriceBook."""

    namespace: str
    name: str
    created: dt.datetime
    annotated: bool
    incumbent: bool

    @property
    def key(self) -> tuple[str, str]:
        """(namespace, name): how callers refer to a book."""
        return (self.namespace, self.name)

    @classmethod
    def from_object(cls, obj: bodies.PriceBookBody) -> Candidate:
        """Build from a raw PriceBook object as the API server returns it."""
        meta = obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        status = obj.get("status") or {}
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            created=parse_timestamp(str(meta.get("creationTimestamp", ""))),
            annotated=annotations.get(ACTIVE_ANNOTATION) == "true",
            incumbent=status.get("active") is True,
        )


def parse_timestamp(value: str) -> dt.datetime:
    """RFC3339 from the API server as aware UTC; missing means the distant past."""
    if not value:
        return dt.datetime.min.replace(tzinfo=dt.UTC)
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.UTC)


def _newest_first(c: Candidate) -> tuple[float, str, str]:
    return (-c.created.timestamp(), c.namespace, c.name)


def elect(books: Iterable[Candidate]) -> Candidate | None:
    """The winning book, or None when there are no books at all."""
    pool = list(books)
    for tier in (
        [b for b in pool if b.annotated],
        [b for b in pool if b.incumbent],
        pool,
    ):
        if tier:
            return min(tier, key=_newest_first)
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class RateSource:
    """The book a collection run prices with, or why there is none."""

    book: bodies.PriceBookBody | None
    problem: str = ""


def rate_source(books: Iterable[bodies.PriceBookBody]) -> RateSource:
    """The cluster's active, `currency` PriceBook (DESIGN §2.3), as marked by the controller.

    Only books whose `status.active` is true count (if a transition left several marked, the
    election rules pick among them). A `percent` book or one the controller found unready is
    refused with a message saying so, rather than pricing usage from some other book.
    """
    marked = [b for b in books if (b.get("status") or {}).get("active") is True]
    if not marked:
        return RateSource(None, "no PriceBook is active in the cluster (status.active=true)")
    by_key = {Candidate.from_object(b).key: b for b in marked}
    winner = elect(Candidate.from_object(b) for b in marked)
    assert winner is not None
    book = by_key[winner.key]
    where = f"PriceBook {winner.namespace}/{winner.name}"
    spec = book.get("spec")
    mode = None if spec is None else spec.get("valuationMode")
    if mode != "currency":
        return RateSource(None, f"active {where} has valuationMode {mode!r}, not 'currency'")
    if str((book.get("status") or {}).get("ready", "")) == "False":
        return RateSource(None, f"active {where} is not ready (see its Ready condition)")
    return RateSource(book)

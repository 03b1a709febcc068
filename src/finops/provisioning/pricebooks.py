"""PriceBook decisions: readiness per book, one cluster-wide election, OpenCost's document.

Pure functions of the PriceBooks observed and an explicit `now`: the reconciler
(`finops.controller.pricebook`) reads every book from its watch store, calls `plan`, and writes
what it returns (status patches where something changed, Events on activation and demotion,
the pricing document when the winner is ready).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable

from finops.api import bodies, conditions
from finops.api.reasons import ConditionType, EventType, PriceBookReason
from finops.billing import money
from finops.pricing import election, opencost_document


def readiness(book: bodies.PriceBookBody) -> conditions.DecidedCondition:
    """Ready=True unless a `currency` book has a rate that does not parse to micros."""
    spec = book.get("spec")
    if spec is None or spec.get("valuationMode") != "currency":
        return conditions.DecidedCondition(
            ConditionType.READY,
            "True",
            PriceBookReason.VALIDATION_SUCCEEDED,
            "Not a currency book: no rates to parse",
        )
    try:
        money.parse_rates(spec.get("rates"))
    except money.RateParseError as exc:
        return conditions.DecidedCondition(
            ConditionType.READY, "False", PriceBookReason.PRICEBOOK_PARSE_FAILED, str(exc)
        )
    return conditions.DecidedCondition(
        ConditionType.READY, "True", PriceBookReason.VALIDATION_SUCCEEDED, "Every rate parsed"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class BookPlan:
    """What one book's status should become and which Events its transition deserves."""

    namespace: str
    name: str
    status: bodies.PriceBookStatusBody
    changed: bool
    events: tuple[tuple[str, str, str], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ElectionPlan:
    """The decision of one pass over every PriceBook."""

    winner: tuple[str, str] | None
    books: tuple[BookPlan, ...]
    document: dict[str, str] | None
    """The rendered pricing document, or None to leave the stored one alone."""


def _key(book: bodies.PriceBookBody) -> tuple[str, str]:
    meta = book.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def _rates(book: bodies.PriceBookBody) -> bodies.PriceRatesBody | None:
    spec = book.get("spec")
    return None if spec is None else spec.get("rates")


def plan_book(
    book: bodies.PriceBookBody,
    *,
    winner: tuple[str, str] | None,
    now: dt.datetime,
) -> BookPlan:
    """Desired status of one book given the cluster's winner."""
    meta = book.get("metadata") or {}
    namespace, name = _key(book)
    generation = meta.get("generation")
    current: bodies.PriceBookStatusBody = book.get("status") or {}
    status = bodies.PriceBookStatusBody(**current)
    ready = readiness(book)
    conds = conditions.set_condition(
        current.get("conditions"), ready, generation=generation, now=now
    )
    is_active = winner == (namespace, name)
    was_active = current.get("active") is True
    found: list[tuple[str, str, str]] = []
    if is_active != was_active:
        if is_active:
            message = (
                "Holds the active slot; its rates were rendered into OpenCost's pricing document"
                if ready.status == "True"
                else "Holds the active slot, but its rates do not parse; "
                "OpenCost keeps the last good document"
            )
            change = conditions.DecidedCondition(
                ConditionType.ACTIVE, "True", PriceBookReason.ACTIVATED, message
            )
            found.append((EventType.NORMAL, PriceBookReason.ACTIVATED, message))
        else:
            holder = f"{winner[0]}/{winner[1]}" if winner else "no book"
            message = f"Demoted: PriceBook {holder} holds the active slot"
            change = conditions.DecidedCondition(
                ConditionType.ACTIVE, "False", PriceBookReason.DEMOTED, message
            )
            found.append((EventType.NORMAL, PriceBookReason.DEMOTED, message))
        conds = conditions.set_condition(conds, change, generation=generation, now=now)
    status["conditions"] = conds
    status["ready"] = ready.status
    status["active"] = is_active
    if generation is not None:
        status["observedGeneration"] = generation
    if is_active and ready.status == "True":
        status["activePricing"] = opencost_document.render(name, _rates(book))
    elif not is_active:
        status.pop("activePricing", None)
    return BookPlan(namespace, name, status, status != current, tuple(found))


def plan(books: Iterable[bodies.PriceBookBody], now: dt.datetime) -> ElectionPlan:
    """Elect, then plan every book and the document (None when the winner is not ready)."""
    pool = list(books)
    won = election.elect(election.Candidate.from_object(b) for b in pool)
    winner = won.key if won is not None else None
    plans = tuple(plan_book(b, winner=winner, now=now) for b in pool)
    document = None
    for book in pool:
        if _key(book) == winner and readiness(book).status == "True":
            document = opencost_document.render(winner[1], _rates(book))
    return ElectionPlan(winner, plans, document)

"""An Offering's `status.resolvedPricing`: the active book's rates with each meter's margin.

Resolution needs the cluster's active PriceBook only when the Offering declares
`resourcePricing`; a fee-only (or empty) Offering resolves with no book at all. The book is the
one the PriceBook controller marked active (`status.active`), elected like the collection run's
rate source, and it must be a ready `currency` book: publishing margins over a missing rate
would show the margin as the price, and pricing from a book the collection run refuses would
show a price nobody is charged. Both cases are refused with a reason instead.

Each declared meter gets one entry (the first entry of a name wins; the status list is keyed on
`name`), its unit price being the billing core's `Margin.unit_price_micros` of the book's rate.
A meter whose rate the book leaves unset, and the `subscription` meter, which has no rate field,
resolve against 0. The fee block is copied through verbatim.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import enum
from collections.abc import Iterable, Sequence
from typing import cast

from finops.api import bodies, conditions, models
from finops.billing import money, usage
from finops.pricing import election


class Outcome(enum.StrEnum):
    """Why resolution produced pricing or not (the Offering's condition reasons)."""

    RESOLVED = "PricingResolved"
    NO_ACTIVE_PRICEBOOK = "NoActivePricebook"
    PRICEBOOK_PARSE_FAILED = "PricebookParseFailed"


@dataclasses.dataclass(frozen=True, slots=True)
class Resolution:
    """The `resolvedPricing` body, or None with the outcome and a message saying why."""

    outcome: Outcome
    pricing: bodies.ResolvedPricingBody | None
    message: str = ""


def _object_name(obj: bodies.Object) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def declared_meters(spec: bodies.OfferingSpecBody) -> list[tuple[models.MeterName, usage.Margin]]:
    """`spec.pricing.resourcePricing` as (meter, margin), first entry of each name kept.

    Raises ValueError for a name outside the API's enum (admission refuses those).
    """
    pricing = spec.get("pricing") or {}
    entries: Sequence[bodies.MeterBody] = pricing.get("resourcePricing") or ()
    seen: dict[models.MeterName, usage.Margin] = {}
    for entry in entries:
        meter = models.MeterName(str(entry.get("name")))
        if meter not in seen:
            seen[meter] = usage.Margin.from_dict(entry.get("margins"))
    return list(seen.items())


def active_book(books: Iterable[bodies.PriceBookBody]) -> bodies.PriceBookBody | None:
    """The PriceBook marked active (the election decides if a transition left several)."""
    marked = [b for b in books if (b.get("status") or {}).get("active") is True]
    winner = election.elect(election.Candidate.from_object(b) for b in marked)
    if winner is None:
        return None
    return next(b for b in marked if election.Candidate.from_object(b).key == winner.key)


def _rate(meter: models.MeterName, rates: bodies.PriceRatesBody) -> money.Micros:
    field = usage.RATE_FIELD.get(meter)
    if field is None:
        return money.Micros(0)
    return money.parse_rate(field, rates.get(field, ""))


def resolve(
    offering: bodies.OfferingBody, books: Iterable[bodies.PriceBookBody], now: dt.datetime
) -> Resolution:
    """Resolve the Offering's pricing now, against the cluster's PriceBooks."""
    spec = offering.get("spec") or cast(bodies.OfferingSpecBody, {})
    name = _object_name(offering)
    meters = declared_meters(spec)
    resolved_meters: list[bodies.ResolvedMeterBody] = []
    if meters:
        book = active_book(books)
        book_spec = None if book is None else book.get("spec")
        if book is None or book_spec is None or book_spec.get("valuationMode") != "currency":
            return Resolution(
                Outcome.NO_ACTIVE_PRICEBOOK,
                None,
                f"offering {name}: no active pricebook to resolve metered pricing",
            )
        book_name = _object_name(book)
        rates: bodies.PriceRatesBody = book_spec.get("rates") or bodies.PriceRatesBody()
        for meter, margin in meters:
            try:
                rate = _rate(meter, rates)
            except money.RateParseError as exc:
                return Resolution(
                    Outcome.PRICEBOOK_PARSE_FAILED,
                    None,
                    f"offering {name}: meter {meter.value}: PriceBook {book_name} rate "
                    f'"{exc.field}" ("{exc.value}"): {exc.reason}',
                )
            resolved_meters.append(
                {"name": meter.value, "unitPriceMicros": margin.unit_price_micros(rate)}
            )
        if str((book.get("status") or {}).get("ready", "")) == "False":
            return Resolution(
                Outcome.PRICEBOOK_PARSE_FAILED,
                None,
                f"offering {name}: active PriceBook {book_name} is not ready "
                "(a rate does not parse; see its Ready condition)",
            )
    pricing: bodies.ResolvedPricingBody = {
        "resolvedAt": conditions.rfc3339(now),
        "meters": resolved_meters,
    }
    fee = (spec.get("pricing") or {}).get("subscriptionFee")
    if fee is not None:
        pricing["subscriptionFee"] = cast(bodies.SubscriptionFeeBody, copy.deepcopy(dict(fee)))
    return Resolution(Outcome.RESOLVED, pricing, f"offering {name}: pricing resolved")

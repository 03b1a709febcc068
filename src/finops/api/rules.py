"""Every CEL validation rule of the API, in one table.

The CRD generator attaches each rule to the schema node at `path` as an
`x-kubernetes-validations` entry; the offline validator evaluates the same
expressions with cel-python. Messages are the public API's rejection messages,
word for word, so a manifest is refused with the same text either way.

Rules that belong to the admission webhooks (cycles in `requiredOfferings`,
self-references, the Offering deletion guard) are not CEL and are not here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from finops.api import models


@dataclass(frozen=True)
class Rule:
    """One CEL rule.

    `path` names the schema node the rule sits on: property names joined by dots,
    `[*]` for "each item of this list", and the empty string for the object root.
    `transition` marks rules that read `oldSelf` (the API server runs those on
    updates only, where an old value exists at the same path).
    """

    kind: str
    path: str
    rule: str
    message: str
    transition: bool = False


# Durations a CostJob interval may take: those that a five-field cron schedule can
# express exactly — minutes that divide an hour, hours that divide a day, and a day.
INTERVAL_MINUTES = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)
INTERVAL_HOURS = (1, 2, 3, 4, 6, 8, 12, 24)
INTERVAL_SECONDS = tuple(m * 60 for m in INTERVAL_MINUTES) + tuple(h * 3600 for h in INTERVAL_HOURS)
# Whole h/m/s units in that order, each at most five digits (so the sum cannot overflow).
INTERVAL_SPELLING = r"^([0-9]{1,5}h)?([0-9]{1,5}m)?([0-9]{1,5}s)?$"
INTERVAL_MESSAGE = (
    "interval must be a duration that maps to a cron schedule: "
    + ", ".join(f"{m}m" for m in INTERVAL_MINUTES)
    + ", "
    + ", ".join(f"{h}h" for h in INTERVAL_HOURS[:-1])
    + f" or {INTERVAL_HOURS[-1]}h, written in whole h, m and s units (60m is the same as 1h)"
)

_PROVIDER_OPTIONS = ("awsoptions", "gcpoptions", "azureoptions", "onpremoptions")

# A Budget amount is spelled like a PriceBook rate, but may not be empty.
AMOUNT_SPELLING = "^[0-9]+([.][0-9]+)?$"

RULES: tuple[Rule, ...] = (
    # FinOpsProvider: three rules on the type itself.
    Rule(
        kind="FinOpsProvider",
        path="",
        rule="self.metadata.name == 'default'",
        message="FinOpsProvider must be named 'default' (singleton).",
    ),
    Rule(
        kind="FinOpsProvider",
        path="",
        rule="has(self.spec) && ("
        + " || ".join(f"has(self.spec.{o})" for o in _PROVIDER_OPTIONS)
        + ")",
        message="At least one provider option (awsoptions, gcpoptions, azureoptions, "
        "onpremoptions) must be set",
    ),
    Rule(
        kind="FinOpsProvider",
        path="",
        rule="has(self.spec) && ("
        + " + ".join(f"(has(self.spec.{o}) ? 1 : 0)" for o in _PROVIDER_OPTIONS)
        + ") == 1",
        message="Exactly one provider option (awsoptions, gcpoptions, azureoptions, "
        "onpremoptions) must be set",
    ),
    # Offering: the spec is a contract, frozen at creation.
    Rule(
        kind="Offering",
        path="spec",
        rule="self == oldSelf",
        message="offering spec is immutable",
        transition=True,
    ),
    Rule(
        kind="Offering",
        path="spec.pricing.resourcePricing[*].margins",
        rule="!(has(self.absoluteMicros) && has(self.factorMilli))",
        message="absoluteMicros and factorMilli are mutually exclusive — set only one",
    ),
    Rule(
        kind="Offering",
        path="spec.pricing.resourcePricing[*].margins",
        rule="!has(self.absoluteMicros) || self.absoluteMicros >= 0",
        message="absoluteMicros must be >= 0",
    ),
    Rule(
        kind="Offering",
        path="spec.pricing.resourcePricing[*].margins",
        rule="!has(self.factorMilli) || self.factorMilli >= 0",
        message="factorMilli must be >= 0",
    ),
    Rule(
        kind="Offering",
        path="spec.pricing.subscriptionFee",
        # Guarded with has() so a missing field reports only "Required value".
        rule="!has(self.period) || !has(self.tickAlignment) || "
        "(self.tickAlignment == 'ActivatedAt' ? self.period.matches('^[0-9]+[hms]$') "
        ": self.period.matches('^[0-9]+$'))",
        message="period must be a Go duration (e.g. '1h') for ActivatedAt alignment, "
        "or a plain integer for boundary alignments",
    ),
    # Subscription: billing identity is fixed.
    Rule(
        kind="Subscription",
        path="spec",
        rule="self.offeringRef == oldSelf.offeringRef",
        message="offeringRef is immutable; create a new Subscription instead",
        transition=True,
    ),
    Rule(
        kind="Subscription",
        path="spec",
        rule="has(self.parent) == has(oldSelf.parent) && "
        "(!has(self.parent) || self.parent == oldSelf.parent)",
        message="parent is immutable; create a new Subscription instead",
        transition=True,
    ),
    Rule(
        kind="Subscription",
        path="spec.usageSources[*]",
        rule="has(self.resourceType) || has(self.name) || has(self.namespace)",
        message="at least one of resourceType, name, or namespace must be set",
    ),
    # CostJob (ours, DESIGN §2.2): refuse an interval no cron schedule can honour.
    Rule(
        kind="CostJob",
        path="spec.interval",
        rule=f"self.matches('{INTERVAL_SPELLING}') && self != '' && "
        f"duration(self).getSeconds() in [{', '.join(str(s) for s in INTERVAL_SECONDS)}]",
        message=INTERVAL_MESSAGE,
    ),
    # Budget (our extension): an amount written like a rate, a real currency code.
    Rule(
        kind="Budget",
        path="spec.amount",
        rule=f"self.matches('{AMOUNT_SPELLING}')",
        message="amount must be a decimal string such as '2000' or '1500.50': digits with an "
        "optional decimal point, no sign, exponent or thousands separators",
    ),
    Rule(
        kind="Budget",
        path="spec.amount",
        rule=f"!self.matches('{AMOUNT_SPELLING}') || self.matches('^[0-9]+([.][0-9]{{1,6}}0*)?$')",
        message="amount may have at most six decimal places (budgets are kept in micro-units)",
    ),
    Rule(
        kind="Budget",
        path="spec.amount",
        rule=f"!self.matches('{AMOUNT_SPELLING}') || self.matches('[1-9]')",
        message="amount must be greater than zero",
    ),
    Rule(
        kind="Budget",
        path="spec.amount",
        rule=f"!self.matches('{AMOUNT_SPELLING}') || self.matches('^0*[0-9]{{1,12}}([.]|$)')",
        message="amount must be less than 1000000000000 (it is kept in 64-bit micro-units)",
    ),
    Rule(
        kind="Budget",
        path="spec.currency",
        rule="self.matches('^[A-Z]{3}$')",
        message="currency must be a three-letter ISO 4217 code in capitals, such as USD or EUR",
    ),
    Rule(
        kind="Budget",
        path="spec.thresholds[*].percent",
        rule="self >= 1 && self <= 1000",
        message="percent must be between 1 and 1000",
    ),
    Rule(
        kind="Budget",
        path="spec.thresholds",
        rule="self.all(t, self.exists_one(u, u.percent == t.percent && u.basis == t.basis))",
        message="thresholds must not list the same percent and basis twice",
    ),
    Rule(
        kind="Budget",
        path="spec.subscriptionSelector.matchExpressions[*]",
        rule="self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) "
        ": (!has(self.values) || size(self.values) == 0)",
        message="values must list at least one value for the In and NotIn operators and be "
        "empty for Exists and DoesNotExist",
    ),
)


def for_kind(kind: str) -> tuple[Rule, ...]:
    """The rules of one kind, in table order."""
    return tuple(r for r in RULES if r.kind == kind)


_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}


def interval_seconds(interval: str) -> int | None:
    """Seconds in an interval written the accepted way, or None when it is spelled otherwise."""
    if not interval or re.fullmatch(INTERVAL_SPELLING, interval) is None:
        return None
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in re.findall(r"([0-9]+)([hms])", interval))


def interval_schedule(interval: str) -> str | None:
    """The cron schedule an accepted interval maps to, or None for a refused one.

    Minutes that divide an hour run every N minutes, hours that divide a day run on
    the hour every N hours, and a day runs at midnight UTC.
    """
    seconds = interval_seconds(interval)
    if seconds is None or seconds not in INTERVAL_SECONDS:
        return None
    if seconds < 3600:
        minutes = seconds // 60
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    hours = seconds // 3600
    if hours == 24:
        return "0 0 * * *"
    return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"


# Make sure the table only names kinds the models define.
assert {r.kind for r in RULES} <= set(models.BY_KIND)

"""What a charge run decides about each Budget, as pure functions of observed state and the
scheduled hour: the period, which Subscriptions count, spent and forecast, the state, the
thresholds crossed, the status and the text of each Event.

Rules kept here (and why):
- Periods are UTC calendar periods holding the scheduled hour `H`: the month, the quarter
  (January, April, July, October) or the week from Monday 00:00.
- A Subscription counts toward a period once it matched the Budget's selector during that
  period (the members are recorded with each evaluation): spend cannot disappear from a
  period by deleting or relabelling a Subscription.
- Spent is the ledger's charges of the members for the period's hours up to and including
  `H`, in the Budget's currency; the forecast adds exact future fees and estimated usage
  (`finops.billing.forecast`). Charges in another currency are never converted: the state
  becomes `Unknown` and no threshold is judged.
- A threshold is crossed when the value reaches `percent` % of the amount; it is recorded
  once per period with the hour of the run that first saw it, and never un-crossed.
- A run for an hour before the one a Budget was last evaluated at (a retried Job for an old
  hour) changes nothing, unless the Budget's spec changed since.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping, Sequence

from finops.api import bodies, conditions, models, reasons
from finops.billing import forecast, money, ticks


class BudgetError(ValueError):
    """A Budget whose spec cannot be evaluated; the message names the field."""


def period_bounds(period: models.BudgetPeriod, t: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The UTC calendar period `[start, end)` of this kind that holds `t`."""
    if period is models.BudgetPeriod.WEEKLY:
        day = ticks.floor_day(t)
        start = day - ticks.DAY * day.weekday()
        return start, start + ticks.DAY * 7
    index = ticks.month_index(t)
    months = 3 if period is models.BudgetPeriod.QUARTERLY else 1
    first = index - index % months
    return ticks.month_start(first), ticks.month_start(first + months)


# ---------------------------------------------------------------- the spec


def selects(selector: bodies.LabelSelectorBody | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics; no selector (or an empty one) selects everything."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@dataclasses.dataclass(frozen=True)
class Threshold:
    percent: int
    basis: models.ThresholdBasis


@dataclasses.dataclass(frozen=True)
class BudgetTerms:
    """A Budget as a charge run reads it."""

    uid: str
    namespace: str
    name: str
    generation: int
    amount_micros: int
    currency: str
    period: models.BudgetPeriod
    selector: bodies.LabelSelectorBody | None
    thresholds: tuple[Threshold, ...]
    body: bodies.BudgetBody

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: bodies.BudgetBody) -> BudgetTerms:
        """Read a Budget body; a spec the API server would have refused raises BudgetError."""
        meta = obj.get("metadata") or {}
        spec: bodies.BudgetSpecBody = obj.get("spec") or {"amount": "", "currency": ""}
        where = f"budget {meta.get('namespace')}/{meta.get('name')}"
        try:
            amount = money.parse_rate("amount", spec.get("amount"))
        except money.RateParseError as exc:
            raise BudgetError(f"{where}: spec.amount {exc.value!r}: {exc.reason}") from None
        try:
            period = models.BudgetPeriod(spec.get("period") or models.BudgetPeriod.MONTHLY)
            thresholds = tuple(
                Threshold(
                    int(t["percent"]),
                    models.ThresholdBasis(t.get("basis") or models.ThresholdBasis.ACTUAL),
                )
                for t in spec.get("thresholds") or []
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise BudgetError(f"{where}: spec: {exc}") from None
        if amount <= 0:
            raise BudgetError(f"{where}: spec.amount must be greater than zero")
        return cls(
            uid=str(meta.get("uid") or ""),
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            generation=int(meta.get("generation") or 0),
            amount_micros=amount,
            currency=str(spec.get("currency") or ""),
            period=period,
            selector=spec.get("subscriptionSelector"),
            thresholds=thresholds,
            body=obj,
        )


# ---------------------------------------------------------------- who counts


@dataclasses.dataclass(frozen=True)
class BudgetMember:
    """A Subscription of the run: its uid, namespace and labels."""

    uid: str
    namespace: str
    labels: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class Recorded:
    """The last evaluation the ledger holds for a Budget."""

    period_start: dt.datetime
    evaluated_hour: dt.datetime
    generation: int
    members: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class BudgetPlan:
    """What to read for one Budget: its period and members (`stale`: leave it alone)."""

    terms: BudgetTerms
    scheduled: dt.datetime
    start: dt.datetime
    end: dt.datetime
    members: tuple[str, ...]
    stale: bool = False


def plan(
    terms: BudgetTerms,
    scheduled: dt.datetime,
    candidates: Iterable[BudgetMember],
    recorded: Recorded | None,
) -> BudgetPlan:
    """The period holding `H` and the Subscriptions counted in it."""
    anchor = ticks.floor_hour(scheduled)
    start, end = period_bounds(terms.period, anchor)
    stale = (
        recorded is not None
        and recorded.evaluated_hour > anchor
        and recorded.generation == terms.generation
    )
    members = {
        c.uid
        for c in candidates
        if c.namespace == terms.namespace and selects(terms.selector, c.labels)
    }
    if recorded is not None and recorded.period_start == start:
        members.update(recorded.members)
    return BudgetPlan(terms, anchor, start, end, tuple(sorted(members)), stale)


# ---------------------------------------------------------------- the judgement


@dataclasses.dataclass(frozen=True)
class Crossing:
    """A threshold a period reached: when (the run's hour) and at what value."""

    budget_uid: str
    period_start: dt.datetime
    percent: int
    basis: models.ThresholdBasis
    crossed_at: dt.datetime
    value_micros: int
    amount_micros: int
    event_posted: bool = False

    @property
    def key(self) -> tuple[str, dt.datetime, str, int]:
        return (self.budget_uid, self.period_start, self.basis.value, self.percent)


@dataclasses.dataclass(frozen=True)
class LedgerTotals:
    """What the ledger says about one plan: spent per currency and the members' outlooks."""

    spent: Mapping[str, int]
    outlooks: Sequence[forecast.Outlook]
    fee_currency: str
    crossings: Sequence[Crossing] = ()


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One Budget judged at the scheduled hour."""

    plan: BudgetPlan
    forecast: forecast.Forecast
    foreign: Mapping[str, int]
    """Micros of the period charged in other currencies (not counted)."""
    crossings: tuple[Crossing, ...]
    """Every threshold the period reached, earlier ones included, in the order crossed."""
    new: tuple[Crossing, ...]

    @property
    def terms(self) -> BudgetTerms:
        return self.plan.terms

    @property
    def state(self) -> models.BudgetState:
        amount = self.terms.amount_micros
        if self.foreign:
            return models.BudgetState.UNKNOWN
        if self.forecast.spent > amount:
            return models.BudgetState.EXCEEDED
        if self.forecast.total > amount:
            return models.BudgetState.FORECAST_EXCEEDED
        return models.BudgetState.ON_TRACK


def reached(value: int, percent: int, amount: int) -> bool:
    """`value` is at least `percent` % of `amount` (exact integers)."""
    return value * 100 >= percent * amount


def judge(plan: BudgetPlan, ledger: LedgerTotals) -> Evaluation:
    """Spent, forecast and thresholds of one planned Budget."""
    terms = plan.terms
    spent = ledger.spent.get(terms.currency, 0)
    foreign = {c: m for c, m in ledger.spent.items() if c != terms.currency and m}
    outlook = forecast.forecast(spent, ledger.outlooks, plan.scheduled, plan.end)
    if outlook.future_fees and ledger.fee_currency != terms.currency:
        foreign[ledger.fee_currency or "no currency"] = outlook.future_fees
    mine = [c for c in ledger.crossings if c.period_start == plan.start]
    seen = {(c.basis, c.percent) for c in mine}
    new: list[Crossing] = []
    if not foreign:
        values = {
            models.ThresholdBasis.ACTUAL: outlook.spent,
            models.ThresholdBasis.FORECAST: outlook.total,
        }
        for t in terms.thresholds:
            value = values[t.basis]
            if (t.basis, t.percent) in seen or not reached(value, t.percent, terms.amount_micros):
                continue
            new.append(
                Crossing(
                    terms.uid, plan.start, t.percent, t.basis, plan.scheduled, value,
                    terms.amount_micros,
                )
            )  # fmt: skip
    ordered = sorted([*mine, *new], key=lambda c: (c.crossed_at, c.basis.value, c.percent))
    return Evaluation(plan, outlook, foreign, tuple(ordered), tuple(new))


# ---------------------------------------------------------------- status and Events


def _money(micros: int, currency: str) -> str:
    return f"{money.format_money(micros, currency)} {currency}"


def _window(plan: BudgetPlan) -> str:
    return f"{ticks.rfc3339(plan.start)} to {ticks.rfc3339(plan.end)}"


def decided_conditions(ev: Evaluation) -> list[conditions.DecidedCondition]:
    """`Exceeded` and `ForecastExceeded` as this evaluation finds them."""
    terms, amount = ev.terms, _money(ev.terms.amount_micros, ev.terms.currency)
    if ev.foreign:
        shown = ", ".join(_money(m, c) for c, m in sorted(ev.foreign.items()))
        message = (
            f"charges of the period are priced in another currency ({shown}); a Budget in "
            f"{terms.currency} does not convert them, so they are not judged"
        )
        return [
            conditions.DecidedCondition(
                kind, "Unknown", reasons.BudgetReason.CURRENCY_MISMATCH, message
            )
            for kind in (
                reasons.BudgetCondition.EXCEEDED,
                reasons.BudgetCondition.FORECAST_EXCEEDED,
            )
        ]
    spent, total = ev.forecast.spent, ev.forecast.total
    window = _window(ev.plan)
    over = spent > terms.amount_micros
    ahead = total > terms.amount_micros
    return [
        conditions.DecidedCondition(
            reasons.BudgetCondition.EXCEEDED,
            "True" if over else "False",
            reasons.BudgetReason.SPENT_OVER_AMOUNT
            if over
            else reasons.BudgetReason.SPENT_WITHIN_AMOUNT,
            f"spent {_money(spent, terms.currency)} of {amount} in the period {window}",
        ),
        conditions.DecidedCondition(
            reasons.BudgetCondition.FORECAST_EXCEEDED,
            "True" if ahead else "False",
            reasons.BudgetReason.FORECAST_OVER_AMOUNT
            if ahead
            else reasons.BudgetReason.FORECAST_WITHIN_AMOUNT,
            f"forecast {_money(total, terms.currency)} for the period {window} against {amount}",
        ),
    ]


def status_fields(ev: Evaluation) -> bodies.BudgetStatusBody:
    """The status fields an evaluation writes (conditions are set on their own)."""
    terms, outlook = ev.terms, ev.forecast
    return {
        "observedGeneration": terms.generation,
        "periodStart": ticks.rfc3339(ev.plan.start),
        "periodEnd": ticks.rfc3339(ev.plan.end),
        "evaluatedHour": ticks.rfc3339(ev.plan.scheduled),
        "subscriptions": len(ev.plan.members),
        "amountMicros": terms.amount_micros,
        "spentMicros": outlook.spent,
        "forecastMicros": outlook.total,
        "spent": money.format_money(outlook.spent, terms.currency),
        "forecast": money.format_money(outlook.total, terms.currency),
        "state": ev.state.value,
        "forecastDetail": {
            "spentMicros": outlook.spent,
            "futureFeesMicros": outlook.future_fees,
            "futureUsageMicros": outlook.future_usage,
            "usageWindowHours": forecast.USAGE_WINDOW_HOURS,
        },
        "thresholds": [
            {
                "percent": c.percent,
                "basis": c.basis.value,
                "crossedAt": ticks.rfc3339(c.crossed_at),
                "valueMicros": c.value_micros,
            }
            for c in ev.crossings
        ],
    }


def event_name(budget_name: str, crossing: Crossing) -> str:
    """The Event's name, derived from the crossing alone: posting the same crossing twice is
    refused by the API server (409) instead of making a second Event."""
    identity = (
        f"{crossing.budget_uid}/{ticks.rfc3339(crossing.period_start)}/"
        f"{crossing.basis.value}/{crossing.percent}"
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return f"{budget_name[:200].rstrip('-.')}.{digest}"


def event_type(crossing: Crossing) -> str:
    """A Warning from 100 % on, Normal below."""
    return "Warning" if crossing.percent >= 100 else "Normal"


def event_reason(crossing: Crossing) -> reasons.BudgetReason:
    if crossing.basis is models.ThresholdBasis.FORECAST:
        return reasons.BudgetReason.FORECAST_THRESHOLD_CROSSED
    return reasons.BudgetReason.ACTUAL_THRESHOLD_CROSSED


def event_message(terms: BudgetTerms, crossing: Crossing, period_end: dt.datetime) -> str:
    """What the Event says, in the Budget's currency."""
    what = "spent" if crossing.basis is models.ThresholdBasis.ACTUAL else "forecast"
    amount = _money(crossing.amount_micros, terms.currency)
    value = _money(crossing.value_micros, terms.currency)
    window = f"{ticks.rfc3339(crossing.period_start)} to {ticks.rfc3339(period_end)}"
    return (
        f"{what} {value} reached {crossing.percent}% of the budget of {amount} for the "
        f"{terms.period.value.lower()} period {window} (charge run of "
        f"{ticks.rfc3339(crossing.crossed_at)})"
    )

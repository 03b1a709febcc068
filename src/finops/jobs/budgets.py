"""Budgets after a charge run: every Budget judged against the ledger the run just wrote.

Not a poller of its own: the charge run calls `evaluate` once its ledger pass succeeded, so a
Budget is judged exactly as often as charges change. The step is read → decide → write:
list the Budgets (none, or no Budget CRD: nothing to do); read the recorded evaluations and
crossings, the members' sums and recent usage; decide (`finops.collection.budgets`); record
new threshold crossings (one unit of work); post an Event for every crossing not yet posted,
under a name derived from the crossing, so the API server refuses a second post of it (409)
instead of making a second Event; then, in one unit of work, mark them posted and keep each
evaluation for the gateway; last, write each Budget's status. A run killed between two
steps leaves crossings whose Event is not marked posted: the next run posts them (or finds
them there) and marks them, so each threshold makes one Event per period.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import functools
import logging
from collections.abc import Mapping, Sequence

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from finops.api import bodies
from finops.billing import forecast, ticks
from finops.collection import budgets, charges
from finops.jobs import settings as job_settings
from finops.kube import budgets as kube_budgets
from finops.kube import client as kube_client
from finops.kube import events, resources, status
from finops.store import budgets as store_budgets
from finops.store import charge_inputs, pool, unit

log = logging.getLogger("finops.jobs.budgets")

Billed = tuple[charges.SubscriptionState, charges.Terms | None]
"""A Subscription of the charge run and its terms (None when they could not be read)."""


@dataclasses.dataclass
class BudgetReport:
    """What one evaluation step did, for logs and tests."""

    evaluated: int = 0
    crossed: int = 0
    events_posted: int = 0
    statuses_written: int = 0
    errors: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _Step:
    """The fixed inputs of one evaluation step."""

    client: AsyncClient
    conn: pool.Connection
    cluster: str
    scheduled: dt.datetime
    now: dt.datetime
    namespace: str


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.status.code} {exc.status.reason}: {exc.status.message}"
    return f"{type(exc).__name__}: {exc}"


def _key(terms: budgets.BudgetTerms) -> str:
    return f"budget {terms.key}"


async def evaluate(
    client: AsyncClient,
    *,
    dsn: str,
    cluster: str,
    scheduled: dt.datetime,
    now: dt.datetime,
    billed: Sequence[Billed],
    namespace: str = "*",
    connect_timeout: int = 10,
) -> BudgetReport:
    """Judge every Budget (of `namespace`, or all) after the charge run of `scheduled`."""
    report = BudgetReport()
    try:
        listed = await kube_budgets.list_budgets(client, namespace)
    except ApiError as exc:
        if kube_client.status_code(exc) == 404:
            log.info("no Budget resource in this cluster; skipping budgets")
            return report
        report.errors["budgets"] = f"cannot list Budgets: {_describe(exc)}"
        return report
    if not listed:
        return report
    parsed = _parse(listed, report)
    try:
        conn = await asyncio.to_thread(unit.connect, dsn, connect_timeout=connect_timeout)
    except Exception as exc:
        for terms in parsed:
            report.errors[_key(terms)] = f"ledger unavailable: {_describe(exc)}"
        return report
    try:
        step = _Step(client, conn, cluster, scheduled, now, namespace)
        await _judge_and_write(step, parsed, billed, report)
    finally:
        await asyncio.to_thread(conn.close)
    log.info(
        "budgets: %d evaluated, %d threshold(s) newly crossed, %d event(s) posted, "
        "%d status write(s), %d failure(s)",
        report.evaluated,
        report.crossed,
        report.events_posted,
        report.statuses_written,
        len(report.errors),
    )
    return report


def _parse(listed: Sequence[bodies.BudgetBody], report: BudgetReport) -> list[budgets.BudgetTerms]:
    """Each listed Budget's terms; one that cannot be read is a failure of its own."""
    parsed = []
    for obj in listed:
        try:
            parsed.append(budgets.BudgetTerms.from_object(obj))
        except budgets.BudgetError as exc:
            meta = obj.get("metadata") or {}
            report.errors[f"budget {meta.get('namespace')}/{meta.get('name')}"] = str(exc)
    return parsed


async def _judge_and_write(
    step: _Step,
    parsed: Sequence[budgets.BudgetTerms],
    billed: Sequence[Billed],
    report: BudgetReport,
) -> None:
    try:
        judged = await asyncio.to_thread(_decide, step, parsed, billed)
    except Exception as exc:
        for terms in parsed:
            report.errors[_key(terms)] = f"cannot evaluate: {_describe(exc)}"
        return
    report.evaluated = len(judged.evaluations)
    report.crossed = judged.added
    posted = await _post_events(step, judged, report)
    try:
        await asyncio.to_thread(_finish, step, judged, posted, [t.uid for t in parsed])
    except Exception as exc:
        for ev in judged.evaluations:
            report.errors[_key(ev.terms)] = f"cannot record the evaluation: {_describe(exc)}"
        return
    await _write_statuses(step, judged.evaluations, report)


@dataclasses.dataclass(frozen=True)
class _Judged:
    evaluations: list[budgets.Evaluation]
    pending: list[budgets.Crossing]
    """Crossings whose Event is not posted yet: new ones and those left by an earlier run."""
    added: int


def _decide(
    step: _Step, parsed: Sequence[budgets.BudgetTerms], billed: Sequence[Billed]
) -> _Judged:
    """Read what the plans need, judge every Budget, and record new crossings (committed)."""
    conn = step.conn
    recorded = store_budgets.recorded(
        conn, cluster=step.cluster, budget_uids=[t.uid for t in parsed]
    )
    candidates = [budgets.BudgetMember(s.uid, s.namespace, s.labels) for s, _ in billed]
    plans = [
        p
        for p in (budgets.plan(t, step.scheduled, candidates, recorded.get(t.uid)) for t in parsed)
        if not p.stale
    ]
    if not plans:
        return _Judged([], [], 0)
    found = store_budgets.crossings(
        conn,
        cluster=step.cluster,
        budget_uids=[p.terms.uid for p in plans],
        since=min(p.start for p in plans),
    )
    ledgers = _ledgers(step, plans, billed, found)
    evaluations = [budgets.judge(p, ledgers[p.terms.uid]) for p in plans]
    new = [c for ev in evaluations for c in ev.new]
    with unit.begin(conn) as work:
        added = store_budgets.record_crossings(conn, cluster=step.cluster, found=new)
        work.commit()
    pending = [c for c in found if not c.event_posted] + new
    return _Judged(evaluations, pending, added)


def _ledgers(
    step: _Step,
    plans: Sequence[budgets.BudgetPlan],
    billed: Sequence[Billed],
    found: Sequence[budgets.Crossing],
) -> dict[str, budgets.LedgerTotals]:
    """Spent per currency and the members' outlooks of each plan (one sums query per
    distinct period start, one for the usage window)."""
    conn, cluster = step.conn, step.cluster
    members = sorted({uid for p in plans for uid in p.members})
    # Every period holds the scheduled hour: spent covers its hours up to and including it.
    through = step.scheduled + ticks.HOUR
    spent_since = {
        start: store_budgets.sums(
            conn, cluster=cluster, subscription_uids=members, start=start, end=through
        )
        for start in sorted({p.start for p in plans})
    }
    lo, hi = forecast.usage_window(step.scheduled)
    recent = store_budgets.sums(
        conn, cluster=cluster, subscription_uids=members, start=lo, end=hi, usage_only=True
    )
    fee_currency = charge_inputs.latest_currency(conn, cluster=cluster)
    terms_of = {s.uid: t for s, t in billed if t is not None}
    crossings_of: dict[str, list[budgets.Crossing]] = collections.defaultdict(list)
    for c in found:
        crossings_of[c.budget_uid].append(c)
    out: dict[str, budgets.LedgerTotals] = {}
    for p in plans:
        per_uid = spent_since[p.start]
        spent: dict[str, int] = collections.Counter()
        for uid in p.members:
            spent.update(per_uid.get(uid, {}))
        outlooks = [
            forecast.Outlook(
                terms_of[uid].fee,
                terms_of[uid].interval,
                recent.get(uid, {}).get(p.terms.currency, 0),
            )
            for uid in p.members
            if uid in terms_of
        ]
        out[p.terms.uid] = budgets.LedgerTotals(
            dict(spent), outlooks, fee_currency, crossings_of[p.terms.uid]
        )
    return out


async def _post_events(
    step: _Step, judged: _Judged, report: BudgetReport
) -> list[budgets.Crossing]:
    """Post each pending crossing's Event; the ones now in the cluster are returned."""
    by_uid = {ev.terms.uid: ev.terms for ev in judged.evaluations}
    posted: list[budgets.Crossing] = []
    for crossing in judged.pending:
        terms = by_uid.get(crossing.budget_uid)
        if terms is None:
            continue
        _, end = budgets.period_bounds(terms.period, crossing.period_start)
        event = (
            budgets.event_type(crossing),
            budgets.event_reason(crossing).value,
            budgets.event_message(terms, crossing, end),
        )
        name = budgets.event_name(terms.name, crossing)
        try:
            created = await events.post_once(step.client, terms.body, name, event, step.now)
        except Exception as exc:
            report.errors[_key(terms)] = f"cannot post Event {name}: {_describe(exc)}"
            continue
        posted.append(crossing)
        report.events_posted += int(created)
        log.info(
            "budget %s: %s %d%% threshold crossed%s",
            terms.key,
            crossing.basis.value,
            crossing.percent,
            "" if created else " (its Event was already posted)",
        )
    return posted


def _finish(
    step: _Step,
    judged: _Judged,
    posted: Sequence[budgets.Crossing],
    listed: Sequence[str],
) -> None:
    """Mark the posted Events and keep the evaluations, in one unit of work."""
    conn = step.conn
    with unit.begin(conn) as work:
        store_budgets.mark_posted(conn, cluster=step.cluster, posted=posted)
        store_budgets.record_evaluations(conn, cluster=step.cluster, evaluations=judged.evaluations)
        store_budgets.forget_others(
            conn, cluster=step.cluster, namespace=step.namespace, keep=listed
        )
        work.commit()


async def _write_statuses(
    step: _Step, evaluations: Sequence[budgets.Evaluation], report: BudgetReport
) -> None:
    """Each Budget's status: the evaluation's fields and its two conditions."""
    for ev in evaluations:
        changes = [status.set_fields(budgets.status_fields(ev))]
        changes += [status.set_condition(c, step.now) for c in budgets.decided_conditions(ev)]
        write = functools.partial(
            status.apply,
            step.client,
            resources.Budget,
            ev.terms.name,
            changes,
            namespace=ev.terms.namespace,
            observed=ev.terms.body,
        )
        try:
            applied = await write()
        except Exception as exc:
            report.errors[_key(ev.terms)] = f"cannot write status: {_describe(exc)}"
            continue
        report.statuses_written += int(applied.written)


async def after_charges(
    client: AsyncClient,
    job: job_settings.JobSettings,
    scheduled: dt.datetime,
    now: dt.datetime,
    billed: Sequence[Billed],
    namespace: str = "*",
) -> BudgetReport:
    """`evaluate` with the charge run's environment: its ledger, cluster and the CostJob's
    `databaseInitTimeout`. Its failures fail the charge run too, so the Job is retried. A
    caller that charged through a ledger of its own (no DSN in the environment) judges none."""
    if not job.dsn:
        log.info("no ledger DSN in the environment; Budgets are not judged")
        return BudgetReport()
    timeouts = job.timeouts({})
    return await evaluate(
        client,
        dsn=job.dsn,
        cluster=job.cluster,
        scheduled=scheduled,
        now=now,
        billed=billed,
        namespace=namespace,
        connect_timeout=max(1, int(timeouts.database_init.total_seconds())),
    )


def billed_of(
    activated: Sequence[tuple[bodies.SubscriptionBody, charges.SubscriptionState]],
    terms: Mapping[str, charges.Terms],
) -> list[Billed]:
    """The charge run's activated Subscriptions with their terms, as `evaluate` takes them."""
    return [(state, terms.get(state.uid)) for _, state in activated]

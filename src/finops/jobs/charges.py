"""`--mode=collectionjob`: charge every activated Subscription hour by hour, refresh
`status.costs`, and release the finalizer of deleted Subscriptions whose billing is settled.

A run is a checklist: pin the scheduled hour; list Subscriptions and read each one's Offering
fresh; in one ledger pass (a fixed number of statements for all Subscriptions, never one per
Subscription-hour) compute the allocation boundary once, write the charge rows and read the
sums back; then write each Subscription's buckets and decide its finalizer. A failure for one
Subscription holds only that one; the run finishes the rest and then exits non-zero so the
Job is retried for the same pinned hour. If the ledger cannot be used at all, every
Subscription still gets fee-only buckets (`CostsResolved=True`, reason `FromCalculator`).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import dataclasses
import datetime as dt
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from finops.api import conditions
from finops.billing import buckets, usage
from finops.collection import charges, durations, plan
from finops.kube import costjobs
from finops.kube import subscriptions as kube_subs
from finops.opencost import config as opencost_config
from finops.store import allocations as store_allocations
from finops.store import charge_inputs, migrate, pool
from finops.store import charges as store_charges

log = logging.getLogger("finops.jobs.charges")

KUBE_CONCURRENCY = 16
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Billed:
    """An activated Subscription whose terms could be read: what the ledger pass charges."""

    sub: charges.SubscriptionState
    terms: charges.Terms
    offering: Mapping[str, Any]
    namespace_labels: Mapping[str, str]


@dataclasses.dataclass
class LedgerResult:
    """What one ledger pass did and read back."""

    boundary: dt.datetime | None
    settled: dict[str, list[buckets.Charge]]
    rows_written: int = 0
    rows_deleted: int = 0
    allocation_rows: int = 0


# ---------------------------------------------------------------- the ledger pass


def _versions(
    conn: psycopg.Connection[Any], cluster: str, billed: Sequence[Billed]
) -> tuple[dict[str, int], dict[str, int]]:
    """Mirror ids (offering, subscription) per Subscription uid; new versions are upserted."""
    offerings: dict[tuple[str, int], Mapping[str, Any]] = {}
    subs: dict[tuple[str, int], Billed] = {}
    for b in billed:
        meta = b.offering.get("metadata") or {}
        offerings[(str(meta.get("uid", "")), int(meta.get("generation") or 0))] = b.offering
        subs[(b.sub.uid, b.sub.generation)] = b
    with conn.transaction():
        known_o = charge_inputs.known_offering_versions(conn, cluster=cluster, versions=offerings)
        known_s = charge_inputs.known_subscription_versions(
            conn,
            cluster=cluster,
            versions=[(u, g, b.namespace_labels, b.sub.labels) for (u, g), b in subs.items()],
        )
        missing_o = [o for key, o in offerings.items() if key not in known_o]
        missing_s = [b for key, b in subs.items() if key not in known_s]
        if missing_o or missing_s:
            # New versions: one INSERT per table, then read every id back.
            charge_inputs.add_offering_versions(conn, cluster=cluster, versions=missing_o)
            charge_inputs.add_subscription_versions(
                conn,
                cluster=cluster,
                versions=[
                    (
                        {
                            "uid": b.sub.uid,
                            "namespace": b.sub.namespace,
                            "name": b.sub.name,
                            "generation": b.sub.generation,
                            "resourceVersion": b.sub.resource_version,
                        },
                        b.sub.spec,
                        b.namespace_labels,
                        b.sub.labels,
                    )
                    for b in missing_s
                ],
            )
            known_o = charge_inputs.known_offering_versions(
                conn, cluster=cluster, versions=offerings
            )
            known_s = charge_inputs.known_subscription_versions(
                conn,
                cluster=cluster,
                versions=[(u, g, b.namespace_labels, b.sub.labels) for (u, g), b in subs.items()],
            )
    offering_ids: dict[str, int] = {}
    subscription_ids: dict[str, int] = {}
    for b in billed:
        meta = b.offering.get("metadata") or {}
        offering_ids[b.sub.uid] = known_o[
            (str(meta.get("uid", "")), int(meta.get("generation") or 0))
        ]
        subscription_ids[b.sub.uid] = known_s[(b.sub.uid, b.sub.generation)]
    return offering_ids, subscription_ids


class _RowIndex:
    """Priced allocation rows by namespace, sorted by hour, for per-Subscription windows."""

    def __init__(self, rows: Iterable[usage.PricedRow]) -> None:
        self.by_namespace: dict[str, list[usage.PricedRow]] = collections.defaultdict(list)
        self.all: list[usage.PricedRow] = []
        for priced in rows:
            self.by_namespace[priced.row.namespace].append(priced)
            self.all.append(priced)
        for bucket in (*self.by_namespace.values(), self.all):
            bucket.sort(key=lambda p: p.row.hour)

    @staticmethod
    def _slice(
        rows: list[usage.PricedRow], window: tuple[dt.datetime, dt.datetime]
    ) -> list[usage.PricedRow]:
        lo = bisect.bisect_left(rows, window[0], key=lambda p: p.row.hour)
        hi = bisect.bisect_left(rows, window[1], key=lambda p: p.row.hour)
        return rows[lo:hi]

    def for_terms(
        self, terms: charges.Terms, window: tuple[dt.datetime, dt.datetime]
    ) -> list[usage.PricedRow]:
        """Rows a Subscription's sources could select in its window (each row once)."""
        if any(not s.namespace for s in terms.sources):
            return self._slice(self.all, window)
        out: list[usage.PricedRow] = []
        for namespace in sorted({s.namespace for s in terms.sources}):
            out.extend(self._slice(self.by_namespace.get(namespace, []), window))
        return out


def _priced(
    conn: psycopg.Connection[Any],
    cluster: str,
    billed: Sequence[Billed],
    windows: Mapping[str, tuple[dt.datetime, dt.datetime]],
) -> list[tuple[usage.PricedRow, str]]:
    """The allocation rows every usage-billing Subscription's window needs, with their rates
    and currency: one query for the rows, one for the PriceBooks they were collected under."""
    per_namespace: dict[str, tuple[dt.datetime, dt.datetime]] = {}
    anywhere: tuple[dt.datetime, dt.datetime] | None = None
    for b in billed:
        window = windows.get(b.sub.uid)
        if window is None or not b.terms.bills_usage:
            continue
        for source in b.terms.sources:
            if not source.namespace:
                anywhere = window if anywhere is None else _widen(anywhere, window)
            else:
                old = per_namespace.get(source.namespace)
                per_namespace[source.namespace] = window if old is None else _widen(old, window)
    if not per_namespace and anywhere is None:
        return []
    stored = charge_inputs.usage_rows(
        conn, cluster=cluster, namespace_windows=per_namespace, any_namespace_window=anywhere
    )
    books = store_allocations.pricebooks(conn, {s.pricebook_id for s in stored})
    rates = {i: usage.Rates.from_micros(book.rates) for i, book in books.items()}
    return [(usage.PricedRow(s.row, rates.get(s.pricebook_id)), s.currency) for s in stored]


def _widen(
    a: tuple[dt.datetime, dt.datetime], b: tuple[dt.datetime, dt.datetime]
) -> tuple[dt.datetime, dt.datetime]:
    return (min(a[0], b[0]), max(a[1], b[1]))


def charge(
    conn: psycopg.Connection[Any],
    *,
    cluster: str,
    scheduled: dt.datetime,
    billed: Sequence[Billed],
) -> LedgerResult:
    """Write every charge row of this run and read back the sums the buckets need.

    `conn` must be in autocommit mode: each `conn.transaction()` here is then a real
    transaction (on a non-autocommit connection they would only be savepoints).
    """
    scheduled = plan.truncate_hour(scheduled)
    uids = [b.sub.uid for b in billed]
    boundary = store_allocations.allocation_boundary(conn, cluster=cluster)
    marks = store_charges.watermarks(conn, cluster=cluster, subscription_uids=uids)
    offering_ids, subscription_ids = _versions(conn, cluster, billed)
    windows: dict[str, tuple[dt.datetime, dt.datetime]] = {}
    for b in billed:
        window = charges.charge_window(b.terms, marks.get(b.sub.uid), scheduled)
        if window is not None:
            windows[b.sub.uid] = window

    priced = _priced(conn, cluster, billed, windows)
    hour_currency: dict[dt.datetime, str] = {}
    for row, currency in priced:
        hour_currency.setdefault(row.row.hour, currency)
    index = _RowIndex(row for row, _ in priced)
    fee_currency = charge_inputs.latest_currency(conn, cluster=cluster)

    rows: list[store_charges.Charge] = []
    for b in billed:
        window = windows.get(b.sub.uid)
        if window is None:
            continue
        candidates = index.for_terms(b.terms, window) if b.terms.bills_usage else []
        for p in charges.plan_charges(b.terms, window, candidates, scheduled, boundary):
            is_fee = p.source == usage.Meter.SUBSCRIPTION
            rows.append(
                store_charges.Charge(
                    cluster=cluster,
                    subscription_uid=b.sub.uid,
                    hour=p.hour,
                    source=p.source,
                    quantity=p.quantity,
                    unit_price_micros=p.unit_price_micros,
                    amount_micros=p.amount_micros,
                    currency=fee_currency if is_fee else hour_currency.get(p.hour, fee_currency),
                    finalized=p.finalized,
                    offering_version_id=offering_ids[b.sub.uid],
                    subscription_version_id=subscription_ids[b.sub.uid],
                )
            )
    with conn.transaction():
        deleted = charge_inputs.delete_stale(
            conn,
            cluster=cluster,
            windows=windows,
            keep={(r.subscription_uid, r.hour, r.source) for r in rows},
        )
        written = store_charges.upsert(conn, rows)

    settled = read_settled(conn, cluster=cluster, scheduled=scheduled, uids=uids)
    return LedgerResult(boundary, settled, written, deleted, len(priced))


def read_settled(
    conn: psycopg.Connection[Any], *, cluster: str, scheduled: dt.datetime, uids: Sequence[str]
) -> dict[str, list[buckets.Charge]]:
    """What the ledger holds for each Subscription's three buckets, fee rows included: on the
    `FromDB` path every `current` is this sum, never a recomputation."""
    spans = charges.ledger_windows(scheduled)
    sums = [
        store_charges.sums(conn, cluster=cluster, subscription_uids=uids, start=s, end=e)
        if s < e
        else {}
        for s, e in spans
    ]
    return {uid: charges.settled_charges(spans, [w.get(uid, {}) for w in sums]) for uid in uids}


def _ledger_pass(
    env: Mapping[str, str], cluster: str, scheduled: dt.datetime, billed: Sequence[Billed]
) -> LedgerResult:
    dsn = pool.dsn_from_env(env)
    timeouts = opencost_config.Timeouts.from_sources({}, env)
    seconds = max(1, int(timeouts.database_init.total_seconds()))
    with pool.connect(dsn, autocommit=True, connect_timeout=seconds) as conn:
        migrate.apply(conn)
        return charge(conn, cluster=cluster, scheduled=scheduled, billed=billed)


# ---------------------------------------------------------------- the run


@dataclasses.dataclass
class RunReport:
    """What a run did, for logs and tests."""

    scheduled: dt.datetime
    charged: int = 0
    statuses_written: int = 0
    released: list[str] = dataclasses.field(default_factory=list)
    held: dict[str, charges.Release] = dataclasses.field(default_factory=dict)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    ledger: LedgerResult | None = None


async def _bounded_gather(
    calls: Sequence[Callable[[], Awaitable[T]]], limit: int
) -> list[T | BaseException]:
    semaphore = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T | BaseException:
        async with semaphore:
            try:
                return await call()
            except Exception as exc:  # a failure is a value: it holds one Subscription
                return exc

    return list(await asyncio.gather(*(one(c) for c in calls)))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.status.code} {exc.status.reason}: {exc.status.message}"
    return f"{type(exc).__name__}: {exc}"


def _status_change(
    costs: list[dict[str, Any]], reason: charges.CostsReason, now: dt.datetime
) -> Callable[[Mapping[str, Any]], Mapping[str, Any] | None]:
    """The status patch for fresh buckets and `CostsResolved`; None when nothing changes."""

    def change(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        status: Mapping[str, Any] = obj.get("status") or {}
        generation = (obj.get("metadata") or {}).get("generation")
        new = conditions.Condition(
            charges.COSTS_RESOLVED, "True", reason.value, charges.COSTS_MESSAGES[reason]
        )
        conds = conditions.set_condition(
            status.get("conditions"),
            new,
            generation=int(generation) if generation is not None else None,
            now=now,
        )
        if status.get("costs") == costs and status.get("conditions") == conds:
            return None
        return {"costs": costs, "conditions": conds}

    return change


async def collect(
    client: AsyncClient,
    env: Mapping[str, str],
    now: dt.datetime,
    ledger: Callable[[Sequence[Billed]], LedgerResult] | None = None,
    namespace: str = "*",
) -> RunReport:
    """One run against the API and the ledger; failures are recorded per Subscription.

    `namespace` narrows the Subscriptions listed (the job itself always runs cluster-wide;
    tests sharing one API server use it to see only their own objects).
    """
    cluster = pool.cluster_id(env)
    scheduled = plan.scheduled_hour(env.get("SCHEDULED_TIMESTAMP"), now)
    report = RunReport(scheduled)
    objects = await kube_subs.list_subscriptions(client, namespace)

    states: list[tuple[dict[str, Any], charges.SubscriptionState]] = []
    unbilled: list[tuple[dict[str, Any], charges.SubscriptionState]] = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        try:
            state = charges.SubscriptionState.from_object(obj)
        except charges.TermsError as exc:
            report.errors[f"{meta.get('namespace')}/{meta.get('name')}"] = str(exc)
            continue
        if state.activated_at is None:
            # Never activated: nothing to bill. Deleted, it still waits for this job (the only
            # one that removes our finalizer), which has no charges to settle for it.
            if state.deleting and charges.FINALIZER in state.finalizers:
                unbilled.append((obj, state))
            continue
        states.append((obj, state))
    log.info(
        "charging %d activated subscription(s) of %d up to %s",
        len(states),
        len(objects),
        plan.rfc3339(scheduled),
    )

    refs = sorted({(s.offering_namespace, s.offering_name) for _, s in states})
    fetched = await _bounded_gather(
        [functools.partial(kube_subs.get_offering, client, *ref) for ref in refs],
        KUBE_CONCURRENCY,
    )
    offerings = dict(zip(refs, fetched, strict=True))
    labels: dict[str, dict[str, str]] | BaseException
    try:
        labels = await kube_subs.namespace_labels(client)
    except Exception as exc:
        labels = exc

    billed: list[Billed] = []
    latest: dict[str, Mapping[str, Any]] = {}
    terms_of: dict[str, charges.Terms] = {}
    for obj, state in states:
        latest[state.uid] = obj
        offering = offerings[(state.offering_namespace, state.offering_name)]
        if isinstance(offering, BaseException):
            report.errors[state.key] = (
                f"cannot read Offering {state.offering_namespace}/{state.offering_name}: "
                f"{_describe(offering)}"
            )
            continue
        try:
            terms = charges.terms_for(state, offering.get("spec") or {})
        except charges.TermsError as exc:
            report.errors[state.key] = str(exc)
            continue
        terms_of[state.uid] = terms
        if isinstance(labels, BaseException):
            continue
        billed.append(Billed(state, terms, offering, labels.get(state.namespace, {})))

    result: LedgerResult | None = None
    try:
        if isinstance(labels, BaseException):
            raise RuntimeError(f"cannot list namespaces: {_describe(labels)}")
        run_ledger = ledger or (lambda b: _ledger_pass(env, cluster, scheduled, b))
        result = await asyncio.to_thread(run_ledger, billed)
        report.ledger = result
        report.charged = len(billed)
        log.info(
            "ledger: %d charge row(s) written, %d stale removed, %d allocation row(s) read, "
            "allocation boundary %s",
            result.rows_written,
            result.rows_deleted,
            result.allocation_rows,
            "none" if result.boundary is None else plan.rfc3339(result.boundary),
        )
    except Exception as exc:
        message = f"charge ledger unavailable: {_describe(exc)}"
        log.error("%s; writing fee-only costs from the calculator", message)
        for state in (s for _, s in states if s.uid in terms_of):
            report.errors.setdefault(state.key, message)

    # Status: every Subscription with readable terms gets its three buckets.
    writes: list[tuple[charges.SubscriptionState, Callable[[], Awaitable[Any]]]] = []
    for obj, state in states:
        if state.uid not in terms_of:
            continue
        settled = None if result is None else result.settled.get(state.uid, [])
        costs, reason = charges.costs(scheduled, terms_of[state.uid], settled)
        change = _status_change(costs, reason, now)
        writes.append((state, functools.partial(kube_subs.update_status, client, obj, change)))

    outcomes = await _bounded_gather([w for _, w in writes], KUBE_CONCURRENCY)
    for (state, _), outcome in zip(writes, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            report.errors.setdefault(state.key, f"cannot write status: {_describe(outcome)}")
        elif outcome is not None:
            latest[state.uid] = outcome
            report.statuses_written += 1

    # Finalizers: only this job releases a deleted Subscription.
    boundary = None if result is None else result.boundary
    for _, state in states:
        decision = charges.finalizer_decision(
            state,
            terms_of.get(state.uid),
            scheduled,
            boundary,
            failed=state.key in report.errors,
        )
        if decision is None:
            continue
        if decision is not charges.Release.RELEASE:
            log.info(decision.value, extra={"subscription": state.key})
            report.held[state.key] = decision
            continue
        terms = terms_of[state.uid]

        def still_allowed(fresh: Mapping[str, Any], terms: charges.Terms = terms) -> bool:
            again = charges.SubscriptionState.from_object(fresh)
            same = again.deactivated_at == terms.deactivated_at and again.deleting
            return same and (
                charges.finalizer_decision(again, terms, scheduled, boundary, failed=False)
                is charges.Release.RELEASE
            )

        try:
            removed = await kube_subs.remove_finalizer(
                client, latest[state.uid], charges.FINALIZER, still_allowed
            )
        except Exception as exc:
            report.errors[state.key] = f"cannot remove finalizer: {_describe(exc)}"
            log.error("cannot remove finalizer of %s: %s", state.key, report.errors[state.key])
            continue
        if removed:
            log.info(decision.value, extra={"subscription": state.key})
            report.released.append(state.key)
    for obj, state in unbilled:

        def never_billed(fresh: Mapping[str, Any]) -> bool:
            again = charges.SubscriptionState.from_object(fresh)
            return again.deleting and again.activated_at is None

        try:
            removed = await kube_subs.remove_finalizer(client, obj, charges.FINALIZER, never_billed)
        except Exception as exc:
            report.errors[state.key] = f"cannot remove finalizer: {_describe(exc)}"
            log.error("cannot remove finalizer of %s: %s", state.key, report.errors[state.key])
            continue
        if removed:
            log.info(
                "%s (never activated, nothing to bill)",
                charges.Release.RELEASE.value,
                extra={"subscription": state.key},
            )
            report.released.append(state.key)
    return report


async def run(
    env: Mapping[str, str],
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    kube: AsyncClient | None = None,
    namespace: str = "*",
) -> int:
    """One collection run; the exit status is 0 only when nothing failed for anything."""
    if not env.get(pool.DSN_ENV, "").strip():
        log.error("required environment variable not set: %s", pool.DSN_ENV)
        return 1
    client = kube or AsyncClient(field_manager="finops-operator")
    started_at, started = now(), time.monotonic()
    try:
        try:
            report = await collect(client, env, started_at, namespace=namespace)
        except ApiError as exc:
            log.error("cannot list Subscriptions: %s", _describe(exc))
            error = f"cannot list Subscriptions: {_describe(exc)}"
            await _record(client, env, started_at, started, error)
            return 1
        for key, error in sorted(report.errors.items()):
            log.error("subscription %s: %s", key, error, extra={"subscription": key})
        log.info(
            "run %s: %d subscription(s) charged, %d status write(s), %d finalizer(s) released, "
            "%d held, %d failure(s)",
            "failed" if report.errors else "succeeded",
            report.charged,
            report.statuses_written,
            len(report.released),
            len(report.held),
            len(report.errors),
        )
        summary = "; ".join(f"{k}: {e}" for k, e in sorted(report.errors.items()))
        recorded = await _record(client, env, started_at, started, _clip(summary))
        return 1 if report.errors or not recorded else 0
    finally:
        if kube is None:
            await client.close()


def _clip(text: str, limit: int = 1024) -> str:
    """Keep an execution record readable (and the object small) when many things failed."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def _record(
    client: AsyncClient, env: Mapping[str, str], at: dt.datetime, started: float, error: str
) -> bool:
    """Prepend this run's record to its CostJob's history (beyond the reference, which left a
    charge CostJob's status empty: DESIGN §2.8); a run without `COSTJOB_NAME`, e.g. started
    by hand, records nothing. Returns False when the record could not be written."""
    name, namespace = env.get("COSTJOB_NAME", ""), env.get("COSTJOB_NAMESPACE", "")
    if not name or not namespace:
        return True
    record = plan.ExecutionRecord(
        execution_time=at,
        succeeded=not error,
        duration=durations.format_seconds(dt.timedelta(seconds=time.monotonic() - started)),
        error=error,
    )
    try:
        await costjobs.update_costjob_status(
            client, namespace, name, lambda status: plan.status_after_run(status, record)
        )
    except ApiError as exc:
        log.error("cannot record the outcome on CostJob %s/%s: %s", namespace, name, _describe(exc))
        return False
    return True


def main() -> int:
    """Entry point of `finops-operator --mode=collectionjob` (the caller configures logging;
    finalizer decisions carry the Subscription as the `subscription` log field)."""
    return asyncio.run(run(dict(os.environ)))

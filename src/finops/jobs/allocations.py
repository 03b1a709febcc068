"""`--mode=cronjob`: pull one pinned hour (plus lookback) of OpenCost allocations into the ledger.

A run is a checklist (`collect`): read the CostJob, pin the hour, elect the rate source, open
the ledger, pick the hours, fetch every hour from OpenCost, write all hours in one unit of
work, finalize stragglers, then record the outcome on the CostJob. Any failure before the
commit writes no row at all; the run still records a `Failed` execution and exits non-zero so
Kubernetes retries the Job for the same pinned hour.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from finops.billing import allocation, money
from finops.collection import durations, plan
from finops.jobs import records
from finops.kube import costjobs
from finops.opencost import client as opencost_client
from finops.opencost import config as opencost_config
from finops.pricing import election
from finops.store import allocations as store_allocations
from finops.store import migrate, pool, unit

log = logging.getLogger("finops.jobs.allocations")

REQUIRED_ENV = (
    "COSTJOB_NAME",
    "COSTJOB_NAMESPACE",
    "POSTGRES_CONNECTION_STRING",
    "OPENCOST_CONNECTION_STRING",
)


class RunFailed(Exception):
    """A run that cannot complete; the message goes into the execution record as is."""


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What one run did, for logs and tests."""

    scheduled: dt.datetime
    hours: list[plan.HourWork]
    rows_written: int
    finalized_stragglers: int
    pricebook_id: int
    fetch_seconds: float = 0.0
    write_seconds: float = 0.0


def _missing_env(env: Mapping[str, str]) -> list[str]:
    return [name for name in REQUIRED_ENV if not env.get(name, "").strip()]


async def _bounded(what: str, limit: dt.timedelta, field: str, coro: Any) -> Any:
    """Await `coro` within a CostJob timeout; a timeout names the phase and the field."""
    try:
        async with asyncio.timeout(limit.total_seconds()):
            return await coro
    except TimeoutError as exc:
        raise RunFailed(
            f"{what} took longer than {durations.format_seconds(limit)} ({field})"
        ) from exc


@dataclasses.dataclass(frozen=True)
class _Settings:
    """What a run is configured with: the CostJob's spec over the environment."""

    cluster: str
    scheduled: dt.datetime
    lookback: int
    timeouts: opencost_config.Timeouts
    opencost: opencost_config.OpenCostConfig
    dsn: str

    @classmethod
    def of(cls, env: Mapping[str, str], now: dt.datetime, costjob: Mapping[str, Any]) -> _Settings:
        spec: Mapping[str, Any] = costjob.get("spec") or {}
        return cls(
            cluster=pool.cluster_id(env),
            scheduled=plan.scheduled_hour(env.get("SCHEDULED_TIMESTAMP"), now),
            lookback=plan.lookback_hours(env.get("HOURS_LOOKBACK")),
            timeouts=opencost_config.Timeouts.from_sources(spec, env),
            opencost=opencost_config.OpenCostConfig.from_sources(spec, env),
            dsn=env["POSTGRES_CONNECTION_STRING"],
        )


@dataclasses.dataclass(frozen=True)
class _Book:
    """The elected PriceBook as the ledger records it."""

    namespace: str
    name: str
    uid: str
    generation: int
    currency: str
    rates: Mapping[str, int]

    @classmethod
    def of(cls, book: Mapping[str, Any]) -> _Book:
        meta: Mapping[str, Any] = book.get("metadata") or {}
        spec: Mapping[str, Any] = book.get("spec") or {}
        try:
            rates = dict(money.parse_rates(spec.get("rates")))
        except money.RateParseError as exc:
            raise RunFailed(f"PriceBook {meta.get('namespace')}/{meta.get('name')}: {exc}") from exc
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation") or 0),
            currency=str(spec.get("currency", "")),
            rates=rates,
        )


Fetched = list[tuple[plan.HourWork, list[allocation.AllocationRow]]]


async def collect(
    kube: AsyncClient,
    env: Mapping[str, str],
    now: dt.datetime,
    costjob: Mapping[str, Any],
) -> RunResult:
    """Everything between reading the CostJob and recording the outcome; raises on failure."""
    settings = _Settings.of(env, now, costjob)
    book = await _elect_book(kube, settings)
    conn = await _open_ledger(settings)
    try:
        work = await asyncio.to_thread(_hours_to_collect, conn, settings, book)
        fetched, fetch_seconds = await _fetch(settings, work)
        write_started = time.monotonic()
        book_id, written = await asyncio.to_thread(_write, conn, settings, book, fetched)
        write_seconds = time.monotonic() - write_started
        log.info(
            "wrote %d hour(s) in one transaction: %d row(s) changed in %.1fs",
            len(fetched),
            written,
            write_seconds,
        )
        stragglers = await _bounded(
            "finalizing earlier allocation rows",
            settings.timeouts.database_insert,
            "databaseInsertTimeout",
            asyncio.to_thread(_finalize, conn, settings),
        )
    finally:
        await asyncio.to_thread(conn.close)
    return RunResult(
        settings.scheduled, work, written, stragglers, book_id, fetch_seconds, write_seconds
    )


async def _elect_book(kube: AsyncClient, settings: _Settings) -> _Book:
    """The rate source: the cluster's active PriceBook, or a clear failure."""
    books = await _bounded(
        "listing PriceBooks",
        settings.timeouts.kubernetes_operation,
        "kubernetesOperationTimeout",
        costjobs.list_pricebooks(kube),
    )
    source = election.rate_source(books)
    if source.book is None:
        raise RunFailed(f"cannot price allocations: {source.problem}")
    return _Book.of(source.book)


async def _open_ledger(settings: _Settings) -> unit.Connection:
    """An autocommit session (each unit of work below is a real transaction), migrated."""
    init_seconds = max(1, int(settings.timeouts.database_init.total_seconds()))
    conn: unit.Connection = await _bounded(
        "connecting to PostgreSQL",
        settings.timeouts.database_init,
        "databaseInitTimeout",
        asyncio.to_thread(unit.connect, settings.dsn, connect_timeout=init_seconds),
    )
    try:
        await asyncio.to_thread(migrate.apply, conn)
    except BaseException:
        await asyncio.to_thread(conn.close)
        raise
    return conn


def _hours_to_collect(
    conn: unit.Connection, settings: _Settings, book: _Book
) -> list[plan.HourWork]:
    """The lookback hours not yet final, then the scheduled hour."""
    scheduled, lookback = settings.scheduled, settings.lookback
    done = store_allocations.finalized_hours(
        conn, cluster=settings.cluster, start=scheduled - plan.HOUR * lookback, end=scheduled
    )
    work = plan.hours_to_collect(scheduled, lookback, done)
    log.info(
        "collecting %d hour(s) up to %s (lookback %d, %d already final) priced by PriceBook %s/%s",
        len(work),
        plan.rfc3339(scheduled),
        lookback,
        len(done),
        book.namespace,
        book.name,
    )
    return work


async def _fetch(settings: _Settings, work: list[plan.HourWork]) -> tuple[Fetched, float]:
    """Every hour's allocations from OpenCost, oldest first; and the seconds it took."""
    fetched: Fetched = []
    fetch_seconds = 0.0
    async with opencost_client.OpenCostClient(settings.opencost) as oc:
        for hour in work:
            started = time.monotonic()
            rows = await opencost_client.fetch_hour(oc, hour.start, cluster=settings.cluster)
            took = time.monotonic() - started
            fetch_seconds += took
            log.info(
                "hour %s: %d allocation rows fetched in %.1fs",
                plan.rfc3339(hour.start),
                len(rows),
                took,
            )
            fetched.append((hour, rows))
    return fetched, fetch_seconds


def _write(
    conn: unit.Connection, settings: _Settings, book: _Book, fetched: Fetched
) -> tuple[int, int]:
    """All fetched hours and the PriceBook that prices them, in one unit of work."""
    with unit.begin(conn) as work:
        book_id = store_allocations.ensure_pricebook(
            conn,
            cluster=settings.cluster,
            namespace=book.namespace,
            name=book.name,
            uid=book.uid,
            currency=book.currency,
            rates=book.rates,
            generation=book.generation,
        )
        written = sum(
            store_allocations.ingest(
                conn, rows, pricebook_id=book_id, currency=book.currency, finalized=hour.finalized
            )
            for hour, rows in fetched
        )
        work.commit()
    return book_id, written


def _finalize(conn: unit.Connection, settings: _Settings) -> int:
    """Rows of earlier hours still open become final, in their own unit of work."""
    with unit.begin(conn) as work:
        count = store_allocations.finalize_before(
            conn, cluster=settings.cluster, before=settings.scheduled
        )
        work.commit()
    return count


async def run(
    env: Mapping[str, str],
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    kube: AsyncClient | None = None,
) -> int:
    """One allocation run; returns the process exit status (0 success, 1 failure)."""
    missing = _missing_env(env)
    if missing:
        log.error("required environment variable(s) not set: %s", ", ".join(missing))
        return 1
    name, namespace = env["COSTJOB_NAME"], env["COSTJOB_NAMESPACE"]
    started_at, started = now(), time.monotonic()
    client = kube or AsyncClient(field_manager="finops-operator")
    try:
        try:
            costjob = await _bounded(
                f"reading CostJob {namespace}/{name}",
                opencost_config.Timeouts.from_sources({}, env).kubernetes_operation,
                "kubernetesOperationTimeout",
                costjobs.get_costjob(client, namespace, name),
            )
        except ApiError as exc:
            log.error("cannot read CostJob %s/%s: %s", namespace, name, exc.status.message)
            return 1
        except RunFailed as exc:
            log.error("%s", exc)
            return 1
        error = await _attempt(client, env, started_at, costjob)
        recorded = await _record(client, env, costjob, records.finished(started_at, started, error))
        return 1 if error or not recorded else 0
    finally:
        if kube is None:
            await client.close()


async def _attempt(
    client: AsyncClient, env: Mapping[str, str], started_at: dt.datetime, costjob: dict[str, Any]
) -> str:
    """Run `collect`; the failure as the execution record's text ('' on success)."""
    try:
        result = await collect(client, env, started_at, costjob)
    except (RunFailed, ValueError, pool.LedgerConnectionError) as exc:
        error = str(exc)
    except Exception as exc:  # every failure becomes a record, not a traceback only
        log.exception("allocation run failed")
        error = f"{type(exc).__name__}: {exc}"
    else:
        log.info(
            "run succeeded: %d row(s) written, %d straggler row(s) finalized",
            result.rows_written,
            result.finalized_stragglers,
        )
        return ""
    log.error("run failed: %s", error)
    return error


async def _record(
    client: AsyncClient,
    env: Mapping[str, str],
    costjob: Mapping[str, Any],
    record: plan.ExecutionRecord,
) -> bool:
    """Prepend the record to the CostJob's history; False (logged) when that failed."""
    meta: Mapping[str, Any] = costjob.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    spec: Mapping[str, Any] = costjob.get("spec") or {}
    try:
        problem = await _bounded(
            "writing the execution record",
            opencost_config.Timeouts.from_sources(spec, env).status_update,
            "statusUpdateTimeout",
            records.write(client, namespace, name, record),
        )
    except RunFailed as exc:
        problem = str(exc)
    if problem:
        log.error("cannot record the outcome on CostJob %s/%s: %s", namespace, name, problem)
    return not problem


def main() -> int:
    """Entry point of `finops-operator --mode=cronjob`."""
    return asyncio.run(run(dict(os.environ)))

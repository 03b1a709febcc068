"""`--mode=cronjob`: pull one pinned hour (plus lookback) of OpenCost allocations into the ledger.

A run is a checklist (`collect`): read the CostJob, pin the hour, elect the rate source, open
the ledger, pick the hours, stream every hour from OpenCost into one unit of work (each batch
is staged as it arrives, each hour merged once it is complete, so memory holds a batch, not
the lookback), finalize stragglers, then record the outcome on the CostJob. Any failure before
the commit writes no row at all; the run still records a `Failed` execution and exits
non-zero so Kubernetes retries the Job for the same pinned hour.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Mapping
from contextlib import aclosing
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from finops.api import bodies, environment
from finops.billing import money
from finops.collection import durations, plan
from finops.jobs import records, writer
from finops.jobs import settings as job_settings
from finops.kube import costjobs
from finops.opencost import client as opencost_client
from finops.opencost import config as opencost_config
from finops.pricing import election
from finops.store import allocations as store_allocations
from finops.store import migrate, pool, unit

log = logging.getLogger("finops.jobs.allocations")

# `COPY` text waiting for the ledger: bounds what a slow ledger makes the run hold.
WRITE_QUEUE_BYTES = 24 * 1024 * 1024

REQUIRED_ENV = (
    environment.Env.COSTJOB_NAME,
    environment.Env.COSTJOB_NAMESPACE,
    environment.Env.POSTGRES_CONNECTION_STRING,
    environment.Env.OPENCOST_CONNECTION_STRING,
)


class RunFailed(Exception):
    """A run that cannot complete; the message goes into the execution record as is."""


@dataclasses.dataclass
class Phases:
    """Seconds a run spent per phase, for logs and the benchmark.

    `fetch`: the hours' wall time in this process (waiting for OpenCost, `decode` of bodies
    into `COPY` text, and waiting when the write queue is full). `stage`
    (the `COPY`s) and `merge` (the upserts) run in the writer thread meanwhile; `drain` is
    the wait for the writer after the last hour, `finalize` the stragglers' update.
    """

    fetch: float = 0.0
    decode: float = 0.0
    stage: float = 0.0
    merge: float = 0.0
    drain: float = 0.0
    finalize: float = 0.0


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What one run did, for logs and tests."""

    scheduled: dt.datetime
    hours: list[plan.HourWork]
    rows_written: int
    finalized_stragglers: int
    pricebook_id: int
    phases: Phases = dataclasses.field(default_factory=Phases)


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
    def of(
        cls, job: job_settings.JobSettings, now: dt.datetime, costjob: bodies.CostJobBody
    ) -> _Settings:
        spec: Mapping[str, object] = costjob.get("spec") or {}
        return cls(
            cluster=job.cluster,
            scheduled=job.scheduled_hour(now),
            lookback=plan.lookback_hours(job.hours_lookback),
            timeouts=job.timeouts(spec),
            opencost=job.opencost(spec),
            dsn=job.dsn,
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
    def of(cls, book: bodies.PriceBookBody) -> _Book:
        meta = book.get("metadata") or {}
        spec = book.get("spec")
        try:
            rates = dict(money.parse_rates(None if spec is None else spec.get("rates")))
        except money.RateParseError as exc:
            raise RunFailed(f"PriceBook {meta.get('namespace')}/{meta.get('name')}: {exc}") from exc
        return cls(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            generation=int(meta.get("generation") or 0),
            currency="" if spec is None else str(spec.get("currency", "")),
            rates=rates,
        )


async def collect(
    kube: AsyncClient,
    job: job_settings.JobSettings,
    now: dt.datetime,
    costjob: bodies.CostJobBody,
) -> RunResult:
    """Everything between reading the CostJob and recording the outcome; raises on failure."""
    settings = _Settings.of(job, now, costjob)
    book = await _elect_book(kube, settings)
    conn = await _open_ledger(settings)
    phases = Phases()
    try:
        work = await asyncio.to_thread(_hours_to_collect, conn, settings, book)
        started = time.monotonic()
        book_id, written = await _stream(conn, settings, book, work, phases)
        log.info(
            "wrote %d hour(s) in one transaction: %d row(s) changed in %.1fs",
            len(work),
            written,
            time.monotonic() - started,
        )
        started = time.monotonic()
        stragglers = await _bounded(
            "finalizing earlier allocation rows",
            settings.timeouts.database_insert,
            "databaseInsertTimeout",
            asyncio.to_thread(_finalize, conn, settings),
        )
        phases.finalize = time.monotonic() - started
    finally:
        await asyncio.to_thread(conn.close)
    return RunResult(settings.scheduled, work, written, stragglers, book_id, phases)


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


async def _open_ledger(settings: _Settings) -> pool.Connection:
    """An autocommit session (each unit of work below is a real transaction), migrated."""
    init_seconds = max(1, int(settings.timeouts.database_init.total_seconds()))
    conn: pool.Connection = await _bounded(
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
    conn: pool.Connection, settings: _Settings, book: _Book
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


async def _stream(
    conn: pool.Connection,
    settings: _Settings,
    book: _Book,
    work: list[plan.HourWork],
    phases: Phases,
) -> tuple[int, int]:
    """Every hour, oldest first, into one unit of work; the PriceBook id and rows changed.

    Batches are staged and hours merged by a `Writer`, so PostgreSQL merges one hour while
    this process fetches and decodes the next.
    """
    changed: list[int] = []
    with unit.begin(conn) as uow, writer.responsive_threads():
        book_id = await asyncio.to_thread(_open_stream, conn, settings, book)
        ledger = writer.Writer(limit=WRITE_QUEUE_BYTES)
        try:
            async with opencost_client.OpenCostClient(settings.opencost) as oc:
                for hour in work:
                    await _stage_hour(conn, oc, settings, hour, phases, ledger)
                    await ledger.submit(
                        _timed(
                            phases,
                            "merge",
                            changed.append,
                            store_allocations.merge,
                            conn,
                            pricebook_id=book_id,
                            currency=book.currency,
                        )
                    )
                phases.decode = oc.decode_seconds
            started = time.monotonic()
            await ledger.close()
            phases.drain = time.monotonic() - started
        except BaseException:
            await ledger.abort()
            raise
        uow.commit()
    return book_id, sum(changed)


def _timed(
    phases: Phases,
    phase: str,
    keep: Callable[[Any], None],
    call: Callable[..., Any],
    *args: Any,
    **kwargs: Any,
) -> Callable[[], None]:
    """`call(*args, **kwargs)` as a writer job: its result to `keep`, its time to `phase`."""

    def job() -> None:
        started = time.monotonic()
        keep(call(*args, **kwargs))
        setattr(phases, phase, getattr(phases, phase) + time.monotonic() - started)

    return job


def _open_stream(conn: pool.Connection, settings: _Settings, book: _Book) -> int:
    """The PriceBook's ledger row and an empty stream table, inside the run's transaction."""
    store_allocations.open_stream(conn)
    return store_allocations.ensure_pricebook(
        conn,
        cluster=settings.cluster,
        namespace=book.namespace,
        name=book.name,
        uid=book.uid,
        currency=book.currency,
        rates=book.rates,
        generation=book.generation,
    )


async def _stage_hour(
    conn: pool.Connection,
    oc: opencost_client.OpenCostClient,
    settings: _Settings,
    hour: plan.HourWork,
    phases: Phases,
    ledger: writer.Writer,
) -> None:
    """Queue one hour's batches for staging as they arrive (within `openCostFetchTimeout`)."""
    started, count = time.monotonic(), 0
    batches = opencost_client.iter_hour_lines(oc, hour.start, cluster=settings.cluster)
    async with opencost_client.hour_deadline(oc, hour.start), aclosing(batches):
        async for batch in batches:
            data = store_allocations.with_finalized(batch.text, finalized=hour.finalized)
            count += len(batch.names)
            job = _timed(phases, "stage", _ignore, store_allocations.stage_text, conn, data)
            await ledger.submit(job, len(data))
    took = time.monotonic() - started
    phases.fetch += took
    log.info("hour %s: %d allocation rows fetched in %.1fs", plan.rfc3339(hour.start), count, took)


def _ignore(_: object) -> None:
    pass


def _finalize(conn: pool.Connection, settings: _Settings) -> int:
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
    job = job_settings.JobSettings.from_env(env)
    name, namespace = job.costjob_name, job.costjob_namespace
    started_at, started = now(), time.monotonic()
    client = kube or AsyncClient(field_manager="finops-operator")
    try:
        try:
            costjob = await _bounded(
                f"reading CostJob {namespace}/{name}",
                job.timeouts({}).kubernetes_operation,
                "kubernetesOperationTimeout",
                costjobs.get_costjob(client, namespace, name),
            )
        except ApiError as exc:
            log.error("cannot read CostJob %s/%s: %s", namespace, name, exc.status.message)
            return 1
        except RunFailed as exc:
            log.error("%s", exc)
            return 1
        error = await _attempt(client, job, started_at, costjob)
        recorded = await _record(client, job, costjob, records.finished(started_at, started, error))
        return 1 if error or not recorded else 0
    finally:
        if kube is None:
            await client.close()


async def _attempt(
    client: AsyncClient,
    job: job_settings.JobSettings,
    started_at: dt.datetime,
    costjob: bodies.CostJobBody,
) -> str:
    """Run `collect`; the failure as the execution record's text ('' on success)."""
    try:
        result = await collect(client, job, started_at, costjob)
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
    job: job_settings.JobSettings,
    costjob: bodies.CostJobBody,
    record: plan.RunRecord,
) -> bool:
    """Prepend the record to the CostJob's history; False (logged) when that failed."""
    meta = costjob.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    spec: Mapping[str, object] = costjob.get("spec") or {}
    try:
        problem = await _bounded(
            "writing the execution record",
            job.timeouts(spec).status_update,
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

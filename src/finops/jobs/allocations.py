"""`--mode=cronjob`: pull one pinned hour (plus lookback) of OpenCost allocations into the ledger.

A run is a checklist: read the CostJob, pin the hour, pick the rate source, fetch every hour
from OpenCost, write all hours in one transaction, finalize stragglers, then record the outcome
on the CostJob. Any failure before the commit writes no row at all; the run still records a
`Failed` execution and exits non-zero so Kubernetes retries the Job for the same pinned hour.
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
from finops.kube import costjobs
from finops.opencost import client as opencost_client
from finops.opencost import config as opencost_config
from finops.pricing import election
from finops.store import allocations as store_allocations
from finops.store import migrate, pool

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


def _rates(book: Mapping[str, Any]) -> dict[str, int]:
    meta = book.get("metadata") or {}
    try:
        return dict(money.parse_rates((book.get("spec") or {}).get("rates")))
    except money.RateParseError as exc:
        raise RunFailed(f"PriceBook {meta.get('namespace')}/{meta.get('name')}: {exc}") from exc


async def collect(
    kube: AsyncClient,
    env: Mapping[str, str],
    now: dt.datetime,
    costjob: Mapping[str, Any],
) -> RunResult:
    """Everything between reading the CostJob and recording the outcome; raises on failure."""
    spec: Mapping[str, Any] = costjob.get("spec") or {}
    timeouts = opencost_config.Timeouts.from_sources(spec, env)
    oc_config = opencost_config.OpenCostConfig.from_sources(spec, env)
    cluster = pool.cluster_id(env)
    scheduled = plan.scheduled_hour(env.get("SCHEDULED_TIMESTAMP"), now)
    lookback = plan.lookback_hours(env.get("HOURS_LOOKBACK"))

    books = await _bounded(
        "listing PriceBooks",
        timeouts.kubernetes_operation,
        "kubernetesOperationTimeout",
        costjobs.list_pricebooks(kube),
    )
    source = election.rate_source(books)
    if source.book is None:
        raise RunFailed(f"cannot price allocations: {source.problem}")
    book = source.book
    rates = _rates(book)
    meta = book.get("metadata") or {}
    currency = str((book.get("spec") or {}).get("currency", ""))

    dsn = env["POSTGRES_CONNECTION_STRING"]
    init_seconds = max(1, int(timeouts.database_init.total_seconds()))
    conn = await _bounded(
        "connecting to PostgreSQL",
        timeouts.database_init,
        "databaseInitTimeout",
        asyncio.to_thread(pool.connect, dsn, autocommit=True, connect_timeout=init_seconds),
    )
    try:  # autocommit: every `conn.transaction()` below is a real, committed transaction
        await asyncio.to_thread(migrate.apply, conn)
        done = await asyncio.to_thread(
            store_allocations.finalized_hours,
            conn,
            cluster=cluster,
            start=scheduled - plan.HOUR * lookback,
            end=scheduled,
        )
        work = plan.hours_to_collect(scheduled, lookback, done)
        log.info(
            "collecting %d hour(s) up to %s (lookback %d, %d already final) priced by "
            "PriceBook %s/%s",
            len(work),
            plan.rfc3339(scheduled),
            lookback,
            len(done),
            meta.get("namespace"),
            meta.get("name"),
        )
        fetched: list[tuple[plan.HourWork, list[allocation.AllocationRow]]] = []
        fetch_seconds = 0.0
        async with opencost_client.OpenCostClient(oc_config) as oc:
            for hour in work:
                fetch_started = time.monotonic()
                rows = await opencost_client.fetch_hour(oc, hour.start, cluster=cluster)
                took = time.monotonic() - fetch_started
                fetch_seconds += took
                log.info(
                    "hour %s: %d allocation rows fetched in %.1fs",
                    plan.rfc3339(hour.start),
                    len(rows),
                    took,
                )
                fetched.append((hour, rows))

        def write() -> tuple[int, int]:
            with conn.transaction():
                book_id = store_allocations.ensure_pricebook(
                    conn,
                    cluster=cluster,
                    namespace=str(meta.get("namespace", "")),
                    name=str(meta.get("name", "")),
                    uid=str(meta.get("uid", "")),
                    currency=currency,
                    rates=rates,
                    generation=int(meta.get("generation") or 0),
                )
                written = sum(
                    store_allocations.ingest(
                        conn,
                        rows,
                        pricebook_id=book_id,
                        currency=currency,
                        finalized=hour.finalized,
                    )
                    for hour, rows in fetched
                )
            return book_id, written

        write_started = time.monotonic()
        book_id, written = await asyncio.to_thread(write)
        write_seconds = time.monotonic() - write_started
        log.info(
            "wrote %d hour(s) in one transaction: %d row(s) changed in %.1fs",
            len(fetched),
            written,
            write_seconds,
        )

        def finalize() -> int:
            with conn.transaction():
                return store_allocations.finalize_before(conn, cluster=cluster, before=scheduled)

        stragglers = await _bounded(
            "finalizing earlier allocation rows",
            timeouts.database_insert,
            "databaseInsertTimeout",
            asyncio.to_thread(finalize),
        )
    finally:
        await asyncio.to_thread(conn.close)
    return RunResult(scheduled, work, written, stragglers, book_id, fetch_seconds, write_seconds)


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
        error = ""
        try:
            result = await collect(client, env, started_at, costjob)
            log.info(
                "run succeeded: %d row(s) written, %d straggler row(s) finalized",
                result.rows_written,
                result.finalized_stragglers,
            )
        except (RunFailed, ValueError, pool.LedgerConnectionError) as exc:
            error = str(exc)
        except Exception as exc:  # every failure becomes a record, not a traceback only
            log.exception("allocation run failed")
            error = f"{type(exc).__name__}: {exc}"
        if error:
            log.error("run failed: %s", error)
        record = plan.ExecutionRecord(
            execution_time=started_at,
            succeeded=not error,
            duration=durations.format_seconds(dt.timedelta(seconds=time.monotonic() - started)),
            error=error,
        )
        spec = costjob.get("spec") or {}
        try:
            await _bounded(
                "writing the execution record",
                opencost_config.Timeouts.from_sources(spec, env).status_update,
                "statusUpdateTimeout",
                costjobs.update_costjob_status(
                    client, namespace, name, lambda status: plan.status_after_run(status, record)
                ),
            )
        except (ApiError, RunFailed) as exc:
            log.error("cannot record the outcome on CostJob %s/%s: %s", namespace, name, exc)
            return 1
        return 1 if error else 0
    finally:
        if kube is None:
            await client.close()


def main() -> int:
    """Entry point of `finops-operator --mode=cronjob`."""
    return asyncio.run(run(dict(os.environ)))

"""Billing-period metrics on `/metrics`: periods closed, and corrections booked.

Why read from the ledger: closed periods and corrections live only there (no object carries
them). The read is two small queries, done at most once a minute: a scrape in between is
answered from the last read, and a ledger that cannot be read keeps the last values (and
says so in the log) rather than failing the scrape.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator

import prometheus_client
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from finops.store import focus as focus_store
from finops.store import periods as store_periods
from finops.store import pool

log = logging.getLogger(__name__)

REFRESH_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the metrics show, as last read."""

    closed: int
    closed_through: float | None
    corrections: tuple[tuple[str, str, str, int, int], ...]
    """(namespace, period label, currency, micros, rows) per booking period."""


def read(conn: pool.Connection, cluster: str) -> Snapshot:
    index = focus_store.period_index(conn, cluster=cluster)
    sums = store_periods.correction_sums(conn, cluster=cluster)
    through = index.closed_through
    return Snapshot(
        closed=len(index.closed),
        closed_through=None if through is None else through.timestamp(),
        corrections=tuple(
            (s.namespace, index.starting(s.booked_in).label, s.currency, s.micros, s.rows)
            for s in sums
        ),
    )


def families(snap: Snapshot) -> list[GaugeMetricFamily]:
    closed = GaugeMetricFamily(
        "finops_billing_periods_closed",
        "Billing periods closed in the ledger (their statements are final).",
    )
    closed.add_metric([], float(snap.closed))
    through = GaugeMetricFamily(
        "finops_billing_closed_through_timestamp_seconds",
        "End of the last closed billing period (Unix seconds); absent before the first close.",
    )
    if snap.closed_through is not None:
        through.add_metric([], snap.closed_through)
    amount = GaugeMetricFamily(
        "finops_billing_correction_micros",
        "Corrections booked in a billing period, signed, in micro-currency.",
        labels=["namespace", "period", "currency"],
    )
    rows = GaugeMetricFamily(
        "finops_billing_correction_rows",
        "Correction rows booked in a billing period.",
        labels=["namespace", "period"],
    )
    counted: dict[tuple[str, str], int] = {}
    for namespace, period, currency, micros, n in snap.corrections:
        amount.add_metric([namespace, period, currency], float(micros))
        counted[(namespace, period)] = counted.get((namespace, period), 0) + n
    for (namespace, period), n in sorted(counted.items()):
        rows.add_metric([namespace, period], float(n))
    return [closed, through, amount, rows]


class PeriodCollector(Collector):
    """Serves the last snapshot; refreshes it when it is older than `REFRESH_SECONDS`."""

    def __init__(
        self, run: Callable[[Callable[[pool.Connection], Snapshot]], Snapshot], cluster: str
    ) -> None:
        self._run = run
        self._cluster = cluster
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        self._at = 0.0

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            if self._snap is None or time.monotonic() - self._at >= REFRESH_SECONDS:
                self._at = time.monotonic()
                try:
                    self._snap = self._run(lambda conn: read(conn, self._cluster))
                except (
                    pool.LedgerUnavailable,
                    pool.LedgerConnectionError,
                    focus_store.LedgerReadError,
                ) as exc:
                    log.warning("billing-period metrics keep their last values: %s", exc)
            return self._snap

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snap = self.snapshot()
        if snap is not None:
            yield from families(snap)


_installed: list[PeriodCollector] = []


def install(registry: prometheus_client.CollectorRegistry, dsn: str, cluster: str) -> None:
    """Serve the billing-period metrics of the ledger at `dsn` on `registry` (once)."""
    while _installed:
        registry.unregister(_installed.pop())
    session = pool.Session(dsn)
    collector = PeriodCollector(session.run, cluster)
    registry.register(collector)
    _installed.append(collector)

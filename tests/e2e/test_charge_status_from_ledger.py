"""`CostsResolved=FromDB`: every `current`, the fee's included, is what `subscription_charges`
holds, not a recomputation; and a fee row removed by hand is written again by the next run.

Real API server and real PostgreSQL, as in tests/e2e/test_charge_job.py (whose helpers this
reuses). Expectations come from the documented fee formula: `ActivatedAt`, `period: 1h`,
activated at midnight, so one 1.00 tick closes every hour.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from typing import Any

import psycopg
from tests.e2e.test_charge_job import (
    CLUSTER,
    at,
    charge_run,
    client_for,
    costs_resolved,
    get_sub,
    offering,
    rfc,
    subscription,
)

from finops.collection import charge_plan
from finops.jobs import charges as job
from finops.jobs import settings as job_settings
from finops_devenv import controlplane

PRICE = 1_000_000


def day_bucket(kube: controlplane.ControlPlane, ns: str) -> dict[str, Any]:
    sub = get_sub(kube, ns, "metered")
    assert sub is not None
    assert costs_resolved(sub)["reason"] == "FromDB"
    bucket: dict[str, Any] = sub["status"]["costs"][1]
    assert bucket["granularity"] == "day"
    return bucket


def fee_rows(dsn: str) -> dict[dt.datetime, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT hour, amount_micros FROM subscription_charges WHERE source = 'subscription'"
        ).fetchall()
    return {hour.astimezone(dt.UTC): amount for hour, amount in rows}


def refresh_status_from_ledger(
    kube: controlplane.ControlPlane, ns: str, dsn: str, scheduled: dt.datetime
) -> None:
    """Rewrite `status.costs` from what the ledger holds now, charging nothing: the job's own
    status path with a ledger pass that only reads (the sums a real run reads back)."""

    def read_only(billed: Sequence[charge_plan.Billed]) -> job.LedgerResult:
        with psycopg.connect(dsn, autocommit=True) as conn:
            uids = [b.sub.uid for b in billed]
            settled = job.read_settled(conn, cluster=CLUSTER, scheduled=scheduled, uids=uids)
        return job.LedgerResult(None, settled)

    async def go() -> job.RunReport:
        client = client_for(kube)
        env = {"CLUSTER_ID": CLUSTER, "SCHEDULED_TIMESTAMP": rfc(scheduled)}
        try:
            settings = job_settings.JobSettings.from_env(env)
            return await job.collect(client, settings, scheduled, ledger=read_only, namespace=ns)
        finally:
            await client.close()

    report = asyncio.run(go())
    assert report.errors == {} and report.statuses_written == 1


def test_from_db_current_is_summed_from_the_fee_rows_and_a_removed_row_comes_back(
    kube: controlplane.ControlPlane, kube_namespace: str, ledger_dsn: str
) -> None:
    ns = kube_namespace
    fee = {"tickAlignment": "ActivatedAt", "period": "1h", "priceMicros": PRICE}
    offering(kube, ns, "hourly", {"subscriptionFee": fee})
    subscription(kube, ns, "metered", "hourly", at(0))
    assert charge_run(kube, ns, ledger_dsn, at(5)) == 0
    # Ticks close at 01:00 ... 05:00 by the 05:00 run: hours 00-04 are settled.
    assert fee_rows(ledger_dsn) == {at(h): PRICE for h in range(6)}
    day = day_bucket(kube, ns)
    assert (day["current"], day["projected"]) == (5 * PRICE, 24 * PRICE)

    with psycopg.connect(ledger_dsn) as conn:
        gone = conn.execute(
            "DELETE FROM subscription_charges WHERE source = 'subscription' AND hour = %s",
            (at(2),),
        )
        assert gone.rowcount == 1
    refresh_status_from_ledger(kube, ns, ledger_dsn, at(5))
    day = day_bucket(kube, ns)
    assert (day["current"], day["projected"]) == (4 * PRICE, 24 * PRICE)
    assert day["breakdown"] == [
        {"name": "subscription", "current": 4 * PRICE, "projected": 24 * PRICE}
    ]

    # The next run sees the hole behind its watermark and writes the hour again.
    assert charge_run(kube, ns, ledger_dsn, at(5)) == 0
    assert fee_rows(ledger_dsn) == {at(h): PRICE for h in range(6)}
    day = day_bucket(kube, ns)
    assert (day["current"], day["projected"]) == (5 * PRICE, 24 * PRICE)

"""Budgets in the gateway: each Budget's latest evaluation, and its period's spend hour by hour.

Why from the ledger: the charge run keeps every Budget's evaluation there (spent, forecast,
state, the Subscriptions counted), so the gateway needs no access to the Kubernetes API beyond
its reviews. The tenant scoping is the dashboard's: a caller sees the Budgets of namespaces
where it may `get` Subscriptions. Money is integer micros in the Budget's currency.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from finops.collection import budgets as decisions
from finops.gateway import dashboard, params
from finops.store import budgets as store
from finops.store import pool

HOUR = dt.timedelta(hours=1)


def cumulative(
    start: dt.datetime, through: dt.datetime, hourly: Sequence[tuple[dt.datetime, int]]
) -> tuple[list[dt.datetime], list[int]]:
    """Instants `start, start+1h, ..., through` and what was spent before each: the first is
    0 and the last is the spend of `[start, through)`."""
    spent = dict(hourly)
    instants, totals, running = [start], [0], 0
    hour = start
    while hour < through:
        running += spent.get(hour, 0)
        hour += HOUR
        instants.append(hour)
        totals.append(running)
    return instants, totals


def _crossing(c: decisions.Crossing) -> dict[str, Any]:
    return {
        "percent": c.percent,
        "basis": c.basis.value,
        "crossedAt": params.rfc3339(c.crossed_at),
        "valueMicros": c.value_micros,
    }


def _item(row: store.EvaluationRow, crossed: Sequence[decisions.Crossing]) -> dict[str, Any]:
    return {
        "namespace": row.namespace,
        "name": row.name,
        "period": row.period,
        "periodStart": params.rfc3339(row.period_start),
        "periodEnd": params.rfc3339(row.period_end),
        "evaluatedHour": params.rfc3339(row.evaluated_hour),
        "currency": row.currency,
        "amountMicros": row.amount_micros,
        "spentMicros": row.spent_micros,
        "forecastMicros": row.forecast_micros,
        "futureFeesMicros": row.future_fees_micros,
        "futureUsageMicros": row.future_usage_micros,
        "state": row.state,
        "subscriptions": len(row.members),
        "thresholds": [_crossing(c) for c in crossed],
    }


def routes(*, cluster: str, gate: dashboard.Gate, read: dashboard.Ledger) -> list[BaseRoute]:
    """`/api/v1/budgets` (every readable namespace, or those named) and
    `/api/v1/namespaces/{namespace}/budgets/{name}` (one Budget and its spend so far)."""
    api = dashboard.Api(cluster, gate, read)

    async def listing(request: Request) -> dict[str, Any]:
        namespaces = await api.readable(
            request, listed=lambda c: store.budget_namespaces(c, cluster=cluster)
        )

        def query(conn: pool.Connection) -> list[dict[str, Any]]:
            rows = store.evaluations(conn, cluster=cluster, namespaces=namespaces)
            crossed = store.period_crossings(conn, cluster=cluster, rows=rows)
            return [_item(r, crossed[r.uid]) for r in rows]

        return {"namespaces": namespaces, "items": await read(query)}

    async def one(request: Request) -> dict[str, Any]:
        params.check_names(request.path_params)
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        verdict = await gate.check(request.headers.get("authorization"), namespace)
        if verdict != 200:
            raise dashboard.RequestRefused(verdict)

        def query(conn: pool.Connection) -> dict[str, Any] | None:
            found = store.evaluations(conn, cluster=cluster, namespaces=[namespace], name=name)
            if not found:
                return None
            row = found[0]
            through = row.evaluated_hour + HOUR
            hourly = store.hourly(
                conn,
                cluster=cluster,
                subscription_uids=row.members,
                currency=row.currency,
                start=row.period_start,
                end=through,
            )
            instants, totals = cumulative(row.period_start, through, hourly)
            crossed = store.period_crossings(conn, cluster=cluster, rows=[row])[row.uid]
            return {
                **_item(row, crossed),
                "instants": [params.rfc3339(t) for t in instants],
                "cumulativeMicros": totals,
            }

        body = await read(query)
        if body is None:
            raise dashboard.RequestRefused(
                404, f"no evaluated Budget {name} in namespace {namespace}"
            )
        return body

    return [
        Route("/api/v1/budgets", api.endpoint(listing), methods=["GET"]),
        Route("/api/v1/namespaces/{namespace}/budgets/{name}", api.endpoint(one), methods=["GET"]),
    ]

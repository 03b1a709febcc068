"""The cost dashboard: its page at `/`, and the read API it draws from.

Why these routes span namespaces: a person wants one picture of everything they may see, so
the API answers for every namespace the caller may `get` Subscriptions in (one
SubjectAccessReview per namespace that has charges), or for the `namespace` parameters they
name, each of which must be readable. Money is integer micros, formatted only by the page.
The page and its vendored Chart.js are package data: nothing is fetched from the internet.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from finops.gateway import params
from finops.store import dashboard as queries
from finops.store import pool

T = TypeVar("T")

MAX_HOURLY = dt.timedelta(days=62)
REVIEWS_AT_ONCE = 8
MAX_NAMED = 100
_STEPS = {queries.Step.HOUR: dt.timedelta(hours=1), queries.Step.DAY: dt.timedelta(days=1)}

PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class Gate(Protocol):
    """May the request's `Authorization` read this namespace: 200, 401, 403 or 500."""

    async def check(self, authorization: str | None, namespace: str) -> int: ...


class Ledger(Protocol):
    """Runs a query with a ledger connection off the event loop.

    Raises `pool.LedgerUnavailable` when the ledger cannot answer.
    """

    async def __call__(self, query: Callable[[pool.Connection], T]) -> T: ...


@dataclasses.dataclass
class RequestRefused(Exception):
    """The request is answered with `status` (and `message`, or the usual refusal)."""

    status: int
    message: str = ""


def bucket_axis(start: dt.datetime, end: dt.datetime, step: queries.Step) -> list[dt.datetime]:
    """Every UTC hour or day that overlaps [start, end), first one truncated."""
    first = start.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    if step is queries.Step.DAY:
        first = first.replace(hour=0)
    width = _STEPS[step]
    axis = []
    while first < end:
        axis.append(first)
        first += width
    return axis


def lay_out(
    points: Sequence[queries.SeriesPoint], axis: Sequence[dt.datetime]
) -> list[dict[str, Any]]:
    """One dense series per (key, currency) on `axis`, zeros where nothing was charged."""
    index = {bucket: i for i, bucket in enumerate(axis)}
    values: dict[tuple[str, str], list[int]] = {}
    for point in points:
        row = values.setdefault((point.key, point.currency), [0] * len(axis))
        row[index[point.bucket]] += point.amount_micros
    return [
        {"key": key, "currency": currency, "valuesMicros": row, "totalMicros": sum(row)}
        for (key, currency), row in sorted(values.items())
    ]


def _worst(verdicts: Sequence[int]) -> int | None:
    """The refusal a whole request gets: no token beats a failed review beats forbidden."""
    for status in (401, 500, 403):
        if status in verdicts:
            return status
    return None


class Api:
    """Which namespaces a request reads, and its answer (refusals and failures included)."""

    def __init__(self, cluster: str, gate: Gate, read: Ledger) -> None:
        self.cluster = cluster
        self.gate = gate
        self.read = read

    async def _verdicts(self, authorization: str | None, namespaces: Sequence[str]) -> list[int]:
        limit = asyncio.Semaphore(REVIEWS_AT_ONCE)

        async def one(namespace: str) -> int:
            async with limit:
                return await self.gate.check(authorization, namespace)

        return list(await asyncio.gather(*(one(ns) for ns in namespaces)))

    async def readable(
        self, request: Request, listed: Callable[[pool.Connection], list[str]] | None = None
    ) -> list[str]:
        """The namespaces this request reads: those it names, or all it may read of those
        `listed` finds (default: every namespace with charges)."""
        authorization = request.headers.get("authorization")
        named = sorted(set(request.query_params.getlist("namespace")))
        if len(named) > MAX_NAMED:
            raise params.BadRequest(f"name at most {MAX_NAMED} 'namespace' parameters")
        for namespace in named:
            params.check_names({"namespace": namespace})
        if named:
            refusal = _worst(await self._verdicts(authorization, named))
            if refusal is not None:
                raise RequestRefused(refusal)
            return named
        cluster = self.cluster
        candidates = await self.read(
            listed or (lambda c: queries.charged_namespaces(c, cluster=cluster))
        )
        # With nothing to review, still authenticate: an anonymous caller gets 401, not [].
        verdicts = await self._verdicts(authorization, candidates or ["default"])
        refusal = _worst(verdicts)
        if refusal in (401, 500):
            raise RequestRefused(refusal or 500)
        return [ns for ns, verdict in zip(candidates, verdicts, strict=False) if verdict == 200]

    async def answer(
        self, request: Request, body: Callable[[Request], Awaitable[dict[str, Any]]]
    ) -> JSONResponse:
        try:
            return params.Answer(await body(request))
        except RequestRefused as refused:
            message = refused.message or params.REFUSALS.get(refused.status, "refused")
            return params.error(refused.status, message)
        except params.BadRequest as exc:
            return params.error(400, str(exc))
        except pool.LedgerUnavailable:
            return params.error(503, "the ledger is unavailable")

    def endpoint(
        self, body: Callable[[Request], Awaitable[dict[str, Any]]]
    ) -> Callable[[Request], Awaitable[JSONResponse]]:
        """A route handler answering with `body` (see `answer`)."""

        async def serve(request: Request) -> JSONResponse:
            return await self.answer(request, body)

        return serve

    async def namespaces(self, request: Request) -> dict[str, Any]:
        return {"items": [{"name": ns} for ns in await self.readable(request)]}

    async def series(self, request: Request) -> dict[str, Any]:
        namespaces = await self.readable(request)
        start, end = params.parse_window(request.query_params)
        step = params.choice(request.query_params, "step", queries.Step, queries.Step.HOUR)
        group_by = params.choice(
            request.query_params, "groupBy", queries.GroupBy, queries.GroupBy.SOURCE
        )
        if step is queries.Step.HOUR and end - start > MAX_HOURLY:
            raise params.BadRequest(
                f"step=hour covers at most {MAX_HOURLY.days} days; use step=day"
            )
        cluster = self.cluster

        def query(conn: pool.Connection) -> tuple[list[queries.SeriesPoint], str | None]:
            points = queries.cost_series(
                conn,
                cluster=cluster,
                namespaces=namespaces,
                start=start,
                end=end,
                step=step,
                group_by=group_by,
            )
            return points, queries.active_currency(conn, cluster=cluster)

        points, currency = await self.read(query)
        axis = bucket_axis(start, end, step)
        return {
            **_frame(start, end, namespaces, currency),
            "step": step.value,
            "groupBy": group_by.value,
            "buckets": [params.rfc3339(b) for b in axis],
            "series": lay_out(points, axis),
        }

    async def breakdown(self, request: Request) -> dict[str, Any]:
        namespaces = await self.readable(request)
        start, end = params.parse_window(request.query_params)
        cluster = self.cluster

        def query(conn: pool.Connection) -> tuple[list[queries.BreakdownRow], str | None]:
            rows = queries.cost_breakdown(
                conn, cluster=cluster, namespaces=namespaces, start=start, end=end
            )
            return rows, queries.active_currency(conn, cluster=cluster)

        rows, currency = await self.read(query)
        items = [
            {
                "namespace": r.namespace,
                "subscription": r.subscription,
                "offeringNamespace": r.offering_namespace,
                "offering": r.offering,
                "source": r.source,
                "currency": r.currency,
                "totalMicros": r.total_micros,
                "finalizedMicros": r.finalized_micros,
            }
            for r in rows
        ]
        return {**_frame(start, end, namespaces, currency), "items": items}


def _frame(
    start: dt.datetime, end: dt.datetime, namespaces: Sequence[str], currency: str | None
) -> dict[str, Any]:
    """What every dashboard answer says about itself: window, namespaces, active currency."""
    return {
        "from": params.rfc3339(start),
        "to": params.rfc3339(end),
        "namespaces": list(namespaces),
        "currency": currency,
    }


def _page() -> str:
    return resources.files("finops.gateway").joinpath("static/index.html").read_text("utf-8")


def routes(*, cluster: str, gate: Gate, read: Ledger) -> list[BaseRoute]:
    """The page, its assets under /static, and the API routes it calls."""
    api = Api(cluster, gate, read)
    page = _page()

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    static = StaticFiles(packages=[("finops.gateway", "static")])
    return [
        Route("/", index, methods=["GET"]),
        Mount("/static", app=static, name="static"),
        Route("/api/v1/namespaces", api.endpoint(api.namespaces), methods=["GET"]),
        Route("/api/v1/cost-series", api.endpoint(api.series), methods=["GET"]),
        Route("/api/v1/cost-breakdown", api.endpoint(api.breakdown), methods=["GET"]),
    ]

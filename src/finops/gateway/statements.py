"""The gateway's statements: a namespace's list of closed-period statements, and one
statement as JSON, CSV or a printable HTML page.

Same rules as the namespace's other routes: a caller needs `get` on Subscriptions in the
namespace. The HTML page is served with a policy that lets it load nothing at all (it needs
nothing: its style is inline).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from finops.billing import statement_html, statements
from finops.gateway import dashboard, params
from finops.store import focus as focus_store
from finops.store import pool
from finops.store import statements as store_statements

MEDIA = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "html": "text/html; charset=utf-8",
}
HTML_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
}


class _Missing(Exception):
    """No such statement: 404 with the reason."""


def _list(conn: pool.Connection, cluster: str, namespace: str) -> list[statements.SummaryJson]:
    """The namespace's statements of closed periods, newest first, with totals."""
    index = focus_store.period_index(conn, cluster=cluster)
    out: list[statements.SummaryJson] = []
    for period in reversed(index.closed):
        start, end = period.start, period.end
        charged = store_statements.namespaces(conn, cluster=cluster, start=start, end=end)
        if namespace in charged:
            rows = focus_store.charges(
                conn, cluster=cluster, start=start, end=end, namespace=namespace
            )
            built = statements.build(
                cluster=cluster, namespace=namespace, period=period, index=index, charges=rows
            )
            out.append(statements.summary(built))
    return out


def _one(
    conn: pool.Connection, cluster: str, namespace: str, label: str, provisional: bool
) -> statements.Statement:
    try:
        return store_statements.statement(
            conn, cluster=cluster, namespace=namespace, label=label, provisional=provisional
        )
    except store_statements.PeriodNotFound as exc:
        raise _Missing(str(exc)) from None


def _body(statement: statements.Statement, fmt: str) -> Response:
    if fmt == "html":
        page = statement_html.page(statement)
        return Response(page, media_type=MEDIA["html"], headers=HTML_HEADERS)
    name = f"{statement.invoice_id}.{fmt}"
    text = statements.csv_text(statement) if fmt == "csv" else statements.json_text(statement)
    disposition = {"Content-Disposition": f'attachment; filename="{name}"'} if fmt == "csv" else {}
    return Response(text, media_type=MEDIA[fmt], headers=disposition)


def routes(*, cluster: str, gate: dashboard.Gate, read: dashboard.Ledger) -> list[BaseRoute]:
    """`/api/v1/namespaces/{ns}/statements` and `.../statements/{period}`."""

    async def allowed(request: Request) -> Response | None:
        try:
            params.check_names(request.path_params)
        except params.BadRequest as exc:
            return params.error(400, str(exc))
        verdict = await gate.check(
            request.headers.get("authorization"), request.path_params["namespace"]
        )
        if verdict != 200:
            return params.error(verdict, params.REFUSALS.get(verdict, "refused"))
        return None

    async def listing(request: Request) -> Response:
        refused = await allowed(request)
        if refused is not None:
            return refused
        namespace = request.path_params["namespace"]
        try:
            items = await read(lambda conn: _list(conn, cluster, namespace))
        except (pool.LedgerUnavailable, focus_store.LedgerReadError):
            return params.error(503, "the ledger is unavailable")
        return JSONResponse({"namespace": namespace, "items": items})

    async def one(request: Request) -> Response:
        refused = await allowed(request)
        if refused is not None:
            return refused
        namespace, label = request.path_params["namespace"], request.path_params["period"]
        fmt = request.query_params.get("format", "json")
        provisional = request.query_params.get("provisional", "false")
        if fmt not in MEDIA or provisional not in ("true", "false"):
            return params.error(
                400, "'format' must be json, csv or html and 'provisional' true or false"
            )
        try:
            statement = await read(
                lambda conn: _one(conn, cluster, namespace, label, provisional == "true")
            )
        except _Missing as exc:
            return params.error(404, str(exc))
        except (pool.LedgerUnavailable, focus_store.LedgerReadError):
            return params.error(503, "the ledger is unavailable")
        return _body(statement, fmt)

    base = "/api/v1/namespaces/{namespace}/statements"
    return [
        Route(base, listing, methods=["GET"]),
        Route(base + "/{period}", one, methods=["GET"]),
    ]

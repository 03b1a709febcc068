"""The FinOps gateway: read-only JSON over the charge ledger, scoped per namespace.

Why its own process: tenants and dashboards read charges without any access to PostgreSQL.
Unlike the reference, authentication is on unless `ENABLE_AUTH` is exactly `false`: every
request's bearer token goes through TokenReview, then a SubjectAccessReview for `get` on
`subscriptions.finops.stakater.com` in the namespace asked about, so one tenant cannot read
another's charges. Money is integer micros, times RFC3339 UTC, windows half-open.
The cost dashboard (`finops.gateway.dashboard`) is served at `/` under the same rules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from finops.api import environment
from finops.gateway import budgets as budget_views
from finops.gateway import dashboard, focus_export, params, statements
from finops.kube import client as kube_client
from finops.kube import reviews
from finops.store import focus, pool, reads

log = logging.getLogger(__name__)
READ_FAILURES: tuple[type[Exception], ...] = (focus.LedgerReadError, *pool.BUSY)
"""A ledger read that failed: the query, or no pooled connection in time."""

# Where to listen; every interface unless set (the sandbox binds loopback only).
DEFAULT_PORT = 8080
GROUP = "finops.stakater.com"
UNSETTLED = "includeUnsettled"
RESOURCE = "subscriptions"
T = TypeVar("T")


class Authorizer:
    """What the app asks before reading a namespace: 200, 401, 403 or 500."""

    async def check(self, authorization: str | None, namespace: str) -> int:
        raise NotImplementedError


class _ReviewAuthorizer(Authorizer):
    def __init__(self, reviewer: reviews.ResourceAuthorizer) -> None:
        self.reviewer = reviewer

    async def check(self, authorization: str | None, namespace: str) -> int:
        return await self.reviewer.check(
            authorization, namespace=namespace, verb="get", group=GROUP, resource=RESOURCE
        )


class _OpenAuthorizer(Authorizer):
    async def check(self, authorization: str | None, namespace: str) -> int:
        return 200


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    """The gateway's environment, read once at start."""

    port: int
    dsn: str
    auth: bool
    origins: tuple[str, ...]
    cluster: str
    host: str = "0.0.0.0"
    """The address to listen on (`BIND_HOST`; the sandbox binds loopback only)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> GatewaySettings:
        env = os.environ if environ is None else environ
        dsn = env.get(environment.Env.PG_CONNECTION_STRING, "").strip()
        if not dsn:
            raise pool.LedgerConnectionError(
                f"{environment.Env.PG_CONNECTION_STRING} is not set; it must hold the DSN"
            )
        raw_port = env.get(environment.Env.PORT, "").strip() or str(DEFAULT_PORT)
        try:
            port = int(raw_port)
        except ValueError:
            raise ValueError(
                f"{environment.Env.PORT} must be a port number, got {raw_port!r}"
            ) from None
        origins = tuple(
            o.strip() for o in env.get(environment.Env.ALLOWED_ORIGINS, "").split(",") if o.strip()
        )
        return cls(
            port=port,
            dsn=dsn,
            auth=env.get(environment.Env.ENABLE_AUTH) != "false",
            origins=origins,
            cluster=pool.cluster_id(env),
            host=env.get(environment.Env.BIND_HOST, "").strip() or "0.0.0.0",
        )


def _focus_handler(
    settings: GatewaySettings,
    ledger: Callable[[], pool.Pool],
    authorizer: Authorizer,
) -> Callable[[Request], Awaitable[Response]]:
    """FOCUS rows of one namespace (`/namespaces/{ns}/focus`) or of all (`/focus`), streamed;
    all namespaces needs the same permission cluster-wide (a review with no namespace)."""

    async def focus_rows(request: Request) -> Response:
        namespace: str | None = request.path_params.get("namespace")
        if namespace is not None:
            try:
                params.check_names(request.path_params)
            except params.BadRequest as exc:
                return params.error(400, str(exc))
        verdict = await authorizer.check(request.headers.get("authorization"), namespace or "")
        if verdict != 200:
            refusal = params.REFUSALS.get(verdict, "refused")
            if verdict == 403 and namespace is None:
                refusal = "not allowed to get subscriptions.finops.stakater.com cluster-wide"
            return params.error(verdict, refusal)
        fmt = request.query_params.get("format", "csv")
        try:
            start, end = params.parse_window(request.query_params)
            media = focus_export.media_type(fmt)
            unsettled = focus_export.include_unsettled(request.query_params.get(UNSETTLED))
        except ValueError as exc:
            return params.error(400, str(exc))
        body = focus_export.stream(
            ledger,
            cluster=settings.cluster,
            namespace=namespace,
            start=start,
            end=end,
            fmt=fmt,
            include_unsettled=unsettled,
        )
        try:
            head = await run_in_threadpool(next, body)
        except READ_FAILURES as exc:
            reason = pool.redact(str(exc).strip() or type(exc).__name__, settings.dsn)
            log.error("ledger read failed at %s: %s", pool.describe(settings.dsn), reason)
            return params.error(503, "the ledger is unavailable")
        name = focus_export.filename(namespace, start, end, fmt)
        return StreamingResponse(
            focus_export.prepend(head, body),
            media_type=media,
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    return focus_rows


Query = Callable[[pool.Connection, dt.datetime, dt.datetime], Any]
Guarded = Callable[[Request, Query], Awaitable[JSONResponse]]


def _guard(
    settings: GatewaySettings, ledger: Callable[[], pool.Pool], authorizer: Authorizer
) -> Guarded:
    """Run a ledger query for an authorised caller's namespace and window; refusals, a bad
    window and an unavailable ledger become the matching error responses."""

    async def guarded(request: Request, query: Query) -> JSONResponse:
        namespace = request.path_params["namespace"]
        try:
            params.check_names(request.path_params)
        except params.BadRequest as exc:
            return params.error(400, str(exc))
        verdict = await authorizer.check(request.headers.get("authorization"), namespace)
        if verdict != 200:
            return params.error(verdict, params.REFUSALS.get(verdict, "refused"))
        try:
            start, end = params.parse_window(request.query_params)
        except params.BadRequest as exc:
            return params.error(400, str(exc))

        def run() -> Any:
            return pool.read(ledger(), settings.dsn, lambda conn: query(conn, start, end))

        try:
            body = await run_in_threadpool(run)
        except pool.LedgerUnavailable as exc:
            log.error("ledger read failed at %s: %s", pool.describe(settings.dsn), exc)
            return params.error(503, "the ledger is unavailable")
        return params.Answer({"from": params.rfc3339(start), "to": params.rfc3339(end), **body})

    return guarded


def _reader(settings: GatewaySettings, ledger: Callable[[], pool.Pool]) -> dashboard.Ledger:
    """Ledger reads off the event loop for the dashboard; a failure is logged once here."""

    async def read(query: Callable[[pool.Connection], T]) -> T:
        try:
            return await run_in_threadpool(pool.read, ledger(), settings.dsn, query)
        except pool.LedgerUnavailable as exc:
            log.error("ledger read failed at %s: %s", pool.describe(settings.dsn), exc)
            raise

    return read


def _charge_item(r: reads.ChargeRow) -> dict[str, Any]:
    return {
        "subscriptionUid": r.subscription_uid,
        "hour": params.rfc3339(r.hour),
        "source": r.source,
        "quantity": str(r.quantity),
        "unitPriceMicros": r.unit_price_micros,
        "amountMicros": r.amount_micros,
        "currency": r.currency,
        "finalized": r.finalized,
    }


def _cost_item(r: reads.CostRow) -> dict[str, Any]:
    return {
        "subscription": r.subscription,
        "subscriptionUid": r.subscription_uid,
        "source": r.source,
        "currency": r.currency,
        "totalMicros": r.total_micros,
        "finalizedMicros": r.finalized_micros,
    }


def _middleware(settings: GatewaySettings) -> list[Middleware]:
    """CORS for the configured origins (none: no CORS headers at all)."""
    if not settings.origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=list(settings.origins),
            allow_methods=["GET"],
            allow_headers=["Authorization"],
        )
    ]


def build(
    settings: GatewaySettings,
    ledger: Callable[[], pool.Pool],
    authorizer: Authorizer,
) -> Starlette:
    """The ASGI app; `ledger` returns the open pool (opened by the lifespan in `main`)."""
    guarded = _guard(settings, ledger, authorizer)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def charges(request: Request) -> JSONResponse:
        namespace, name = request.path_params["namespace"], request.path_params["name"]

        def query(conn: pool.Connection, start: dt.datetime, end: dt.datetime) -> Any:
            rows = reads.subscription_charges(
                conn, cluster=settings.cluster, namespace=namespace, name=name, start=start, end=end
            )
            return {"namespace": namespace, "name": name, "items": [_charge_item(r) for r in rows]}

        return await guarded(request, query)

    async def costs(request: Request) -> JSONResponse:
        namespace = request.path_params["namespace"]

        def query(conn: pool.Connection, start: dt.datetime, end: dt.datetime) -> Any:
            rows = reads.namespace_costs(
                conn, cluster=settings.cluster, namespace=namespace, start=start, end=end
            )
            return {"namespace": namespace, "items": [_cost_item(r) for r in rows]}

        return await guarded(request, query)

    base = "/api/v1/namespaces/{namespace}"
    focus_rows = _focus_handler(settings, ledger, authorizer)
    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route(f"{base}/subscriptions/{{name}}/charges", charges, methods=["GET"]),
            Route(f"{base}/costs", costs, methods=["GET"]),
            Route(f"{base}/focus", focus_rows, methods=["GET"]),
            Route("/api/v1/focus", focus_rows, methods=["GET"]),
            *dashboard.routes(
                cluster=settings.cluster, gate=authorizer, read=_reader(settings, ledger)
            ),
            *budget_views.routes(
                cluster=settings.cluster, gate=authorizer, read=_reader(settings, ledger)
            ),
            *statements.routes(
                cluster=settings.cluster, gate=authorizer, read=_reader(settings, ledger)
            ),
        ],
        middleware=_middleware(settings),
    )


def _waiting_for_database(exc: Exception, wait: float) -> None:
    log.info("waiting for PostgreSQL (%s); next try in %.0fs", exc, wait)


def main() -> int:
    """Console entry `finops-gateway`: serve on `PORT` until stopped."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = GatewaySettings.from_env()
        pool.wait_until_reachable(settings.dsn, on_retry=_waiting_for_database)
        ledger = pool.open_pool(settings.dsn, apply_migrations=False, name="finops-gateway")
    except (pool.LedgerConnectionError, ValueError) as exc:
        log.error("gateway cannot start: %s", exc)
        return 1
    authorizer: Authorizer = _OpenAuthorizer()
    if settings.auth:
        authorizer = _ReviewAuthorizer(reviews.ResourceAuthorizer(kube_client.make_client()))
    else:
        log.warning(
            "%s=false: every namespace's charges are readable without a token",
            environment.Env.ENABLE_AUTH,
        )
    app = build(settings, lambda: ledger, authorizer)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(ledger.close)

    app.router.lifespan_context = lifespan
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())

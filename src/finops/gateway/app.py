"""The FinOps gateway: read-only JSON over the charge ledger, scoped per namespace.

Why its own process: tenants and dashboards read charges without any access to PostgreSQL.
Unlike the reference, authentication is on unless `ENABLE_AUTH` is exactly `false`: every
request's bearer token goes through TokenReview, then a SubjectAccessReview for `get` on
`subscriptions.finops.stakater.com` in the namespace asked about, so one tenant cannot read
another's charges. Money is integer micros, times RFC3339 UTC, windows half-open.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from finops.gateway import focus_export
from finops.kube import client as kube_client
from finops.kube import reviews
from finops.store import pool, reads

log = logging.getLogger(__name__)

PORT_ENV = "PORT"
DSN_ENV = "PG_CONNECTION_STRING"
AUTH_ENV = "ENABLE_AUTH"
ORIGINS_ENV = "ALLOWED_ORIGINS"
# Where to listen; every interface unless set (the sandbox binds loopback only).
HOST_ENV = "BIND_HOST"
DEFAULT_PORT = 8080
MAX_WINDOW = dt.timedelta(days=366)
GROUP = "finops.stakater.com"
RESOURCE = "subscriptions"


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
class Settings:
    """The gateway's environment, read once at start."""

    port: int
    dsn: str
    auth: bool
    origins: tuple[str, ...]
    cluster: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        dsn = env.get(DSN_ENV, "").strip()
        if not dsn:
            raise pool.LedgerConnectionError(f"{DSN_ENV} is not set; it must hold the DSN")
        raw_port = env.get(PORT_ENV, "").strip() or str(DEFAULT_PORT)
        try:
            port = int(raw_port)
        except ValueError:
            raise ValueError(f"{PORT_ENV} must be a port number, got {raw_port!r}") from None
        origins = tuple(o.strip() for o in env.get(ORIGINS_ENV, "").split(",") if o.strip())
        return cls(
            port=port,
            dsn=dsn,
            auth=env.get(AUTH_ENV) != "false",
            origins=origins,
            cluster=pool.cluster_id(env),
        )


class BadRequest(ValueError):
    """A query parameter the gateway refuses; the message goes back to the caller."""


def _instant(params: Mapping[str, str], key: str) -> dt.datetime:
    raw = params.get(key)
    if raw is None or not raw.strip():
        raise BadRequest(
            f"query parameter {key!r} is required (RFC3339, e.g. 2026-04-01T00:00:00Z)"
        )
    try:
        value = dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        raise BadRequest(f"{key!r} is not an RFC3339 time: {raw!r}") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise BadRequest(f"{key!r} must carry a UTC offset or Z: {raw!r}")
    try:
        return value.astimezone(dt.UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        raise BadRequest(f"{key!r} is out of range in UTC: {raw!r}") from None


def parse_window(params: Mapping[str, str]) -> tuple[dt.datetime, dt.datetime]:
    """[from, to) from the query: aware RFC3339, from before to, at most 366 days apart."""
    start, end = _instant(params, "from"), _instant(params, "to")
    if start >= end:
        raise BadRequest("'from' must be before 'to' (the window is [from, to))")
    if end - start > MAX_WINDOW:
        raise BadRequest(f"the window may span at most {MAX_WINDOW.days} days")
    return start, end


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_names(path_params: Mapping[str, str]) -> None:
    """Refuse a namespace or Subscription name Kubernetes could never have: no such rows exist,
    and such text (a NUL byte, say) must not reach the authoriser or the ledger query."""
    namespace = path_params.get("namespace", "")
    if not _DNS_LABEL.fullmatch(namespace):
        raise BadRequest(f"{namespace[:80]!r} is not a valid namespace name (RFC 1123 label)")
    name = path_params.get("name")
    if name is not None and (len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name)):
        raise BadRequest(f"{name[:80]!r} is not a valid Subscription name (RFC 1123 subdomain)")


def _rfc3339(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


_REFUSALS = {
    401: "a valid bearer token is required",
    403: "not allowed to get subscriptions.finops.stakater.com in this namespace",
    500: "cannot review the request with the Kubernetes API",
}


def _focus_handler(
    settings: Settings,
    ledger: Callable[[], pool.Pool],
    authorizer: Authorizer,
) -> Callable[[Request], Awaitable[Response]]:
    """FOCUS rows of one namespace (`/namespaces/{ns}/focus`) or of all (`/focus`), streamed;
    all namespaces needs the same permission cluster-wide (a review with no namespace)."""

    async def focus_rows(request: Request) -> Response:
        namespace: str | None = request.path_params.get("namespace")
        if namespace is not None:
            try:
                check_names(request.path_params)
            except BadRequest as exc:
                return _error(400, str(exc))
        verdict = await authorizer.check(request.headers.get("authorization"), namespace or "")
        if verdict != 200:
            refusal = _REFUSALS.get(verdict, "refused")
            if verdict == 403 and namespace is None:
                refusal = "not allowed to get subscriptions.finops.stakater.com cluster-wide"
            return _error(verdict, refusal)
        fmt = request.query_params.get("format", "csv")
        try:
            start, end = parse_window(request.query_params)
            media = focus_export.media_type(fmt)
        except ValueError as exc:
            return _error(400, str(exc))
        body = focus_export.stream(
            ledger, cluster=settings.cluster, namespace=namespace, start=start, end=end, fmt=fmt
        )
        try:
            head = await run_in_threadpool(next, body)
        except (focus_export.LedgerReadError, pool.PoolTimeout) as exc:
            reason = pool.redact(str(exc).strip() or type(exc).__name__, settings.dsn)
            log.error("ledger read failed at %s: %s", pool.describe(settings.dsn), reason)
            return _error(503, "the ledger is unavailable")
        name = focus_export.filename(namespace, start, end, fmt)
        return StreamingResponse(
            focus_export.prepend(head, body),
            media_type=media,
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    return focus_rows


Query = Callable[[pool.Connection, dt.datetime, dt.datetime], Any]
Guarded = Callable[[Request, Query], Awaitable[JSONResponse]]


def _guard(settings: Settings, ledger: Callable[[], pool.Pool], authorizer: Authorizer) -> Guarded:
    """Run a ledger query for an authorised caller's namespace and window; refusals, a bad
    window and an unavailable ledger become the matching error responses."""

    async def guarded(request: Request, query: Query) -> JSONResponse:
        namespace = request.path_params["namespace"]
        try:
            check_names(request.path_params)
        except BadRequest as exc:
            return _error(400, str(exc))
        verdict = await authorizer.check(request.headers.get("authorization"), namespace)
        if verdict != 200:
            return _error(verdict, _REFUSALS.get(verdict, "refused"))
        try:
            start, end = parse_window(request.query_params)
        except BadRequest as exc:
            return _error(400, str(exc))

        def run() -> Any:
            return pool.read(ledger(), settings.dsn, lambda conn: query(conn, start, end))

        try:
            body = await run_in_threadpool(run)
        except pool.LedgerUnavailable as exc:
            log.error("ledger read failed at %s: %s", pool.describe(settings.dsn), exc)
            return _error(503, "the ledger is unavailable")
        return JSONResponse({"from": _rfc3339(start), "to": _rfc3339(end), **body})

    return guarded


def _charge_item(r: reads.ChargeRow) -> dict[str, Any]:
    return {
        "subscriptionUid": r.subscription_uid,
        "hour": _rfc3339(r.hour),
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


def _middleware(settings: Settings) -> list[Middleware]:
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
    settings: Settings,
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
        ],
        middleware=_middleware(settings),
    )


def main() -> int:
    """Console entry `finops-gateway`: serve on `PORT` until stopped."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        settings = Settings.from_env()
        ledger = pool.open_pool(settings.dsn, apply_migrations=False, name="finops-gateway")
    except (pool.LedgerConnectionError, ValueError) as exc:
        log.error("gateway cannot start: %s", exc)
        return 1
    authorizer: Authorizer = _OpenAuthorizer()
    if settings.auth:
        authorizer = _ReviewAuthorizer(reviews.ResourceAuthorizer(kube_client.make_client()))
    else:
        log.warning("%s=false: every namespace's charges are readable without a token", AUTH_ENV)
    app = build(settings, lambda: ledger, authorizer)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(ledger.close)

    app.router.lifespan_context = lifespan
    host = os.environ.get(HOST_ENV, "").strip() or "0.0.0.0"
    uvicorn.run(app, host=host, port=settings.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())

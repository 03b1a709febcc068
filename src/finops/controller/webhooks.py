"""The two validating admission webhooks, served over TLS by every manager replica.

Why hand-rolled: the manager runs one event loop with no web framework (see `serving`), and
kopf's webhook server writes URL-style configurations of its own, whereas the chart ships a
`service`-style ValidatingWebhookConfiguration with cert-manager certificates.

- Decisions are `finops.hierarchy.admission`; this module only decodes the AdmissionReview,
  reads what a decision needs and encodes the verdict (403 with the verdict's reason and
  message on refusal).
- Every replica serves, leader or not: the API server calls any pod behind the Service. The
  reconcilers' watch caches live on the leader only, so the reads are direct, consistent
  LISTs (only Offering CREATE and DELETE read anything; they are rare).
- The certificate is re-read whenever its files change (cert-manager rotates the mounted
  Secret): each new connection's handshake uses the newest context (`serving.CertificateReloader`,
  shared with the metrics endpoint).
- Fail closed: anything unexpected answers `allowed: false` (or a bare HTTP error), and the
  configuration's `failurePolicy: Fail` turns that into a refusal.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import json
import logging
import pathlib
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import lightkube

from finops.api import bodies, models
from finops.controller import serving
from finops.hierarchy import admission
from finops.kube import client as kube_client
from finops.kube import resources

log = logging.getLogger(__name__)

OFFERING_PATH = "/validate-finops-stakater-com-v1alpha1-offering"
SUBSCRIPTION_PATH = "/validate-finops-stakater-com-v1alpha1-subscription"
DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # where the chart mounts the Secret
REVIEW_API_VERSION = "admission.k8s.io/v1"
LIST_CHUNK = 500
READ_TIMEOUT_SECONDS = 8.0  # under the API server's default 10 s webhook timeout
MAX_BODY_BYTES = 16 * 1024 * 1024  # object + oldObject, each up to etcd's 1.5 MiB, and then some
IDLE_SECONDS = 300.0  # longer than Go's 90 s idle timeout, so the client closes idle connections


class BadReviewError(ValueError):
    """The body is not an `admission.k8s.io/v1` AdmissionReview request we can answer."""


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """The parts of `AdmissionReview.request` the decisions use."""

    uid: str
    operation: str
    group: str
    resource: str
    namespace: str
    name: str
    object: Mapping[str, builtins.object] | None
    old_object: Mapping[str, builtins.object] | None


def parse_review(body: bytes) -> Request:
    """Decode an AdmissionReview; raise `BadReviewError` when it is anything else."""
    try:
        review = json.loads(body)
    except ValueError as exc:
        raise BadReviewError(f"body is not JSON: {exc}") from exc
    if not isinstance(review, dict):
        raise BadReviewError("body is not a JSON object")
    if review.get("apiVersion") != REVIEW_API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReviewError(
            f"expected a {REVIEW_API_VERSION} AdmissionReview, got "
            f"{review.get('apiVersion')!r} {review.get('kind')!r}"
        )
    req = review.get("request")
    if not isinstance(req, dict) or not req.get("uid"):
        raise BadReviewError("AdmissionReview has no request.uid")
    resource = req.get("resource")
    if not isinstance(resource, dict):
        resource = {}
    obj, old = req.get("object"), req.get("oldObject")
    return Request(
        uid=str(req["uid"]),
        operation=str(req.get("operation") or ""),
        group=str(resource.get("group") or ""),
        resource=str(resource.get("resource") or ""),
        namespace=str(req.get("namespace") or ""),
        name=str(req.get("name") or ""),
        object=obj if isinstance(obj, dict) else None,
        old_object=old if isinstance(old, dict) else None,
    )


def review_response(uid: str, verdict: admission.Verdict, code: int = 403) -> dict[str, Any]:
    """The AdmissionReview answer: `allowed`, and on refusal a Status with code, reason and the
    verdict's message (the API server prefixes it with the webhook's name for the client)."""
    response: dict[str, Any] = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {
            "status": "Failure",
            "code": code,
            "reason": verdict.reason,
            "message": verdict.message,
        }
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response}


def internal_error(uid: str, message: str) -> dict[str, Any]:
    """A refusal for a request we could not decide (fail closed)."""
    return review_response(uid, admission.Verdict(False, "InternalError", message), code=500)


class Reads(Protocol):
    """What the Offering decisions read: every stored Offering and Subscription."""

    async def offerings(self) -> list[bodies.OfferingBody]: ...

    async def subscriptions(self) -> list[bodies.SubscriptionBody]: ...


class ClusterReads:
    """Direct LISTs across all namespaces (quorum reads: nothing just created is missed)."""

    def __init__(self, client: lightkube.AsyncClient) -> None:
        self.client = client

    async def _list(self, res: Any) -> list[dict[str, object]]:
        listing = self.client.list(res, namespace=lightkube.ALL_NS, chunk_size=LIST_CHUNK)
        return [kube_client.to_dict(o) async for o in listing]

    async def offerings(self) -> list[bodies.OfferingBody]:
        return [bodies.as_offering(o) for o in await self._list(resources.Offering)]

    async def subscriptions(self) -> list[bodies.SubscriptionBody]:
        return [bodies.as_subscription(s) for s in await self._list(resources.Subscription)]


async def validate_offering(req: Request, reads: Reads) -> admission.Verdict:
    """CREATE: cycles; DELETE: dependents; anything else is admitted."""
    if req.operation == "CREATE":
        if req.object is None:
            raise BadReviewError("CREATE without request.object")
        existing = await reads.offerings()
        return admission.offering_create(
            bodies.as_offering(req.object), existing, namespace=req.namespace or None
        )
    if req.operation == "DELETE":
        stored = bodies.as_offering(
            req.old_object or {"metadata": {"name": req.name, "namespace": req.namespace}}
        )
        meta = stored.get("metadata") or {}
        if not meta.get("namespace"):
            stored = {**stored, "metadata": {**meta, "namespace": req.namespace}}
        subs, offs = await asyncio.gather(reads.subscriptions(), reads.offerings())
        return admission.offering_delete(stored, subs, offs)
    if req.operation == "UPDATE":
        return admission.offering_update()
    return admission.ALLOWED


async def validate_subscription(req: Request, reads: Reads) -> admission.Verdict:
    """CREATE: a Subscription naming itself; nothing else is registered or checked."""
    if req.operation != "CREATE":
        return admission.ALLOWED
    if req.object is None:
        raise BadReviewError("CREATE without request.object")
    return admission.subscription_create(
        bodies.as_subscription(req.object), namespace=req.namespace or None
    )


Validator = Callable[[Request, Reads], Awaitable[admission.Verdict]]
ROUTES: dict[str, tuple[str, Validator]] = {
    OFFERING_PATH: ("offerings", validate_offering),
    SUBSCRIPTION_PATH: ("subscriptions", validate_subscription),
}


async def handle_review(path: str, body: bytes, reads: Reads) -> tuple[int, dict[str, Any]]:
    """One POST: (HTTP status, JSON answer). Undecodable bodies get a 400 with no review."""
    if path not in ROUTES:
        return 404, {"error": f"no webhook at {path}"}
    try:
        req = parse_review(body)
    except BadReviewError as exc:
        return 400, {"error": str(exc)}
    resource, validate = ROUTES[path]
    if (req.group, req.resource) != (models.GROUP, resource):
        message = f"{path} validates {resource}.{models.GROUP}, not {req.resource}.{req.group}"
        return 200, internal_error(req.uid, message)
    try:
        verdict = await asyncio.wait_for(validate(req, reads), READ_TIMEOUT_SECONDS)
    except Exception as exc:  # fail closed on anything, timeouts included
        log.error(
            "admission failed; refusing",
            extra={"path": path, "operation": req.operation, "error": repr(exc)},
            exc_info=not isinstance(exc, (lightkube.ApiError, BadReviewError, TimeoutError)),
        )
        what = f"{req.operation} {req.resource} {req.namespace}/{req.name}"
        return 200, internal_error(req.uid, f"finops webhook could not validate {what}: {exc!r}")
    if not verdict.allowed:
        log.info(
            "admission refused",
            extra={
                "path": path,
                "operation": req.operation,
                "object": f"{req.namespace}/{req.name}",
                "reason": verdict.reason,
                "refusal": verdict.message,
            },
        )
    return 200, review_response(req.uid, verdict)


# ---------------------------------------------------------------- HTTP


_STATUS_TEXT = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
}


class StartError(RuntimeError):
    """The webhook server cannot start (no certificate, or the port is taken)."""


class WebhookServer:
    """HTTP/1.1 with keep-alive over TLS; POST only, on the two webhook paths."""

    def __init__(
        self, address: tuple[str, int], certs: serving.CertificateReloader, reads: Reads
    ) -> None:
        self.address = address
        self.certs = certs
        self.reads = reads
        self._server: asyncio.Server | None = None

    async def start(self) -> asyncio.Server:
        try:
            self.certs.check()
        except serving.CertificateError as exc:
            raise StartError(str(exc)) from exc
        try:
            self._server = await asyncio.start_server(self._connection, *self.address)
        except OSError as exc:
            raise StartError(f"webhook server cannot bind {self.address}: {exc}") from exc
        log.info(
            "serving webhooks",
            extra={"address": f"{self.address[0]}:{self.address[1]}", "paths": sorted(ROUTES)},
        )
        return self._server

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await writer.start_tls(self.certs.context(), ssl_handshake_timeout=10)
            while await self._exchange(reader, writer):
                pass
        except (TimeoutError, ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        except Exception as exc:  # one broken connection must not take the server down
            log.warning("webhook connection failed", extra={"error": repr(exc)})
        except asyncio.CancelledError:
            # Shutdown cancels idle keep-alive connections. End quietly: Python 3.11's stream
            # callback would report a cancelled handler as an error in the log.
            return
        finally:
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection should end."""
        line = await asyncio.wait_for(reader.readline(), timeout=IDLE_SECONDS)
        if not line:
            return False
        headers: dict[str, str] = {}
        while True:
            raw = await asyncio.wait_for(reader.readline(), timeout=10)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        parts = line.decode("latin-1").split()
        method = parts[0] if parts else ""
        path = parts[1].split("?", 1)[0] if len(parts) >= 2 else "/"
        keep_alive = headers.get("connection", "").lower() != "close"
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY_BYTES:
            await self._respond(writer, 413, {"error": "request too large"}, keep_alive=False)
            return False
        body = await asyncio.wait_for(reader.readexactly(length), timeout=10) if length else b""
        if method != "POST":
            code, answer = 405, {"error": "POST an AdmissionReview"}
        else:
            code, answer = await handle_review(path, body, self.reads)
        await self._respond(writer, code, answer, keep_alive=keep_alive)
        return keep_alive

    @staticmethod
    async def _respond(
        writer: asyncio.StreamWriter, code: int, answer: dict[str, Any], *, keep_alive: bool
    ) -> None:
        payload = json.dumps(answer).encode()
        head = (
            f"HTTP/1.1 {code} {_STATUS_TEXT.get(code, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        )
        writer.write(head.encode() + payload)
        await writer.drain()


def cert_files(cert_dir: str, cert_name: str, key_name: str) -> tuple[pathlib.Path, pathlib.Path]:
    """The `--webhook-cert-*` flags as file paths (an empty directory means the chart's)."""
    return serving.cert_files(cert_dir or DEFAULT_CERT_DIR, cert_name, key_name)


async def start(
    client: lightkube.AsyncClient,
    bind_address: str,
    cert_dir: str,
    cert_name: str,
    key_name: str,
) -> asyncio.Server | None:
    """Start serving both webhooks; None when the bind address disables them ("0").

    Raises `StartError` when the certificate cannot be loaded or the port bound.
    """
    address = serving.parse_bind_address(bind_address)
    if address is None:
        return None
    crt, key = cert_files(cert_dir, cert_name, key_name)
    server = WebhookServer(
        address, serving.CertificateReloader(crt, key, "webhook"), ClusterReads(client)
    )
    return await server.start()

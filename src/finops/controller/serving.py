"""Tiny HTTP endpoints: `/healthz`, `/readyz` and `/metrics`.

A hand-rolled asyncio server keeps the manager to one event loop and no web framework.
`--metrics-secure` (the default) serves metrics over TLS with a self-signed certificate made
at start, and only to callers the cluster authorises (TokenReview + SubjectAccessReview on
the non-resource URL `/metrics`), as the reference's filters do.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
import ssl
import tempfile
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Route = Callable[[], Awaitable[tuple[int, str, bytes]]]
Guard = Callable[[str | None, str], Awaitable[int]]
"""Given the `Authorization` header (or None) and the path, the status to answer: 200 lets
the route run; anything else is returned as is."""


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """`:8081` -> ("0.0.0.0", 8081); `127.0.0.1:9` -> as given; "0" or "" -> None (disabled)."""
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return (host or "0.0.0.0", int(port))


_REASONS = {
    200: "OK",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


async def serve(
    address: tuple[str, int],
    routes: dict[str, Route],
    ssl_context: ssl.SSLContext | None = None,
    guard: Guard | None = None,
) -> asyncio.Server:
    """Start a server answering GET on the given paths (behind `guard` when given)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = await asyncio.wait_for(reader.readline(), timeout=10)
            authorization: str | None = None
            while True:
                line = await asyncio.wait_for(reader.readline(), timeout=10)
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "authorization":
                    authorization = value.strip()
            parts = request_line.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else "/"
            route = routes.get(path)
            verdict = 200 if route is None or guard is None else await guard(authorization, path)
            if route is None:
                code, ctype, body = 404, "text/plain", b"not found\n"
            elif verdict != 200:
                code, ctype, body = verdict, "text/plain", f"{_REASONS.get(verdict, '')}\n".encode()
            else:
                code, ctype, body = await route()
            head = (
                f"HTTP/1.1 {code} {_REASONS.get(code, 'OK')}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, address[0], address[1], ssl=ssl_context)
    log.info("serving", extra={"address": f"{address[0]}:{address[1]}", "paths": sorted(routes)})
    return server


def self_signed_context() -> ssl.SSLContext:
    """A server TLS context with a fresh self-signed certificate (scrapers skip verification)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "finops-operator-metrics")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.NamedTemporaryFile(suffix=".pem") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
        fh.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        fh.flush()
        ctx.load_cert_chain(fh.name)
    return ctx

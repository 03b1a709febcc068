"""Tiny HTTP endpoints: `/healthz`, `/readyz` and `/metrics`, and the TLS they share.

A hand-rolled asyncio server keeps the manager to one event loop and no web framework.
`--metrics-secure` (the default) serves metrics over TLS, and only to callers the cluster
authorises (TokenReview + SubjectAccessReview on the non-resource URL `/metrics`), as the
reference's filters do. The certificate is the one under `--metrics-cert-path`, re-read when
its files change (`CertificateReloader`, also used by the webhooks), or else a self-signed
one made at start.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import logging
import os
import pathlib
import ssl
import tempfile
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Route = Callable[[], Awaitable[tuple[int, str, bytes]]]
TLS = Callable[[], ssl.SSLContext]
"""The context for the next handshake (a reloader's `context`, or a fixed one)."""
Guard = Callable[[str | None, str], Awaitable[int]]
"""Given the `Authorization` header (or None) and the path, the status to answer: 200 lets
the route run; anything else is returned as is."""


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """`:8081` -> ("0.0.0.0", 8081); `127.0.0.1:9` -> as given; "0" or "" -> None (disabled)."""
    if address in ("", "0"):
        return None
    host, _, port = address.rpartition(":")
    return (host.strip("[]") or "0.0.0.0", int(port))


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
    tls: TLS | None = None,
    guard: Guard | None = None,
) -> asyncio.Server:
    """Start a server answering GET on the given paths (over TLS and behind `guard` when given).

    With `tls`, every connection's handshake asks it for the context, so a rotated
    certificate is served from the next connection on.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if tls is not None:
                await writer.start_tls(tls(), ssl_handshake_timeout=10)
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

    server = await asyncio.start_server(handle, address[0], address[1])
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


class CertificateReloader:
    """A server SSLContext rebuilt whenever the certificate or key file changes.

    The change test is (inode, size, mtime) of each file as `stat` sees it through symlinks,
    which also catches the kubelet's atomic `..data` symlink swap. A failed reload (a rotation
    caught half-written) keeps serving the previous certificate and retries next time.
    """

    def __init__(self, cert_file: pathlib.Path, key_file: pathlib.Path, purpose: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.purpose = purpose  # "webhook" or "metrics", for the log lines
        self._stamp: tuple[tuple[int, int, int], ...] | None = None
        self._context: ssl.SSLContext | None = None

    def _stat(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.cert_file, self.key_file):
            st = os.stat(path)
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(self.cert_file), str(self.key_file))
        return ctx

    def context(self) -> ssl.SSLContext:
        """The newest loadable context; raises only if none has ever loaded."""
        try:
            stamp = self._stat()
            if stamp != self._stamp or self._context is None:
                self._context = self._load()
                if self._stamp is not None:
                    log.info(
                        f"{self.purpose} certificate reloaded", extra={"cert": str(self.cert_file)}
                    )
                self._stamp = stamp
        except (OSError, ssl.SSLError) as exc:
            if self._context is None:
                raise
            log.warning(
                f"{self.purpose} certificate reload failed; keeping the previous one",
                extra={"cert": str(self.cert_file), "error": str(exc)},
            )
        return self._context

    def check(self) -> None:
        """Load once at start; raise `CertificateError` naming both files when that fails."""
        try:
            self.context()
        except (OSError, ssl.SSLError) as exc:
            raise CertificateError(
                f"{self.purpose} certificate {self.cert_file} / {self.key_file} "
                f"cannot be loaded: {exc}"
            ) from exc


class CertificateError(RuntimeError):
    """A serving certificate given by flags cannot be loaded."""


def cert_files(directory: str, cert_name: str, key_name: str) -> tuple[pathlib.Path, pathlib.Path]:
    """A `--*-cert-path` directory and its `--*-cert-name`/`--*-cert-key` file names as paths."""
    base = pathlib.Path(directory)
    return base / (cert_name or "tls.crt"), base / (key_name or "tls.key")

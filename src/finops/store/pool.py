"""Connections to the ledger: configuration from the environment, errors without secrets.

Why a wrapper at all: a DSN usually carries a password, and connection errors end up in pod
logs and CostJob execution records. Every failure here is raised as `LedgerConnectionError`,
whose message names host, port, database and user, never the password (it is scrubbed from
the driver's text as well, and the driver's exception is not chained).
"""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias, TypeVar

import psycopg
import psycopg_pool
from psycopg import conninfo

from finops.api import environment
from finops.store import migrate

Connection: TypeAlias = psycopg.Connection[Any]
Pool: TypeAlias = psycopg_pool.ConnectionPool[Any]
BUSY: tuple[type[Exception], ...] = (psycopg_pool.PoolTimeout,)
"""What a read raises when the pool had no free connection in time (callers outside the store
catch these without importing the pool library)."""
T = TypeVar("T")

DEFAULT_CLUSTER = "default"

_REDACTED = "********"
_KV_PASSWORD = re.compile(r"password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s]+)", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]*)@")


class LedgerError(RuntimeError):
    """The ledger could not be used; the message is secret-free."""


class LedgerConnectionError(LedgerError):
    """The ledger database is misconfigured or cannot be reached (message is secret-free).

    `transient` is true when the server could not be reached or is still starting, so the
    same attempt may succeed later; false for a refusal (password, role, database name).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


STARTUP_WAIT_SECONDS = 45.0
"""How long the manager and the gateway wait at start for PostgreSQL to accept connections.

A fresh install starts them beside the bundled database, which takes tens of seconds to
come up; waiting (and saying so) beats a crash loop. It stays below the ~55 s after which
the chart's liveness probes restart a process that never started serving.
"""


_STARTING = (
    "the database system is starting up",
    "the database system is not yet accepting connections",
    "the database system is in recovery mode",
    "the database system is shutting down",
)


def transient(message: str) -> bool:
    """A connection failure worth retrying, from libpq's message (a failed connection has
    no SQLSTATE to read): the server never answered, or answered that it is starting,
    recovering or stopping. A refusal (password, role, database) is a server FATAL too."""
    return "FATAL:" not in message or any(state in message for state in _STARTING)


class LedgerUnavailable(LedgerError):
    """A statement or the pool failed; the driver's reason with the password scrubbed."""


def cluster_id(environ: Mapping[str, str] | None = None) -> str:
    """`CLUSTER_ID`, or `default` when unset or empty: stamped on every row we write."""
    env = os.environ if environ is None else environ
    return env.get(environment.Env.CLUSTER_ID, "") or DEFAULT_CLUSTER


def dsn_from_env(environ: Mapping[str, str] | None = None) -> str:
    """The DSN in `POSTGRES_CONNECTION_STRING`; a clear error when it is missing or empty."""
    env = os.environ if environ is None else environ
    dsn = env.get(environment.Env.POSTGRES_CONNECTION_STRING, "").strip()
    if not dsn:
        raise LedgerConnectionError(
            f"{environment.Env.POSTGRES_CONNECTION_STRING} is not set; "
            "it must hold the PostgreSQL DSN"
        )
    return dsn


def describe(dsn: str) -> str:
    """`user@host:port/dbname` for messages, never the password."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "an unparseable connection string"
    host = str(params.get("host") or params.get("hostaddr") or "localhost")
    port = str(params.get("port") or "5432")
    dbname = str(params.get("dbname") or params.get("user") or "")
    user = str(params.get("user") or "")
    who = f"{user}@" if user else ""
    return f"{who}{host}:{port}/{dbname}"


def redact(text: str, dsn: str) -> str:
    """`text` with every spelling of the DSN's password replaced by asterisks."""
    secrets: set[str] = set()
    try:
        password = conninfo.conninfo_to_dict(dsn).get("password")
        if password:
            secrets.add(str(password))
    except psycopg.Error:
        pass
    for match in _KV_PASSWORD.finditer(dsn):
        secrets.add(match.group(1))
        secrets.add(match.group(1).strip("'"))
    for match in _URI_PASSWORD.finditer(dsn):
        secrets.add(match.group(1))
    for secret in list(secrets):
        secrets.add(urllib.parse.unquote(secret))
        secrets.add(urllib.parse.quote(secret, safe=""))
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _REDACTED)
    return text


def _failure(dsn: str, what: str, exc: BaseException) -> LedgerConnectionError:
    reason = redact(str(exc).strip() or type(exc).__name__, dsn)
    again = isinstance(exc, psycopg.OperationalError) and transient(str(exc))
    return LedgerConnectionError(
        f"cannot {what} PostgreSQL at {describe(dsn)}: {reason}", transient=again
    )


def _check_dsn(dsn: str) -> None:
    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        reason = redact(str(exc).strip(), dsn)
        raise LedgerConnectionError(f"invalid PostgreSQL connection string: {reason}") from None


def connect(
    dsn: str, *, autocommit: bool = False, connect_timeout: int = 10
) -> psycopg.Connection[Any]:
    """One connection (jobs that need a single session), its session in UTC; errors never
    show the password."""
    _check_dsn(dsn)
    try:
        conn = psycopg.connect(dsn, autocommit=autocommit, connect_timeout=connect_timeout)
    except psycopg.Error as exc:
        raise _failure(dsn, "connect to", exc) from None
    try:
        in_utc(conn)
    except psycopg.Error as exc:
        conn.close()
        raise _failure(dsn, "set up a session on", exc) from None
    return conn


def in_utc(conn: psycopg.Connection[Any]) -> None:
    """Put the session in UTC, whatever `TimeZone` the server, the database or the role sets.

    The ledger's days and months are UTC ones, and PostgreSQL does calendar arithmetic on
    `timestamptz` (a month later, the months of a span) in the session's zone: in
    Europe/Berlin, a month after 1 March 00:00 UTC is 31 March 23:00 UTC. Statements that step
    by months say so themselves; this keeps any other one, and the migrations, from depending
    on how the server was set up."""
    conn.execute(b"SET TIME ZONE 'UTC'")
    if not conn.autocommit:
        conn.commit()


def wait_until_reachable(
    dsn: str,
    within: float = STARTUP_WAIT_SECONDS,
    *,
    on_retry: Callable[[LedgerConnectionError, float], None] = lambda exc, wait: None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Return once PostgreSQL at `dsn` accepts a connection; retry transient failures
    (reporting each through `on_retry` with the wait before the next try) for up to
    `within` seconds, then raise the last one. A refusal is raised at once."""
    deadline, delay = clock() + within, 1.0
    while True:
        try:
            connect(dsn, autocommit=True, connect_timeout=5).close()
            return
        except LedgerConnectionError as exc:
            left = deadline - clock()
            if not exc.transient or left <= 0:
                raise
            wait = min(delay, left)
            on_retry(exc, wait)
            sleep(wait)
            delay = min(delay * 2, 8.0)


def open_pool(
    dsn: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    min_size: int = 1,
    max_size: int = 4,
    connect_timeout: int = 10,
    apply_migrations: bool = True,
    name: str = "finops-ledger",
) -> psycopg_pool.ConnectionPool[Any]:
    """An open pool for `dsn` (default: `POSTGRES_CONNECTION_STRING`), migrations applied.

    One direct connection is made first so an unreachable server or a wrong password fails
    here with the server's reason, instead of as a pool timeout; that same connection applies
    any pending migrations (under the advisory lock) when `apply_migrations` is true.
    """
    target = dsn if dsn is not None else dsn_from_env(environ)
    with connect(target, autocommit=True, connect_timeout=connect_timeout) as conn:
        if apply_migrations:
            migrate.apply(conn)
    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        target,
        min_size=min_size,
        max_size=max_size,
        kwargs={"connect_timeout": connect_timeout},
        configure=in_utc,
        open=False,
        name=name,
        check=psycopg_pool.ConnectionPool.check_connection,
    )
    try:
        pool.open(wait=True, timeout=float(connect_timeout) * 2)
    except psycopg_pool.PoolTimeout as exc:
        pool.close()
        raise _failure(target, "open a connection pool to", exc) from None
    return pool


def read(ledger: Pool, dsn: str, query: Callable[[Connection], T]) -> T:
    """Run `query` on a pooled connection; any driver error or pool timeout is raised as
    `LedgerUnavailable` (the pool itself stays usable), so callers never see the driver."""
    try:
        with ledger.connection() as conn:
            return query(conn)
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        raise LedgerUnavailable(redact(str(exc).strip() or type(exc).__name__, dsn)) from None


class Session:
    """One lazily opened autocommit connection, used from worker threads one call at a time.

    A driver error closes it (the next call reconnects) and is raised as `LedgerUnavailable`;
    a failed connect raises `LedgerConnectionError`; both carry no secrets.
    """

    def __init__(self, dsn: str, *, connect_timeout: int = 5) -> None:
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[[Connection], T]) -> T:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect(
                        self.dsn, autocommit=True, connect_timeout=self.connect_timeout
                    )
                return fn(self._conn)
            except psycopg.Error as exc:
                self._close()
                raise LedgerUnavailable(redact(str(exc).strip(), self.dsn)) from None

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def close(self) -> None:
        with self._lock:
            self._close()

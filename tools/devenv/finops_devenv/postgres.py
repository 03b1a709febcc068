"""A throw-away PostgreSQL cluster: a temp dir, a free loopback port, gone when stopped.

Why: the ledger is tested against the real server, never a mock, and the local sandbox needs
a database too, so this module knows nothing about pytest. The server binaries are found by
globbing Debian's `/usr/lib/postgresql/<version>/bin` (newest first) unless `FINOPS_PG_BIN`
names a directory. PostgreSQL refuses to run as root, so when we are root every server
process runs as the `postgres` system user and the temp dir is handed to it.

Durability is switched off (`fsync`, `full_page_writes`, `synchronous_commit`): the data is
disposable and speed matters more. Each cluster has its own dir and port, so several test
sessions can run side by side on one machine.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import glob
import logging
import os
import pathlib
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping

import psycopg
from psycopg import conninfo, sql

from finops_devenv import ports

log = logging.getLogger(__name__)

SUPERUSER = "postgres"
"""Name of the bootstrap superuser, whoever runs the server."""

PASSWORD_ROLE = "finops_password_user"
"""A role that must authenticate with a password (everything else is trusted)."""

_SERVER_USER = "postgres"
_PORT_ATTEMPTS = 5


class PostgresError(RuntimeError):
    """The throw-away cluster could not be found, started or used."""


def _exit_on_sigterm() -> None:
    """Make SIGTERM end this process by `SystemExit` rather than kill it outright, unless
    something else already handles the signal (or this is not the main thread, where no
    handler can be set).

    Why: a SIGTERM (`kill`, `timeout`) skips `with` blocks and `atexit`, so a benchmark or a
    script stopped that way left its server running and its data directory, gigabytes for
    the ledger benchmarks, in the temp dir. Raised as `SystemExit`, the signal unwinds the
    stack and every cluster is stopped and removed on the way out."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _raise_exit)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def find_bin_dir() -> pathlib.Path:
    """Directory holding `initdb` and `postgres`: `FINOPS_PG_BIN`, else the newest Debian one."""
    override = os.environ.get("FINOPS_PG_BIN")
    candidates = [override] if override else _debian_bin_dirs()
    for candidate in candidates:
        path = pathlib.Path(candidate)
        if (path / "initdb").is_file() and (path / "postgres").is_file():
            return path
    where = override or "/usr/lib/postgresql/*/bin"
    raise PostgresError(
        f"no PostgreSQL server binaries (initdb, postgres) in {where}; install Debian's "
        "postgresql package or set FINOPS_PG_BIN"
    )


def _debian_bin_dirs() -> list[str]:
    """`/usr/lib/postgresql/<major>/bin`, highest major version first."""

    def major(path: str) -> int:
        match = re.search(r"/postgresql/(\d+)/bin$", path)
        return int(match.group(1)) if match else -1

    return sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=major, reverse=True)


@dataclasses.dataclass(frozen=True)
class _RunAs:
    """Who the server processes run as: ourselves, or `postgres` when we are root."""

    uid: int | None
    gid: int | None

    @classmethod
    def for_current_user(cls) -> _RunAs:
        if os.geteuid() != 0:
            return cls(None, None)
        try:
            entry = pwd.getpwnam(_SERVER_USER)
        except KeyError as exc:
            raise PostgresError(
                f"running as root needs a {_SERVER_USER!r} system user to own the server"
            ) from exc
        return cls(entry.pw_uid, entry.pw_gid)

    def chown(self, path: pathlib.Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)

    @property
    def extra_groups(self) -> list[int] | None:
        """No supplementary groups for the server when we switch user (root's stay behind)."""
        return None if self.uid is None else []


class PostgresCluster:
    """One initdb'd cluster listening on 127.0.0.1 and a unix socket in its own temp dir.

    Use as a context manager or call `start()`/`stop()`. `admin_dsn` connects as the
    superuser (trust auth); `password_dsn` connects as `PASSWORD_ROLE`, which must present
    `password` (scram-sha-256), so tests can prove a password never leaks into messages.
    """

    def __init__(
        self,
        bin_dir: pathlib.Path | None = None,
        *,
        base_dir: pathlib.Path | None = None,
        start_timeout: float = 60.0,
        remote: tuple[str, str] | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """`remote` = (address, client CIDR): also listen on `address` and let clients from
        the CIDR in as `PASSWORD_ROLE` with its password (how pods reach a database that
        runs outside their cluster); loopback only by default. `settings`: server settings
        added to (or replacing) the defaults, e.g. `{"shared_buffers": "1GB"}` for a benchmark
        that measures the ledger on a server configured otherwise."""
        self.bin_dir = bin_dir or find_bin_dir()
        self.remote = remote
        self.settings = dict(settings or {})
        self.start_timeout = start_timeout
        self.password = secrets.token_urlsafe(18)
        self.port = 0
        self._base_parent = base_dir
        self._run_as = _RunAs.for_current_user()
        self._dir: pathlib.Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- paths and DSNs ---------------------------------------------------------------------

    @property
    def dir(self) -> pathlib.Path:
        if self._dir is None:
            raise PostgresError("the cluster has not been started")
        return self._dir

    @property
    def data_dir(self) -> pathlib.Path:
        return self.dir / "data"

    @property
    def socket_dir(self) -> pathlib.Path:
        return self.dir / "socket"

    @property
    def log_file(self) -> pathlib.Path:
        return self.dir / "postgres.log"

    def dsn(self, dbname: str = "postgres", *, user: str = SUPERUSER, **extra: str) -> str:
        """A libpq key/value DSN for `dbname` over TCP on loopback."""
        params: dict[str, str | int | None] = {
            "host": "127.0.0.1",
            "port": self.port,
            "user": user,
            "dbname": dbname,
            **extra,
        }
        return conninfo.make_conninfo("", **params)

    @property
    def admin_dsn(self) -> str:
        return self.dsn()

    def password_dsn(self, dbname: str = "postgres", *, password: str | None = None) -> str:
        """DSN for `PASSWORD_ROLE`; pass another `password` to make authentication fail."""
        return self.dsn(
            dbname, user=PASSWORD_ROLE, password=self.password if password is None else password
        )

    def remote_dsn(self, dbname: str) -> str:
        """DSN for `PASSWORD_ROLE` at the `remote` address, as a client elsewhere uses it."""
        if self.remote is None:
            raise PostgresError("the cluster listens on loopback only (no `remote` address)")
        return self.dsn(dbname, user=PASSWORD_ROLE, password=self.password, host=self.remote[0])

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> PostgresCluster:
        """initdb, start the server on a free port, create the password role; stop on failure."""
        if self._proc is not None:
            return self
        try:
            self._dir = pathlib.Path(tempfile.mkdtemp(prefix="finops-pg-", dir=self._base_parent))
            self._run_as.chown(self._dir)
            self.socket_dir.mkdir()
            self._run_as.chown(self.socket_dir)
            self._initdb()
            self._start_server()
            self._create_password_role()
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)
        _exit_on_sigterm()
        return self

    def stop(self) -> None:
        """Fast shutdown of the server we started, then remove the temp dir. Idempotent."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # "fast" shutdown: abort sessions, checkpoint
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGQUIT)  # "immediate" shutdown
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _run(self, args: list[str]) -> None:
        done = subprocess.run(
            args,
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            user=self._run_as.uid,
            group=self._run_as.gid,
            extra_groups=self._run_as.extra_groups,
        )
        if done.returncode != 0:
            output = done.stdout.decode(errors="replace").strip()
            raise PostgresError(f"{args[0]} failed ({done.returncode}): {output}")

    def _initdb(self) -> None:
        self._run(
            [
                str(self.bin_dir / "initdb"),
                "--pgdata",
                str(self.data_dir),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--locale",
                "C",
                "--no-sync",
            ]
        )
        hba = (
            "# written by finops_devenv.postgres: one password role, everything else trusted\n"
            f"local all {PASSWORD_ROLE} scram-sha-256\n"
            f"host  all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n"
            "local all all trust\n"
            "host  all all 127.0.0.1/32 trust\n"
        )
        if self.remote is not None:
            hba += f"host  all {PASSWORD_ROLE} {self.remote[1]} scram-sha-256\n"
        (self.data_dir / "pg_hba.conf").write_text(hba)

    def _server_args(self) -> list[str]:
        settings = {
            "listen_addresses": ",".join(["127.0.0.1", *([self.remote[0]] if self.remote else [])]),
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "fsync": "off",
            "full_page_writes": "off",
            "synchronous_commit": "off",
            "max_connections": "200",
            "password_encryption": "scram-sha-256",
            "log_min_messages": "warning",
            **self.settings,
        }
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        return args

    def stop_server(self) -> None:
        """Fast shutdown (every session is cut), keeping the data and the port, so that
        `start_server` brings the same cluster back: how fault tests restart PostgreSQL."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)

    def start_server(self) -> None:
        """Start a cluster stopped by `stop_server` again, on the same port."""
        if self.running:
            return
        self._spawn()
        if not self._wait_ready():
            raise PostgresError(f"PostgreSQL did not restart; last log lines:\n{self._log_tail()}")

    def _spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log_file, "ab") as log_out:
            self._proc = subprocess.Popen(
                self._server_args(),
                stdin=subprocess.DEVNULL,
                stdout=log_out,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
                user=self._run_as.uid,
                group=self._run_as.gid,
                extra_groups=self._run_as.extra_groups,
            )
        return self._proc

    def _start_server(self) -> None:
        """Pick a free port and start; another process may grab it first, so retry."""
        last_error = ""
        for _ in range(_PORT_ATTEMPTS):
            self.port = ports.free_port()
            proc = self._spawn()
            if self._wait_ready():
                log.info("PostgreSQL ready on 127.0.0.1:%s (%s)", self.port, self.dir)
                return
            last_error = self._log_tail()
            if proc.poll() is None:  # alive but never answered: give up
                break
            self._proc = None
        raise PostgresError(f"PostgreSQL did not start; last log lines:\n{last_error}")

    def _wait_ready(self) -> bool:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with psycopg.connect(self.admin_dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        return False

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _create_password_role(self) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN CREATEDB PASSWORD {}").format(
                    sql.Identifier(PASSWORD_ROLE), sql.Literal(self.password)
                )
            )

    # -- databases --------------------------------------------------------------------------

    def create_database(
        self, name: str | None = None, *, template: str | None = None, owner: str | None = None
    ) -> str:
        """Create a database (a fresh unique name by default) and return its admin DSN."""
        name = name or f"t_{uuid.uuid4().hex[:16]}"
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query += sql.SQL(" TEMPLATE {} STRATEGY = FILE_COPY").format(sql.Identifier(template))
        if owner:
            query += sql.SQL(" OWNER {}").format(sql.Identifier(owner))
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(query)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """Drop a database even if sessions are still connected to it."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextlib.contextmanager
def running(bin_dir: pathlib.Path | None = None) -> Iterator[PostgresCluster]:
    """A started cluster for the duration of the block."""
    with PostgresCluster(bin_dir) as cluster:
        yield cluster

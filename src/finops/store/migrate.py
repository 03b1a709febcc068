"""Numbered SQL migrations, applied by whichever process connects first.

Why an advisory lock: the controller and every job pod may start at the same moment against
one database. A session-level advisory lock serialises them, so the second process waits,
then finds nothing left to do. Each migration runs in its own transaction together with its
`schema_migrations` row, so a failing file leaves no trace and is retried next time.

Files are `NNNN_name.sql`, shipped in `finops/store/migrations/`; `FINOPS_MIGRATION_DIR`
points elsewhere (handy outside the image). Run `python -m finops.store.migrate` to apply
them with the DSN from `POSTGRES_CONNECTION_STRING`.

Online migrations. Work that must not hold a lock on a busy table for long (copying a large
table in batches, `CREATE INDEX CONCURRENTLY`) cannot run inside one transaction. A file whose
first line is `-- finops:online` is applied outside a transaction as a list of steps separated
by lines `-- finops:step`: each step is sent on its own (several statements in one step share
one transaction; a step may hold one statement PostgreSQL refuses inside a transaction), and
a step that opens with `-- finops:step each` is a query whose rows are statements, run one
after the other, each in its own transaction (how a step loops over partitions or batches).
The file is recorded as applied after its last step. Interrupted, it starts again from its
first step on the next run, so every step must be safe to repeat. Other processes wait on
the advisory lock meanwhile, as for any migration; writers already connected go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.resources
import itertools
import json
import logging
import os
import pathlib
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from importlib.resources.abc import Traversable
from typing import Any

import psycopg
from psycopg import pq

from finops.api import environment

log = logging.getLogger(__name__)

LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"finops.schema_migrations").digest()[:8], "big", signed=True
)
"""The advisory lock every migrating process takes (one 64-bit key, fixed forever)."""

_FILE_NAME = re.compile(r"^(\d{4})_([A-Za-z0-9_]+)\.sql$")
ONLINE_MARK = "-- finops:online"
STEP_MARK = "-- finops:step"
EACH_MARK = "-- finops:step each"

_CREATE_TABLE = b"""
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


class MigrationError(RuntimeError):
    """A migration file is malformed, was edited after it ran, or failed to apply."""


@dataclasses.dataclass(frozen=True)
class Migration:
    """One numbered SQL file; `checksum` detects edits to a file that already ran."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def filename(self) -> str:
        return f"{self.version:04d}_{self.name}.sql"

    @property
    def online(self) -> bool:
        """Applied step by step outside a transaction (see the module's docstring)."""
        return self.sql.startswith(ONLINE_MARK)

    def steps(self) -> list[MigrationStep]:
        """The steps of an online migration, in order (empty ones dropped)."""
        found: list[MigrationStep] = []
        kind_each = False
        lines: list[str] = []
        for line in [*self.sql.splitlines(), STEP_MARK]:
            if line.rstrip() in (STEP_MARK, EACH_MARK):
                text = "\n".join(lines).strip()
                if any(ln.strip() and not ln.lstrip().startswith("--") for ln in lines):
                    found.append(MigrationStep(text, each=kind_each))
                kind_each = line.rstrip() == EACH_MARK
                lines = []
            else:
                lines.append(line)
        return found


@dataclasses.dataclass(frozen=True)
class MigrationStep:
    """One step of an online migration: SQL sent as it is, or (`each`) a query whose rows are
    the statements to run."""

    sql: str
    each: bool = False


def migration_dir(environ: Mapping[str, str] | None = None) -> Traversable:
    """`FINOPS_MIGRATION_DIR` when set and non-empty, else the files shipped in the package."""
    env = os.environ if environ is None else environ
    override = env.get(environment.Env.FINOPS_MIGRATION_DIR, "")
    if override:
        return pathlib.Path(override)
    return importlib.resources.files("finops.store") / "migrations"


def load(directory: Traversable | None = None) -> list[Migration]:
    """Every `NNNN_name.sql` in `directory`, ordered by number; other `.sql` names are errors."""
    source = migration_dir() if directory is None else directory
    if not source.is_dir():
        raise MigrationError(f"migration directory {source} does not exist")
    found: dict[int, Migration] = {}
    for entry in source.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_NAME.match(entry.name)
        if match is None:
            raise MigrationError(f"{entry.name}: migration files are named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(
                f"{entry.name} and {found[version].filename} share number {version:04d}"
            )
        found[version] = Migration(version, match.group(2), entry.read_text(encoding="utf-8"))
    return [found[v] for v in sorted(found)]


def apply(
    conn: psycopg.Connection[Any], migrations: Sequence[Migration] | None = None
) -> list[Migration]:
    """Apply every pending migration in order and return the ones this call applied.

    The connection must not be inside a transaction: each migration commits on its own.
    Re-running is a no-op. A migration that fails is rolled back whole and raised as
    `MigrationError`; the ones before it stay applied.
    """
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        raise MigrationError("migrations need a connection that is not inside a transaction")
    pending_source = load() if migrations is None else list(migrations)
    applied_now: list[Migration] = []
    _lock(conn)
    try:
        _execute_committed(conn, _CREATE_TABLE)
        done = _applied(conn)
        for migration in pending_source:
            recorded = done.get(migration.version)
            if recorded is not None:
                if recorded != migration.checksum:
                    raise MigrationError(
                        f"{migration.filename} changed after it was applied; add a new "
                        "migration instead of editing one"
                    )
                continue
            _apply_one(conn, migration)
            applied_now.append(migration)
    finally:
        if not conn.closed:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.rollback()
            _execute_committed(conn, b"SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return applied_now


def _lock(conn: psycopg.Connection[Any]) -> None:
    """Take the advisory lock, asking again until granted. Why not `pg_advisory_lock`: a
    process blocked in it holds a snapshot, and `CREATE INDEX CONCURRENTLY` in the holder's
    online migration waits for every older snapshot to end: the two would wait for each other."""
    delay = 0.05
    # Each try a statement of its own: no transaction (so no snapshot) spans the sleeps, and
    # the try stays the session's last statement, which is what pg_stat_activity shows of a
    # process waiting here.
    with _autocommit(conn):
        for tries in itertools.count():
            row = conn.execute(b"SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
            if row is not None and row[0]:
                return
            if tries == 0:
                log.info("waiting for another process's schema migrations to finish")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


@contextlib.contextmanager
def _autocommit(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """Autocommit for the block, the connection's own mode after it."""
    was_autocommit = conn.autocommit
    conn.autocommit = True
    try:
        yield
    finally:
        conn.autocommit = was_autocommit


def _applied(conn: psycopg.Connection[Any]) -> dict[int, str]:
    # In its own block: an implicit transaction left open here would turn every migration
    # after it into a savepoint of that transaction.
    with conn.transaction():
        rows = conn.execute("SELECT version, checksum FROM schema_migrations").fetchall()
    result: dict[int, str] = {}
    for row in rows:
        version, checksum = row
        result[int(version)] = str(checksum)
    return result


def _execute_committed(
    conn: psycopg.Connection[Any], query: bytes, params: tuple[object, ...] | None = None
) -> None:
    """Run one statement in its own transaction (works with and without autocommit)."""
    with conn.transaction():
        conn.execute(query, params)


def _apply_one(conn: psycopg.Connection[Any], migration: Migration) -> None:
    if migration.online:
        _apply_online(conn, migration)
        return
    try:
        with conn.transaction():
            # No parameters: psycopg sends the file as one simple query, so a file may hold
            # many statements and `%` needs no escaping.
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (migration.version, migration.name, migration.checksum),
            )
    except psycopg.Error as exc:
        raise MigrationError(f"{migration.filename} failed and was rolled back: {exc}") from exc


def _apply_online(conn: psycopg.Connection[Any], migration: Migration) -> None:
    """Run each step in autocommit, then record the file; a failing step stops the file."""
    with _autocommit(conn):
        for number, step in enumerate(migration.steps(), start=1):
            try:
                _run_step(conn, step)
            except psycopg.Error as exc:
                raise MigrationError(
                    f"{migration.filename} stopped at step {number} (it starts again from its "
                    f"first step next time): {exc}"
                ) from exc
        conn.execute(
            "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
            (migration.version, migration.name, migration.checksum),
        )


def _run_step(conn: psycopg.Connection[Any], step: MigrationStep) -> None:
    if not step.each:
        conn.execute(step.sql.encode())
        return
    statements = [str(row[0]) for row in conn.execute(step.sql.encode()).fetchall()]
    for statement in statements:
        conn.execute(statement.encode())


def main(argv: Sequence[str] | None = None) -> int:
    """Apply pending migrations to `POSTGRES_CONNECTION_STRING`; print what ran as JSON."""
    from finops.store import pool

    del argv
    try:
        with pool.connect(pool.dsn_from_env()) as conn:
            ran = apply(conn)
    except (pool.LedgerConnectionError, MigrationError) as exc:
        print(f"finops migrate: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"applied": [m.version for m in ran]}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""A unit of work for the ledger: a transaction that rolls back unless it is committed.

Why: a job that writes several statements must leave the ledger either fully updated or
untouched. With psycopg's own `conn.transaction()` leaving the block commits; here leaving it
commits only when the caller said `commit()`, so a forgotten commit or an early return can
never publish half a write. Callers outside `finops.store` hold a `pool.Connection` (an alias, so
they never import the driver) and pass it to the store's functions.

Jobs open one `session`: an autocommit connection with the migrations applied, on which each
`begin()` block is a real transaction (on a non-autocommit connection it would only be a
savepoint) and every read outside a block sees committed data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg

from finops.store import migrate, pool


class UnitOfWork:
    """The statements of one `begin()` block; `commit()` keeps them when the block ends."""

    def __init__(self, conn: pool.Connection) -> None:
        self.conn = conn
        self.committed = False

    def commit(self) -> None:
        """Keep this block's writes (they are committed when the block ends normally)."""
        self.committed = True


@contextlib.contextmanager
def begin(conn: pool.Connection) -> Iterator[UnitOfWork]:
    """One transaction on `conn`: committed at the end of the block only after `commit()`;
    rolled back on an exception or when the block ends without `commit()`."""
    with conn.transaction() as tx:
        work = UnitOfWork(conn)
        yield work
        if not work.committed:
            raise psycopg.Rollback(tx)


def connect(dsn: str, *, connect_timeout: int = 10) -> pool.Connection:
    """An autocommit connection (the caller closes it); errors reaching the server raise
    `pool.LedgerConnectionError` without the password."""
    return pool.connect(dsn, autocommit=True, connect_timeout=connect_timeout)


@contextlib.contextmanager
def session(dsn: str, *, connect_timeout: int = 10) -> Iterator[pool.Connection]:
    """An autocommit connection for one job run, migrations applied; closed at the end."""
    with connect(dsn, connect_timeout=connect_timeout) as conn:
        migrate.apply(conn)
        yield conn


@contextlib.contextmanager
def planned_afresh(conn: pool.Connection) -> Iterator[None]:
    """The block's statements planned for the values they are run with, without JIT
    compilation; the session's settings restored after.

    Why: the charge run's statements are planned for tens of thousands of rows. That crosses
    the JIT cost thresholds, and compiling them cost more than running them (a second of the
    10k Subscriptions' watermark statement). And their plans depend on their parameters (how
    many Subscriptions, which hours): a statement psycopg prepares on the server (from its
    sixth execution on one connection) is soon given a generic plan that ignores them, and on
    a connection that ran the charge run ten times the watermarks and the read-back went from
    0.6 s and 0.3 s to more than 20 s each. So nothing in the block is prepared."""
    row = conn.execute(b"SELECT current_setting('jit')").fetchone()
    before = "on" if row is None else str(row[0])
    threshold = conn.prepare_threshold
    conn.execute(b"SELECT set_config('jit', 'off', false)")
    conn.prepare_threshold = None
    try:
        yield
    finally:
        conn.prepare_threshold = threshold
        idle = conn.info.transaction_status is psycopg.pq.TransactionStatus.IDLE
        if not conn.closed and idle:
            conn.execute(b"SELECT set_config('jit', %s, false)", (before,))

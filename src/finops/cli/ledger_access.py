"""What the commands that read the ledger share: the `--dsn` and `--cluster` arguments, a
file written whole or not at all, and one line on stderr for whatever went wrong."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator

from finops.api import environment
from finops.store import focus as focus_store
from finops.store import pool

FAILURES = (pool.LedgerConnectionError, focus_store.LedgerReadError, OSError)
"""What a command reports in one line (with its own refusals) instead of a traceback."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`--dsn` (default `$POSTGRES_CONNECTION_STRING`) and `--cluster` (default `$CLUSTER_ID`)."""
    p.add_argument(
        "--dsn",
        default=os.environ.get(environment.Env.POSTGRES_CONNECTION_STRING),
        help="PostgreSQL DSN of the ledger "
        f"(default: ${environment.Env.POSTGRES_CONNECTION_STRING})",
    )
    p.add_argument(
        "--cluster",
        default=pool.cluster_id(),
        help="the cluster id the charges were written under "
        f"(default: ${environment.Env.CLUSTER_ID} "
        f"or {pool.DEFAULT_CLUSTER})",
    )


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
    """Yields `<path>.partial` to write; it becomes `path` only when the block ends without
    an error, so a failed write never leaves a truncated file where a whole one is expected."""
    partial = f"{path}.partial"
    try:
        yield partial
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)


def fail(command: str, exc: BaseException, args: argparse.Namespace) -> int:
    """Print `finops COMMAND: reason` (the DSN's password never in it); exit status 1."""
    if isinstance(exc, OSError):
        reason = f"cannot write {args.out}: {exc.strerror}"
    elif isinstance(exc, pool.LedgerConnectionError | focus_store.LedgerReadError):
        reason = " ".join(pool.redact(str(exc), args.dsn or "").split())
    else:
        reason = str(exc)
    print(f"finops {command}: {reason}", file=sys.stderr)
    return 1

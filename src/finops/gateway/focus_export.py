"""The gateway's FOCUS export: ledger charges streamed as FOCUS 1.2 CSV or JSON.

Why streamed: a month of a large cluster does not fit in a response buffer. The first row is
read before the response starts, so an unreachable ledger is still a clean 503; a failure
after that ends the body early and is logged.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

from finops.billing import focus
from finops.store import focus as focus_store
from finops.store import focus_csv, pool

log = logging.getLogger(__name__)
T = TypeVar("T")

FORMATS = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def media_type(fmt: str) -> str:
    """The Content-Type for `format=`; ValueError names the formats there are."""
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"'format' must be one of {', '.join(FORMATS)}, got {fmt!r}") from None


def include_unsettled(raw: str | None) -> bool:
    """`includeUnsettled=`: absent or `false` is the settled rows only, `true` adds the hours
    in progress; anything else is refused by name."""
    if raw in (None, "", "false"):
        return False
    if raw == "true":
        return True
    raise ValueError(f"'includeUnsettled' must be true or false, got {raw!r}")


def filename(namespace: str | None, start: dt.datetime, end: dt.datetime, fmt: str) -> str:
    """`focus-<namespace|all>-<from>-<to>.<fmt>`, safe in a Content-Disposition header."""
    stamp = "%Y%m%dT%H%M%SZ"
    return f"focus-{namespace or 'all'}-{start.strftime(stamp)}-{end.strftime(stamp)}.{fmt}"


def stream(
    ledger: Callable[[], pool.Pool],
    *,
    cluster: str,
    namespace: str | None,
    start: dt.datetime,
    end: dt.datetime,
    fmt: str,
    include_unsettled: bool = False,
) -> Iterator[bytes]:
    """Pieces of the body; the query runs on the first `next()` (call that before replying)."""
    with ledger().connection() as conn:
        if fmt == "csv":
            export = focus_csv.CsvExport(
                conn,
                cluster=cluster,
                start=start,
                end=end,
                namespace=namespace,
                include_unsettled=include_unsettled,
            )
            try:
                yield from export.lines()
            except focus_store.LedgerReadError as exc:
                if export.rows == 0:
                    raise
                log.error("FOCUS export stopped midway: %s", exc)
            return
        index = focus_store.period_index(conn, cluster=cluster)
        charges = focus_store.charges(
            conn,
            cluster=cluster,
            namespace=namespace,
            start=start,
            end=end,
            include_unsettled=include_unsettled,
        )
        first = next(charges, None)
        rows = (focus.row(c, index=index) for c in _chain(first, charges))
        try:
            yield from (p.encode() for p in _pieces(focus.json_chunks(rows)))
        except focus_store.LedgerReadError as exc:
            log.error("FOCUS export stopped midway: %s", exc)


PIECE = 1 << 16
"""About how many characters of the body go out at once."""


def _pieces(chunks: Iterator[str]) -> Iterator[str]:
    """Rows joined into pieces of about `PIECE` characters. Why: the server takes each piece
    of a streamed body from a worker thread, and one hop per row cost three times the rows'
    own formatting."""
    held: list[str] = []
    size = 0
    for chunk in chunks:
        held.append(chunk)
        size += len(chunk)
        if size >= PIECE:
            yield "".join(held)
            held, size = [], 0
    if held:
        yield "".join(held)


def prepend(head: T, rest: Iterator[T]) -> Iterator[T]:
    """The chunk already read to check the ledger, then the rest of the body."""
    yield head
    yield from rest


def _chain(
    first: focus.LedgerCharge | None, rest: Iterator[focus.LedgerCharge]
) -> Iterator[focus.LedgerCharge]:
    if first is None:
        return
    yield first
    yield from rest

"""`finops export focus`: the ledger's charges as a FOCUS 1.2 file for spreadsheets and BI tools.

Rows stream from the database to the file, so a month of a large cluster never sits in memory.
CSV goes to stdout or `--out x.csv`; `--out x.parquet` needs the optional `parquet` extra
(pyarrow).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import sys
from collections.abc import Iterator
from typing import IO, Any

from finops.api import environment
from finops.billing import focus, ticks
from finops.cli import ledger_access, refusal
from finops.store import focus as focus_store
from finops.store import focus_csv, pool

PARQUET_BATCH = 10_000


def register(sub: Any) -> None:
    """Add `export` with its one format, `focus`."""
    export: argparse.ArgumentParser = sub.add_parser(
        "export", help="write the ledger's charges in a standard format"
    )
    formats = export.add_subparsers(dest="format", metavar="FORMAT", required=True)
    p: argparse.ArgumentParser = formats.add_parser(
        "focus",
        help=f"FinOps Foundation FOCUS {focus.FOCUS_VERSION} rows (CSV, or Parquet)",
        description=f"Write every settled charge over hours in [--from, --to), and the "
        "corrections booked in billing periods starting in that window, as FOCUS "
        f"{focus.FOCUS_VERSION} rows: CSV to stdout or --out FILE.csv, Parquet to "
        "--out FILE.parquet (needs the 'parquet' extra). Times are RFC 3339 with a UTC offset.",
    )
    ledger_access.add_arguments(p)
    p.add_argument("--from", dest="window_from", required=True, metavar="T", help="first instant")
    p.add_argument("--to", dest="window_to", required=True, metavar="T", help="end (exclusive)")
    p.add_argument("--out", metavar="FILE", help="FILE.csv or FILE.parquet (default: stdout)")
    p.add_argument("--namespace", help="only this namespace's charges")
    p.add_argument(
        "--include-unsettled",
        action="store_true",
        help="also the hours still in progress (x_Finalized=false; they may change)",
    )
    p.add_argument(
        "--provider-name",
        default=focus.DEFAULT_PROVIDER,
        help=f"ProviderName, PublisherName and InvoiceIssuerName (default: "
        f"{focus.DEFAULT_PROVIDER!r})",
    )
    p.set_defaults(run=run)


def _time(flag: str, value: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise refusal.Refused(
            f"{flag} {value!r} is not an RFC 3339 time such as 2026-04-01T00:00:00Z"
        ) from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise refusal.Refused(f"{flag} {value!r} has no UTC offset; end it with Z")
    return ticks.utc(parsed)


def _kind(out: str | None) -> str:
    if out is None or out == "-" or out.lower().endswith(".csv"):
        return "csv"
    if out.lower().endswith(".parquet"):
        return "parquet"
    raise refusal.Refused(f"--out {out!r} must end in .csv or .parquet")


def _rows(
    args: argparse.Namespace, conn: Any, start: dt.datetime, end: dt.datetime
) -> Iterator[dict[str, focus.Value]]:
    index = focus_store.period_index(conn, cluster=args.cluster)
    charges = focus_store.charges(
        conn,
        cluster=args.cluster,
        namespace=args.namespace,
        start=start,
        end=end,
        include_unsettled=args.include_unsettled,
    )
    return (focus.row(c, args.provider_name, index) for c in charges)


def _write_csv(
    args: argparse.Namespace, conn: Any, start: dt.datetime, end: dt.datetime, out: IO[bytes]
) -> int:
    export = focus_csv.CsvExport(
        conn,
        cluster=args.cluster,
        start=start,
        end=end,
        namespace=args.namespace,
        include_unsettled=args.include_unsettled,
        provider=args.provider_name,
    )
    for piece in export.lines():
        out.write(piece)
    return export.rows


def _write(args: argparse.Namespace, start: dt.datetime, end: dt.datetime) -> int:
    """Stream the rows to stdout, or to `--out` by way of `<out>.partial` so a failed
    export never leaves a truncated file where a finished one is expected."""
    writer = _parquet_writer() if _kind(args.out) == "parquet" else None
    with contextlib.closing(pool.connect(args.dsn)) as conn:
        if args.out in (None, "-"):
            sys.stdout.flush()
            count = _write_csv(args, conn, start, end, sys.stdout.buffer)
            sys.stdout.buffer.flush()
            return count
        with ledger_access.replacing(args.out) as partial:
            if writer is not None:
                count = writer(_rows(args, conn, start, end), partial)
            else:
                with open(partial, "wb") as out:
                    count = _write_csv(args, conn, start, end, out)
    return int(count)


def run(args: argparse.Namespace) -> int:
    """Write the file; exit 1 with one line on stderr when anything is refused or fails."""
    try:
        start, end = _time("--from", args.window_from), _time("--to", args.window_to)
        if start >= end:
            raise refusal.Refused("--from must be before --to (the window is [from, to))")
        if not args.dsn:
            raise refusal.Refused(
                f"--dsn is required (or set {environment.Env.POSTGRES_CONNECTION_STRING})"
            )
        count = _write(args, start, end)
    except (refusal.Refused, *ledger_access.FAILURES) as exc:
        return ledger_access.fail("export focus", exc, args)
    if args.out not in (None, "-"):
        print(f"wrote {count} FOCUS {focus.FOCUS_VERSION} rows to {args.out}", file=sys.stderr)
    return 0


def _parquet_writer() -> Any:
    """The Parquet writer, or a clear refusal when the optional pyarrow is not installed."""
    try:
        from finops.cli import focus_parquet
    except ImportError:
        raise refusal.Refused(
            "writing .parquet needs pyarrow: pip install 'finops-operator[parquet]' (or write .csv)"
        ) from None
    return focus_parquet.write

"""`finops statement`: a tenant namespace's statement for a closed billing period, as JSON,
CSV or a printable HTML page, or the list of statements there are.

Why from the ledger alone: a closed period's rows never change, so the statement printed
today is the one printed next year, byte for byte.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any

from finops.api import environment
from finops.billing import money, periods, statement_html, statements, ticks
from finops.cli import ledger_access, refusal
from finops.store import focus as focus_store
from finops.store import pool
from finops.store import statements as store_statements

FORMATS = ("json", "csv", "html")


def register(sub: Any) -> None:
    """Add `statement`."""
    p: argparse.ArgumentParser = sub.add_parser(
        "statement",
        help="a namespace's statement for a closed billing period (JSON, CSV or HTML)",
        description="Print the statement of --namespace for the billing period --period "
        "(YYYY-MM) as JSON, CSV or a printable HTML page; without --period, list the closed "
        "periods and their statements.",
    )
    ledger_access.add_arguments(p)
    p.add_argument("--period", metavar="YYYY-MM", help="the billing period, e.g. 2026-03")
    p.add_argument("--namespace", help="the tenant namespace the statement is for")
    p.add_argument("--format", choices=FORMATS, help="default: from --out's suffix, else json")
    p.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    p.add_argument(
        "--provisional",
        action="store_true",
        help="allow a period that is still open (its statement may still change)",
    )
    p.set_defaults(run=run)


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    suffix = os.path.splitext(args.out or "")[1].lstrip(".").lower()
    return suffix if suffix in FORMATS else "json"


def _render(statement: statements.Statement, fmt: str) -> str:
    if fmt == "html":
        return statement_html.page(statement)
    if fmt == "csv":
        return statements.csv_text(statement)
    return statements.json_text(statement)


def _show(args: argparse.Namespace, conn: pool.Connection) -> str:
    if not args.namespace:
        raise refusal.Refused("--namespace is required with --period")
    try:
        statement = store_statements.statement(
            conn,
            cluster=args.cluster,
            namespace=args.namespace,
            label=args.period,
            provisional=args.provisional,
        )
    except store_statements.PeriodNotFound as exc:
        raise refusal.Refused(str(exc)) from None
    return _render(statement, _format(args))


def _list(args: argparse.Namespace, conn: pool.Connection) -> str:
    index = focus_store.period_index(conn, cluster=args.cluster)
    lines = [f"{'PERIOD':<9} {'FROM':<21} {'TO':<21} {'NAMESPACE':<24} {'INVOICE':<28} TOTAL"]
    for period in index.closed:
        start, end = period.start, period.end
        sums = store_statements.totals(conn, cluster=args.cluster, start=start, end=end)
        for namespace in store_statements.namespaces(
            conn, cluster=args.cluster, start=start, end=end
        ):
            invoice = periods.invoice_id(args.cluster, namespace, period.start, period.label)
            total = ", ".join(
                f"{money.format_money(a + b, c)} {c or 'XXX'}"
                for c, (a, b) in sorted(sums.get(namespace, {}).items())
            )
            lines.append(
                f"{period.label:<9} {ticks.rfc3339(period.start):<21} "
                f"{ticks.rfc3339(period.end):<21} {namespace:<24} {invoice:<28} {total or '-'}"
            )
    if len(lines) == 1:
        return "no billing period is closed yet\n"
    return "\n".join(lines) + "\n"


def _write(args: argparse.Namespace, text: str) -> None:
    if args.out in (None, "-"):
        sys.stdout.write(text)
        return
    with (
        ledger_access.replacing(args.out) as partial,
        open(partial, "w", encoding="utf-8", newline="") as out,
    ):
        out.write(text)


def run(args: argparse.Namespace) -> int:
    """Print or write; exit 1 with one line on stderr when anything is refused or fails."""
    try:
        if not args.dsn:
            raise refusal.Refused(
                f"--dsn is required (or set {environment.Env.POSTGRES_CONNECTION_STRING})"
            )
        with contextlib.closing(pool.connect(args.dsn)) as conn:
            text = _show(args, conn) if args.period else _list(args, conn)
        _write(args, text)
    except (refusal.Refused, *ledger_access.FAILURES) as exc:
        return ledger_access.fail("statement", exc, args)
    return 0

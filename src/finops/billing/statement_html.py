"""A statement as a printable HTML page: one self-contained document (no scripts, no fonts
or images fetched), laid out for A4 or Letter paper, amounts in the currency's usual
decimals with the exact six-place amount beside each. Pure: no I/O."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterable

from finops.billing import focus, statements, ticks

_STYLE = """
body { font: 11pt/1.4 "DejaVu Sans", "Liberation Sans", Arial, sans-serif; color: #111;
       margin: 2em auto; max-width: 60em; }
h1 { font-size: 18pt; margin: 0 0 .2em; }
h2 { font-size: 12pt; margin: 1.6em 0 .4em; border-bottom: 1px solid #999; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: .25em .5em; text-align: left; vertical-align: top;
         border-bottom: 1px solid #ddd; }
th { font-size: 9pt; text-transform: uppercase; color: #555; }
td.t { white-space: nowrap; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.exact { color: #666; font-size: 8.5pt; }
.head td { border: none; padding: .1em .5em .1em 0; }
.state { display: inline-block; padding: .1em .6em; border: 1px solid #333; font-size: 9pt; }
tfoot td { font-weight: bold; border-top: 2px solid #333; }
@media print { body { margin: 0; max-width: none; } h2 { break-after: avoid; }
               tr { break-inside: avoid; } }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _when(t: dt.datetime) -> str:
    """An instant as people read it on paper (UTC, to the minute)."""
    return _e(ticks.utc(t).strftime("%Y-%m-%d %H:%M"))


def _money(micros: int, currency: str) -> str:
    exact = statements.amount(micros)
    return f'{_e(statements.money_text(micros, currency))}<br><span class="exact">{exact}</span>'


def _header(s: statements.Statement) -> str:
    state = "Final" if s.closed else "Provisional (period still open)"
    rows = [
        ("Statement", s.invoice_id),
        ("Billing account", s.cluster),
        ("Namespace", s.namespace),
        ("Tenant", s.tenant or "-"),
        ("Period", f"{s.period.label}: {ticks.rfc3339(s.period.start)} to "
                   f"{ticks.rfc3339(s.period.end)} ({s.time_zone} calendar; times below "
                   "are UTC)"),
        ("Price lists", ", ".join(s.price_lists) or "-"),
    ]  # fmt: skip
    cells = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows)
    return (
        f"<h1>Statement {_e(s.invoice_id)}</h1>"
        f'<p><span class="state">{_e(state)}</span></p><table class="head">{cells}</table>'
    )


def _lines(lines: Iterable[statements.Line]) -> str:
    head = (
        "<tr><th>Subscription</th><th>Offering</th><th>Meter</th><th>Covers</th>"
        '<th class="n">Quantity</th><th>Unit</th><th class="n">Unit price</th>'
        '<th class="n">Amount</th></tr>'
    )
    body = "".join(
        f"<tr><td>{_e(ln.subscription)}</td><td>{_e(ln.offering)}</td>"
        f"<td>{_e(focus.METERS[ln.source])}</td>"
        f'<td class="t">{_when(ln.first)}<br>to {_when(ln.last)}</td>'
        f'<td class="n">{_e(focus.text(ln.quantity))}</td><td>{_e(ln.unit)}</td>'
        f'<td class="n">{_e(focus.text(ln.contracted_price))} {_e(ln.currency)}</td>'
        f'<td class="n">{_money(ln.amount_micros, ln.currency)}</td></tr>'
        for ln in lines
    )
    return f"<h2>Charges</h2><table><thead>{head}</thead><tbody>{body}</tbody></table>"


def _corrections(corrections: Iterable[statements.Correction]) -> str:
    rows = list(corrections)
    if not rows:
        return "<h2>Corrections</h2><p>None.</p>"
    head = (
        "<tr><th>Subscription</th><th>Offering</th><th>Meter</th><th>Hour corrected</th>"
        '<th>Of statement</th><th class="n">Quantity</th><th class="n">Amount</th></tr>'
    )
    body = "".join(
        f"<tr><td>{_e(k.subscription)}</td><td>{_e(k.offering)}</td>"
        f'<td>{_e(focus.METERS[k.source])}</td><td class="t">{_when(k.hour)}</td>'
        f'<td>{_e(k.corrects)}</td><td class="n">{_e(focus.text(k.quantity))} {_e(k.unit)}</td>'
        f'<td class="n">{_money(k.amount_micros, k.currency)}</td></tr>'
        for k in rows
    )
    return f"<h2>Corrections</h2><table><thead>{head}</thead><tbody>{body}</tbody></table>"


def _totals(totals: Iterable[statements.Total]) -> str:
    head = (
        '<tr><th>Currency</th><th class="n">Charges</th><th class="n">Corrections</th>'
        '<th class="n">Total</th></tr>'
    )
    body = "".join(
        f'<tr><td>{_e(t.currency)}</td><td class="n">{_money(t.charges_micros, t.currency)}'
        f'</td><td class="n">{_money(t.corrections_micros, t.currency)}</td>'
        f'<td class="n">{_money(t.total_micros, t.currency)}</td></tr>'
        for t in totals
    )
    return f"<h2>Totals</h2><table><thead>{head}</thead><tbody>{body}</tbody></table>"


def page(statement: statements.Statement) -> str:
    """The whole HTML document."""
    title = f"Statement {statement.invoice_id}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
        f"{_header(statement)}{_lines(statement.lines)}{_corrections(statement.corrections)}"
        f"{_totals(statement.totals)}</body></html>\n"
    )

"""Statements as pure functions of the period's rows: lines, corrections, totals, renderings."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal

from finops.billing import focus, periods, statement_html, statements

UTC = dt.UTC
H = dt.timedelta(hours=1)
MARCH = periods.Period(dt.datetime(2026, 3, 1, tzinfo=UTC), dt.datetime(2026, 4, 1, tzinfo=UTC),
                       "2026-03")  # fmt: skip
INDEX = periods.PeriodIndex(periods.Calendar(), (MARCH,))
FEE = {"priceMicros": 2_000_000, "tickAlignment": "HourBoundary", "period": "1"}
HOURLY = {"pricing": {"subscriptionFee": FEE}}


def row(
    before: int, source: str = "subscription", amount: int = 2_000_000, **kw: object
) -> focus.LedgerCharge:
    fields: dict[str, object] = {
        "cluster": "prod",
        "namespace": "team-a",
        "subscription": "web",
        "subscription_uid": "uid-web",
        "offering": "base",
        "hour": MARCH.end - before * H,
        "source": source,
        "quantity": Decimal(1),
        "unit_price_micros": 2_000_000,
        "amount_micros": amount,
        "currency": "USD",
        "finalized": True,
        "labels": {"stakater.com/tenant": "acme"},
        "offering_spec": HOURLY,
    }
    fields.update(kw)
    return focus.LedgerCharge(**fields)  # type: ignore[arg-type]


def build(rows: list[focus.LedgerCharge]) -> statements.Statement:
    return statements.build(cluster="prod", namespace="team-a", period=MARCH, index=INDEX,
                            charges=rows)  # fmt: skip


def test_lines_group_a_subscriptions_fee_hours_and_name_the_service_they_cover() -> None:
    rows = [row(k, covers=(MARCH.end - k * H, MARCH.end - (k - 1) * H)) for k in (3, 2, 1)]
    s = build(rows)
    (line,) = s.lines
    assert (line.quantity, line.unit, line.amount_micros) == (Decimal(3), "Hour", 6_000_000)
    assert (line.first, line.last) == (MARCH.end - 3 * H, MARCH.end)
    assert s.tenant == "acme" and s.closed
    assert s.invoice_id == periods.invoice_id("prod", "team-a", MARCH.start, "2026-03")


def test_corrections_are_listed_apart_and_totals_add_them() -> None:
    april = periods.PeriodIndex(periods.Calendar(), (MARCH,)).starting(MARCH.end)
    booked = focus.Booking(MARCH.end, MARCH.start)
    credit = row(2, amount=-2_000_000, quantity=Decimal(-1), booking=booked)
    s = statements.build(cluster="prod", namespace="team-a", period=april, index=INDEX,
                         charges=[row(-1), credit])  # fmt: skip
    assert len(s.lines) == 1 and len(s.corrections) == 1
    assert s.corrections[0].corrects == periods.invoice_id("prod", "team-a", MARCH.start, "2026-03")
    (total,) = s.totals
    assert (total.charges_micros, total.corrections_micros, total.total_micros) == (
        2_000_000, -2_000_000, 0)  # fmt: skip
    assert not s.closed


def test_other_namespaces_rows_are_not_on_the_statement() -> None:
    s = build([row(1), row(2, namespace="team-b")])
    assert sum(t.total_micros for t in s.totals) == 2_000_000


def test_the_renderings_are_exact_and_the_same_every_time() -> None:
    rows = [row(1), row(1, source="cpuHour", amount=3_827, quantity=Decimal("0.123456789012"),
                    unit_price_micros=31_000)]  # fmt: skip
    s = build(rows)
    body = json.loads(statements.json_text(s))
    assert [t["totalMicros"] for t in body["totals"]] == [2_003_827]
    assert body["totals"][0]["total"] == "2.003827"
    table = list(csv.reader(io.StringIO(statements.csv_text(s))))
    assert table[0] == list(statements.CSV_HEADER)
    assert [r[1] for r in table[1:]] == ["charge", "charge", "total"]
    page = statement_html.page(s)
    assert page == statement_html.page(build(list(reversed(rows))))
    assert "2.00 USD" in page and "2.003827" in page and "<script" not in page


def test_names_are_escaped_in_the_page() -> None:
    page = statement_html.page(build([row(1, subscription="<b>web</b>")]))
    assert "&lt;b&gt;web&lt;/b&gt;" in page and "<b>web</b>" not in page

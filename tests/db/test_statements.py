"""Statements over a real ledger: what a closed period is invoiced for, the same from the CLI,
the gateway and the FOCUS export, and the same text after any later run or late data."""

from __future__ import annotations

import csv
import io
import json
import pathlib
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import psycopg_pool
import pytest
from starlette.testclient import TestClient

from finops import cli
from finops.billing import statement_html, statements
from finops.gateway import app
from finops.store import focus as focus_store
from finops.store import pool, unit
from finops.store import statements as store_statements
from tests.db import periods_support as ps

CLUSTER = "statements"


class _Allow(app.Authorizer):
    async def check(self, authorization: str | None, namespace: str) -> int:
        return 200 if namespace != "team-z" else 403


@pytest.fixture
def generated(ledger_dsn: str) -> str:
    with unit.connect(ledger_dsn) as conn:
        ps.generated_ledger(conn, CLUSTER)
    return ledger_dsn


def rendered(dsn: str, namespace: str, label: str = "2026-03") -> tuple[str, str, str]:
    with psycopg.connect(dsn) as conn:
        s = store_statements.statement(conn, cluster=CLUSTER, namespace=namespace, label=label)
    return statements.json_text(s), statements.csv_text(s), statement_html.page(s)


def ledger_totals(dsn: str, namespace: str, label: str) -> dict[str, int]:
    """Settled charge rows of the period plus corrections booked in it, per currency."""
    with psycopg.connect(dsn) as conn:
        period = store_statements.find_period(
            focus_store.period_index(conn, cluster=CLUSTER), label, provisional=True
        )
        sums = store_statements.totals(conn, cluster=CLUSTER, start=period.start, end=period.end)
    return {c: a + b for c, (a, b) in sums.get(namespace, {}).items()}


def test_statement_export_and_ledger_agree_for_the_closed_period(
    generated: str, tmp_path: pathlib.Path
) -> None:
    for namespace in ("team-a", "team-b"):
        body = json.loads(rendered(generated, namespace)[0])
        assert body["period"]["closed"] is True
        assert body["invoiceId"].startswith("INV-2026-03-")
        totals = {t["currency"]: t["totalMicros"] for t in body["totals"]}
        assert totals == ledger_totals(generated, namespace, "2026-03")
        out = tmp_path / f"{namespace}.csv"
        argv = ["export", "focus", "--dsn", generated, "--cluster", CLUSTER, "--out", str(out)]
        argv += ["--from", "2026-03-01T00:00:00Z", "--to", "2026-04-01T00:00:00Z"]
        assert cli.main([*argv, "--namespace", namespace]) == 0
        with out.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        exported: dict[str, int] = {}
        for r in rows:
            micros = int(Decimal(r["BilledCost"]).scaleb(6))
            exported[r["BillingCurrency"]] = exported.get(r["BillingCurrency"], 0) + micros
        assert exported == totals
        assert {r["InvoiceId"] for r in rows} == {body["invoiceId"]}
    april = json.loads(rendered(generated, "team-a", "2026-03")[0])
    assert april["corrections"] == []  # March's own statement holds no corrections


def test_corrections_appear_in_the_next_statement_and_name_the_one_they_correct(
    generated: str,
) -> None:
    with psycopg.connect(generated) as conn:
        april = store_statements.statement(
            conn, cluster=CLUSTER, namespace="team-a", label="2026-04", provisional=True
        )
    march = json.loads(rendered(generated, "team-a")[0])["invoiceId"]
    assert april.corrections and {k.corrects for k in april.corrections} == {march}
    assert not april.closed
    assert any(k.amount_micros < 0 for k in april.corrections)


def test_a_closed_statement_is_the_same_text_after_later_runs_and_late_data(
    generated: str,
) -> None:
    before = rendered(generated, "team-a")
    with unit.connect(generated) as conn:
        books = ps.books(conn, CLUSTER)
        ps.allocation(
            conn,
            CLUSTER,
            hour=ps.MARCH_END - 3 * ps.HOUR,
            name="later",
            cpu="3",
            book=books[1],
            currency="USD",
        )
        subs = [ps.subscription("g-hourly", activated=ps.MARCH_END - 9 * ps.HOUR)]
        for n in range(3):
            ps.run(conn, CLUSTER, ps.GENERATED_END + n * ps.HOUR, subs)
            ps.run(conn, CLUSTER, ps.GENERATED_END + n * ps.HOUR, subs)
    assert rendered(generated, "team-a") == before


def test_the_cli_prints_every_format_and_lists_the_statements(
    generated: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["statement", "--dsn", generated, "--cluster", CLUSTER]
    assert cli.main([*base, "--period", "2026-03", "--namespace", "team-a"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(rendered(generated, "team-a")[0])
    page = tmp_path / "march.html"
    assert (
        cli.main([*base, "--period", "2026-03", "--namespace", "team-a", "--out", str(page)]) == 0
    )
    assert page.read_text(encoding="utf-8") == rendered(generated, "team-a")[2]
    assert cli.main([*base, "--period", "2026-03", "--namespace", "team-a", "--format", "csv"]) == 0
    lines = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert lines[0] == list(statements.CSV_HEADER) and lines[-1][1] == "total"
    assert cli.main(base) == 0
    listing = capsys.readouterr().out
    assert "2026-03" in listing and "team-a" in listing and "team-b" in listing
    assert cli.main([*base, "--period", "2026-04", "--namespace", "team-a"]) == 1
    assert "not closed yet" in capsys.readouterr().err


@pytest.fixture
def ledger(generated: str) -> Iterator[psycopg_pool.ConnectionPool[Any]]:
    opened = pool.open_pool(generated, apply_migrations=False, max_size=2)
    yield opened
    opened.close()


def test_the_gateway_serves_the_list_and_each_statement(
    generated: str, ledger: psycopg_pool.ConnectionPool[Any]
) -> None:
    settings = app.GatewaySettings(port=0, dsn=generated, auth=False, origins=(), cluster=CLUSTER)
    with TestClient(app.build(settings, lambda: ledger, _Allow())) as client:
        listed = client.get("/api/v1/namespaces/team-a/statements").json()["items"]
        assert [i["period"]["label"] for i in listed] == ["2026-03"]
        base = "/api/v1/namespaces/team-a/statements/2026-03"
        json_text, csv_text, html_page = rendered(generated, "team-a")
        assert client.get(base).text == json_text
        assert client.get(base, params={"format": "csv"}).text == csv_text
        page = client.get(base, params={"format": "html"})
        assert page.text == html_page and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert client.get("/api/v1/namespaces/team-a/statements/2026-04").status_code == 404
        opened = client.get(
            "/api/v1/namespaces/team-a/statements/2026-04", params={"provisional": "true"}
        )
        assert opened.status_code == 200 and opened.json()["period"]["closed"] is False
        assert client.get("/api/v1/namespaces/team-z/statements").status_code == 403
        assert client.get(base, params={"format": "pdf"}).status_code == 400

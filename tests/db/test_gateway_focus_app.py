"""The gateway's FOCUS route in-process over a real ledger: empty windows and a broken ledger."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg_pool
import pytest
from starlette.testclient import TestClient

from finops.billing import focus
from finops.gateway import app
from finops.store import pool

WINDOW = {"from": "2026-04-01T00:00:00Z", "to": "2026-04-02T00:00:00Z"}


class _Allow(app.Authorizer):
    async def check(self, authorization: str | None, namespace: str) -> int:
        return 200


@pytest.fixture
def ledger(ledger_dsn: str) -> Iterator[psycopg_pool.ConnectionPool[Any]]:
    opened = pool.open_pool(ledger_dsn, apply_migrations=False, max_size=2)
    yield opened
    opened.close()


def _client(dsn: str, ledger: psycopg_pool.ConnectionPool[Any]) -> TestClient:
    settings = app.GatewaySettings(port=0, dsn=dsn, auth=False, origins=(), cluster="default")
    return TestClient(app.build(settings, lambda: ledger, _Allow()))


def test_an_empty_window_is_the_header_alone(
    ledger_dsn: str, ledger: psycopg_pool.ConnectionPool[Any]
) -> None:
    with _client(ledger_dsn, ledger) as client:
        got = client.get("/api/v1/namespaces/team-a/focus", params=WINDOW)
        assert got.status_code == 200
        assert got.text == ",".join(focus.NAMES) + "\r\n"
        assert client.get("/api/v1/focus", params={**WINDOW, "format": "json"}).json() == []


def test_an_unreadable_ledger_is_a_503_before_any_row(
    ledger_dsn: str, ledger: psycopg_pool.ConnectionPool[Any]
) -> None:
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE subscription_charges CASCADE")
    with _client(ledger_dsn, ledger) as client:
        got = client.get("/api/v1/focus", params=WINDOW)
        assert got.status_code == 503
        assert got.json() == {"error": "the ledger is unavailable"}

"""Shared fixtures of the db tier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest


@pytest.fixture
def conn(ledger_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection (not autocommit) to a fresh ledger database."""
    with psycopg.connect(ledger_dsn) as connection:
        yield connection

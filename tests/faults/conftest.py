"""Fixtures of the fault suite: the active PriceBook, a generated OpenCost, and universes."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg import conninfo
from tests.e2e._support import active_book
from tests.faults import _harness as h

from finops_devenv import controlplane, postgres
from finops_devenv import opencost_replay as replay

NAMESPACES = 8


@pytest.fixture(scope="module")
def book(kube: controlplane.ControlPlane) -> Iterator[dict[str, Any]]:
    """The one active, ready currency PriceBook every job of the module prices with."""
    with active_book(kube, "faults-book", h.BOOK_RATES) as obj:
        yield obj


@pytest.fixture
def opencost(
    opencost_replay: Callable[[replay.Source], replay.ReplayServer],
) -> replay.ReplayServer:
    """A generated cluster (deterministic by seed), so every universe sees the same usage."""
    return opencost_replay(replay.Generated(namespaces=NAMESPACES, pods_per_namespace=4, seed=16))


@pytest.fixture
def universes(
    kube: controlplane.ControlPlane,
    pg_server: postgres.PostgresCluster,
    _ledger_template: str,
    opencost: replay.ReplayServer,
    book: dict[str, Any],
) -> Iterator[Callable[[], h.Universe]]:
    """Factory of universes: a fresh namespace and a fresh migrated ledger database each."""
    made: list[h.Universe] = []

    def make() -> h.Universe:
        dsn = pg_server.create_database(template=_ledger_template)
        uni = h.Universe(kube, f"f-{uuid.uuid4().hex[:10]}", dsn, opencost.url)
        made.append(uni)
        return uni

    yield make
    for uni in made:
        pg_server.drop_database(str(conninfo.conninfo_to_dict(uni.dsn)["dbname"]))

"""The ledger's database needs one role that owns it, and that role's TEMPORARY privilege.

What `docs/postgresql.md` tells an admin who brings their own PostgreSQL: every process
migrates the schema with the connection string it is given, so the role in it must own the
database (no superuser, no other grant); a charge run stages its rows in temporary tables, so
the role must keep TEMPORARY (granted to PUBLIC on a new database). Both are checked here as
a plain login role, connecting with its password as a pod would.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from finops.jobs import charges as job
from finops.store import migrate, reads, unit
from finops_devenv import postgres
from tests.db import builders
from tests.db.test_charge_sql import billed
from tests.oracle import ledger as oracle_ledger

SCHEDULED = builders.hour(3)
FEE = {"priceMicros": 1_000_000, "tickAlignment": "HourBoundary", "period": "1"}


@pytest.fixture
def owned(pg_server: postgres.PostgresCluster) -> Iterator[tuple[str, str]]:
    """(database name, the owner's password DSN) of a fresh database the login role owns."""
    dsn = pg_server.create_database(owner=postgres.PASSWORD_ROLE)
    name = str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
    yield name, pg_server.password_dsn(name)
    pg_server.drop_database(name)


def _subscriptions() -> list[Any]:
    return billed(
        [
            {
                "uid": f"sub-{i}",
                "activated": builders.hour(0).isoformat().replace("+00:00", "Z"),
                "deactivated": None,
                "sources": [{"namespace": "team-a"}],
                "pricing": {"subscriptionFee": FEE, "resourcePricing": [{"name": "cpuHour"}]},
            }
            for i in range(2)
        ]
    )


def _allocations(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        book = builders.pricebook(conn)
        rows = [builders.alloc(at=h) for h in range(4)]
        oracle_ledger.ingest(conn, rows, pricebook_id=book, currency="USD", finalized=True)
        conn.commit()


def test_the_role_that_owns_the_database_migrates_charges_and_reads(
    pg_server: postgres.PostgresCluster, owned: tuple[str, str]
) -> None:
    _name, dsn = owned
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (postgres.PASSWORD_ROLE,)
        ).fetchone()
    assert row == (False,), "the role must not be a superuser for this test to mean anything"
    with psycopg.connect(dsn, autocommit=True) as conn:
        applied = migrate.apply(conn)
    assert applied, "the owner applied no migration"
    _allocations(dsn)
    with unit.connect(dsn) as conn:
        result = job.charge(
            conn, cluster=builders.CLUSTER, scheduled=SCHEDULED, billed=_subscriptions()
        )
    assert result.rows_written > 0 and result.usage_rows > 0, result
    with psycopg.connect(dsn) as conn:
        costs = reads.namespace_costs(
            conn,
            cluster=builders.CLUSTER,
            namespace="t",
            start=builders.hour(0),
            end=builders.hour(0) + dt.timedelta(days=1),
        )
        owners = conn.execute(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'"
        ).fetchall()
    assert {c.source for c in costs} == {"subscription", "cpuHour"}, costs
    assert owners == [(postgres.PASSWORD_ROLE,)], f"objects made by another role: {owners}"


def test_without_temporary_a_charge_run_fails_naming_the_privilege(
    pg_server: postgres.PostgresCluster, owned: tuple[str, str]
) -> None:
    name, dsn = owned
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate.apply(conn)
    _allocations(dsn)
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC, {}").format(
                sql.Identifier(name), sql.Identifier(postgres.PASSWORD_ROLE)
            )
        )
    with unit.connect(dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege) as err:
        job.charge(conn, cluster=builders.CLUSTER, scheduled=SCHEDULED, billed=_subscriptions())
    assert "temporary tables" in str(err.value), err.value
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM subscription_charges").fetchone()
    assert row == (0,), "a failed run left charge rows behind"

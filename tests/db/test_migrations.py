"""Migrations: applied once, in order, under an advisory lock, all-or-nothing per file."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from finops.api import environment
from finops.store import migrate, mirror
from tests.db import builders
from tests.oracle import ledger as oracle_ledger

EXPECTED_TABLES = {
    "pricebooks",
    "provider_allocations",
    "subscription_charges",
    "offering_versions",
    "subscription_versions",
    # billing periods (0009)
    "billing_calendars",
    "billing_periods",
    "charge_corrections",
    "allocation_changes",
    "charge_terms",
    "schema_migrations",
    "budget_thresholds",
    "budget_evaluations",
    # daily sums and the charge ledger's default partition (0021, 0022)
    "charge_days",
    "charge_months",
    "charge_namespace_days",
    "subscription_charges_default",
    # the transactions whose changes of the sums wait for their commit (0026)
    "charge_sums_pending",
}


def schema_snapshot(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Columns, constraints, indexes and triggers of the public schema, sorted."""
    columns = conn.execute(
        """
        SELECT 'column', table_name, column_name, data_type, is_nullable, column_default
        FROM information_schema.columns WHERE table_schema = 'public'
        """
    ).fetchall()
    indexes = conn.execute(
        "SELECT 'index', tablename, indexname, indexdef, '', '' FROM pg_indexes "
        "WHERE schemaname = 'public'"
    ).fetchall()
    constraints = conn.execute(
        """
        SELECT 'constraint', conrelid::regclass::text, conname, pg_get_constraintdef(oid), '', ''
        FROM pg_constraint WHERE connamespace = 'public'::regnamespace
        """
    ).fetchall()
    triggers = conn.execute(
        "SELECT 'trigger', tgrelid::regclass::text, tgname, '', '', '' FROM pg_trigger "
        "WHERE NOT tgisinternal"
    ).fetchall()
    return sorted(
        (tuple(str(v) for v in row) for row in [*columns, *indexes, *constraints, *triggers]),
    )


def shipped_versions() -> list[int]:
    return [m.version for m in migrate.load()]


def write_migrations(directory: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
    return directory


class TestFreshDatabase:
    def test_a_fresh_database_gets_every_ledger_table(self, pg_dsn: str) -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            applied = migrate.apply(conn)
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                ).fetchall()
            }
            recorded = builders.applied_versions(conn)
        assert [m.version for m in applied] == shipped_versions()
        assert recorded == shipped_versions()
        assert tables == EXPECTED_TABLES

    def test_reapplying_is_a_no_op_that_leaves_the_schema_alone(self, pg_dsn: str) -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            migrate.apply(conn)
            before = schema_snapshot(conn)
            rows_before = conn.execute("SELECT * FROM schema_migrations").fetchall()
            again = migrate.apply(conn)
            after = schema_snapshot(conn)
            rows_after = conn.execute("SELECT * FROM schema_migrations").fetchall()
        assert again == []
        assert after == before
        assert rows_after == rows_before

    def test_a_connection_outside_autocommit_works_and_is_left_idle(self, pg_dsn: str) -> None:
        with psycopg.connect(pg_dsn) as conn:
            migrate.apply(conn)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert builders.applied_versions(conn) == shipped_versions()

    def test_a_connection_inside_a_transaction_is_refused(self, pg_dsn: str) -> None:
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("SELECT 1")
            with pytest.raises(migrate.MigrationError, match="not inside a transaction"):
                migrate.apply(conn)

    def test_the_ledger_template_fixture_matches_a_fresh_apply(
        self, pg_dsn: str, ledger_dsn: str
    ) -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as fresh:
            migrate.apply(fresh)
            expected = schema_snapshot(fresh)
        with psycopg.connect(ledger_dsn) as cloned:
            assert schema_snapshot(cloned) == expected


class TestUpgrades:
    def test_0002_gives_versions_mirrored_before_it_empty_subscription_labels(
        self, pg_dsn: str
    ) -> None:
        """A ledger written under 0001 upgrades in place: its rows read as unlabelled
        Subscriptions, the same observation maps to the same row, and a labelled one is new."""
        shipped = migrate.load()
        assert [m.name for m in shipped[:2]] == ["ledger", "subscription_labels"]
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            migrate.apply(conn, shipped[:1])
            row = conn.execute(
                """
                INSERT INTO subscription_versions
                    (cluster, uid, namespace, name, generation, resource_version, spec,
                     namespace_labels)
                VALUES ('default', 'uid-1', 'team-a', 'web', 3, '9', '{}',
                        '{"stakater.com/tenant": "acme"}')
                RETURNING id
                """
            ).fetchone()
            assert row is not None
            assert [m.version for m in migrate.apply(conn)] == shipped_versions()[1:]
            labels = conn.execute(
                "SELECT subscription_labels FROM subscription_versions WHERE id = %s", row
            ).fetchone()
            observe = functools.partial(
                mirror.upsert_subscription_version,
                conn,
                cluster="default",
                uid="uid-1",
                namespace="team-a",
                name="web",
                generation=3,
                resource_version="9",
                spec={},
                namespace_labels={"stakater.com/tenant": "acme"},
            )
            same, labelled = observe(), observe(subscription_labels={"app": "web"})
        assert labels == ({},)
        assert same == row[0]
        assert labelled != row[0]

    def test_charge_version_checks_keep_an_existing_ledger_and_its_integrity(
        self, pg_dsn: str
    ) -> None:
        """The migration that trades the per-row foreign keys for one check per statement
        keeps every charge row, and a charge still cannot point at a version that is not
        there, on insert or on update, nor outlive its version by DELETE or TRUNCATE."""
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            o, s, before = _charge_across(conn, "charge_version_checks")
            foreign_keys = conn.execute(
                "SELECT count(*) FROM pg_constraint WHERE contype = 'f'"
                " AND conrelid = 'subscription_charges'::regclass"
            ).fetchone()
            assert foreign_keys == (0,)
            for orphan in [("sub-2", o + 99, s), ("sub-2", o, s + 99), ("sub-1", o, s + 99)]:
                with pytest.raises(psycopg.errors.ForeignKeyViolation, match="not mirrored"):
                    conn.execute(_CHARGE, orphan)
            with pytest.raises(psycopg.errors.ForeignKeyViolation, match="not mirrored"):
                conn.execute("UPDATE subscription_charges SET offering_version_id = %s", (o + 1,))
            for table in ("offering_versions", "subscription_versions"):
                with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="never"):
                    conn.execute(f"DELETE FROM {table}".encode())
                with pytest.raises(psycopg.errors.ForeignKeyViolation, match="orphan"):
                    conn.execute(f"TRUNCATE {table}".encode())
            assert conn.execute("SELECT * FROM subscription_charges").fetchall() == before
            conn.execute("TRUNCATE subscription_charges, subscription_versions, offering_versions")

    def test_allocation_pricebook_check_keeps_an_existing_ledger_and_its_integrity(
        self, pg_dsn: str
    ) -> None:
        """The migration that trades the allocations' per-row foreign key for one check per
        statement keeps every allocation row, and an allocation still cannot point at a
        pricebook that is not there, on insert, merge or update, nor outlive its pricebook
        by DELETE or TRUNCATE."""
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            book, rows, before = _allocations_before(conn, "allocation_pricebook_check")
            migrate.apply(conn)
            assert conn.execute(_ALLOCATIONS).fetchall() == before
            foreign_keys = conn.execute(
                "SELECT count(*) FROM pg_constraint WHERE contype = 'f'"
                " AND conrelid = 'provider_allocations'::regclass"
            ).fetchone()
            assert foreign_keys == (0,)
            fresh = [builders.alloc("team-b/db-0/pg", at=0, namespace="team-b")]
            for written in (fresh, rows[:1], [*fresh, *rows]):  # insert, merge, both
                with pytest.raises(psycopg.errors.ForeignKeyViolation, match="not stored"):
                    oracle_ledger.ingest(
                        conn, written, pricebook_id=book + 99, currency="USD", finalized=False
                    )
            one_bad = "UPDATE provider_allocations SET pricebook_id = %s + (hour = %s)::int"
            with pytest.raises(psycopg.errors.ForeignKeyViolation, match="not stored"):
                conn.execute(one_bad.encode(), (book, builders.hour(1)))
            with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="never"):
                conn.execute("DELETE FROM pricebooks")
            with pytest.raises(psycopg.errors.ForeignKeyViolation, match="orphan"):
                conn.execute("TRUNCATE pricebooks")
            assert conn.execute(_ALLOCATIONS).fetchall() == before
            assert oracle_ledger.pricebooks(conn, [book]).keys() == {book}
            conn.execute("TRUNCATE provider_allocations, pricebooks")

    def test_charge_hour_check_keeps_the_ledger_and_accepts_exactly_the_same_hours(
        self, pg_dsn: str
    ) -> None:
        """0007's cheaper hour check keeps every charge row and its constraint name, and
        accepts exactly the hours 0001's check accepted (edge values: off by a microsecond
        either side, before 1970 and before the date_bin origin, BC, ±infinity)."""
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            o, s, _ = _charge_across(conn, "charge_hour_check")
            _accepts_the_hours_0001_accepted(
                conn,
                lambda i, hour: conn.execute(_CHARGE_AT, (f"edge-{i}", hour, o, s)),
                "subscription_charges_hour_check",
            )
            conn.execute("TRUNCATE subscription_charges, subscription_versions, offering_versions")

    def test_allocation_hour_check_keeps_the_ledger_and_accepts_exactly_the_same_hours(
        self, pg_dsn: str
    ) -> None:
        """0008 does for allocations what 0007 did for charges: every allocation row and the
        constraint's name are kept, and it accepts exactly the hours 0001's check accepted
        (the same edge values)."""
        at = [m.name for m in migrate.load()].index("allocation_hour_check")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            book, _, before = _allocations_before(conn, "allocation_hour_check")
            assert [m.version for m in migrate.apply(conn)] == shipped_versions()[at:]
            assert conn.execute(_ALLOCATIONS).fetchall() == before
            _accepts_the_hours_0001_accepted(
                conn,
                lambda i, hour: conn.execute(_ALLOCATION_AT, (hour, f"edge-{i}", book)),
                "provider_allocations_hour_check",
            )
            assert conn.execute(
                "SELECT count(*) FROM pg_constraint WHERE contype = 'c'"
                " AND pg_get_constraintdef(oid) ILIKE '%extract%epoch%'"
            ).fetchone() == (0,)
            conn.execute("TRUNCATE provider_allocations, pricebooks")


def _allocations_before(
    conn: psycopg.Connection[Any], migration: str
) -> tuple[int, list[Any], list[Any]]:
    """The schema as it was before `migration`, with a pricebook and six allocation rows over
    three hours: (pricebook id, the rows, the table as read back)."""
    shipped = migrate.load()
    migrate.apply(conn, shipped[: [m.name for m in shipped].index(migration)])
    book = builders.pricebook(conn)
    rows = [builders.alloc(f"team-a/web-{i}/app", at=i % 3) for i in range(6)]
    oracle_ledger.ingest(conn, rows, pricebook_id=book, currency="USD", finalized=False)
    return book, rows, conn.execute(_ALLOCATIONS).fetchall()


def _accepts_the_hours_0001_accepted(
    conn: psycopg.Connection[Any],
    write: Callable[[int, str], object],
    constraint: str,
) -> None:
    """`write(i, hour)` a row at each of the edge hours; it must be accepted exactly when
    0001's `extract(epoch FROM hour) % 3600 = 0` holds, and refused by `constraint`."""
    outcomes = set()
    for i, (instant, shift) in enumerate(_EDGE_HOURS):
        hour = conn.execute(
            "SELECT (%s::timestamptz + %s::interval)::text", (instant, shift)
        ).fetchone()
        assert hour is not None
        old = conn.execute(
            "SELECT extract(epoch FROM %s::timestamptz) %% 3600 = 0", hour
        ).fetchone()
        assert old is not None
        try:
            with conn.transaction():
                write(i, hour[0])
            accepted = True
        except psycopg.errors.CheckViolation as exc:
            assert exc.diag.constraint_name == constraint
            accepted = False
        assert accepted == old[0], (instant, shift)
        outcomes.add(accepted)
    assert outcomes == {True, False}


# Around the hour grid at several places on the time line, as (instant, shift); not within
# 30 years of the largest timestamp, where 0001's check computed in float and accepted
# instants off the hour.
_EDGE_HOURS = [
    (f"{base}{zone}", shift)
    for base in (
        "2026-04-01 00:00:00",
        "2026-04-01 13:00:00",
        "2000-01-01 00:00:00",
        "1970-01-01 00:00:00",
        "1900-02-28 05:00:00",
        "0001-01-01 00:00:00 BC",
        "4713-01-01 00:00:00 BC",
        "200000-06-30 17:00:00",
    )
    for zone in ("+00", "+05:30", "-01")
    for shift in ("0", "1 microsecond", "-1 microsecond", "1 second", "-30 minutes", "1 hour")
] + [("infinity", "0"), ("-infinity", "0")]

_CHARGE_AT = """
    INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,
        unit_price_micros, amount_micros, currency, finalized, offering_version_id,
        subscription_version_id)
    VALUES ('default', %s, %s::timestamptz, 'subscription', 1, 5, 5, 'USD', true, %s, %s)
"""

_ALLOCATION_AT = """
    INSERT INTO provider_allocations (cluster, hour, namespace, name, aggregation, start_time,
        end_time, pricebook_id, currency)
    VALUES ('default', %s::timestamptz, 'team-e', %s, 'namespace,pod,container',
        '2026-04-01T00:00:00Z', '2026-04-01T01:00:00Z', %s, 'USD')
"""

_ALLOCATIONS = "SELECT * FROM provider_allocations ORDER BY cluster, hour, namespace, name"

_CHARGE = """
    INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,
        unit_price_micros, amount_micros, currency, finalized, offering_version_id,
        subscription_version_id)
    VALUES ('default', %s, '2026-04-01T00:00:00Z', 'subscription', 1, 5, 5, 'USD', true, %s, %s)
    ON CONFLICT (cluster, subscription_uid, hour, source) DO UPDATE
        SET subscription_version_id = EXCLUDED.subscription_version_id
"""


def _charge_across(
    conn: psycopg.Connection[Any], migration: str
) -> tuple[int, int, list[tuple[Any, ...]]]:
    """Apply the migrations before `migration`, write one charge row, apply the rest and
    check the row came through unchanged; the two version ids and the ledger's rows."""
    shipped = migrate.load()
    migrate.apply(conn, shipped[: [m.name for m in shipped].index(migration)])
    o, s = builders.offering_version(conn), builders.subscription_version(conn)
    conn.execute(_CHARGE, ("sub-1", o, s))
    before = conn.execute("SELECT * FROM subscription_charges").fetchall()
    migrate.apply(conn)
    after = conn.execute("SELECT * FROM subscription_charges").fetchall()
    # Later migrations may add columns (0009: NULL for rows written before it).
    assert [r[: len(before[0])] for r in after] == before
    assert all(v is None for r in after for v in r[len(before[0]) :])
    return o, s, after


class TestMigrationFiles:
    def test_the_directory_can_be_overridden_by_environment(
        self, pg_dsn: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        write_migrations(
            tmp_path,
            {
                "0002_second.sql": "CREATE TABLE second (id int REFERENCES first (id));",
                "0001_first.sql": "CREATE TABLE first (id int PRIMARY KEY);",
                "README.md": "not a migration",
            },
        )
        monkeypatch.setenv(environment.Env.FINOPS_MIGRATION_DIR, str(tmp_path))
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            applied = migrate.apply(conn)
            names = conn.execute("SELECT name FROM schema_migrations ORDER BY version").fetchall()
        assert [m.filename for m in applied] == ["0001_first.sql", "0002_second.sql"]
        assert names == [("first",), ("second",)]

    def test_a_failed_migration_rolls_back_whole_and_keeps_earlier_ones(
        self, pg_dsn: str, tmp_path: pathlib.Path
    ) -> None:
        write_migrations(
            tmp_path,
            {
                "0001_ok.sql": "CREATE TABLE kept (id int);",
                "0002_broken.sql": (
                    "CREATE TABLE half_done (id int);\n"
                    "INSERT INTO half_done VALUES (1);\n"
                    "SELECT 1 / 0;\n"
                ),
            },
        )
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            with pytest.raises(migrate.MigrationError, match=r"0002_broken\.sql failed"):
                migrate.apply(conn, migrate.load(tmp_path))
            half_done = conn.execute("SELECT to_regclass('half_done')").fetchone()
            kept = conn.execute("SELECT to_regclass('kept')").fetchone()
            assert builders.applied_versions(conn) == [1]
            # The lock was released: fixing the file lets the next run finish the job.
            (tmp_path / "0002_broken.sql").write_text("CREATE TABLE half_done (id int);")
            applied = migrate.apply(conn, migrate.load(tmp_path))
        assert half_done == (None,)
        assert kept == ("kept",)
        assert [m.version for m in applied] == [2]

    def test_editing_a_migration_that_already_ran_is_refused(
        self, pg_dsn: str, tmp_path: pathlib.Path
    ) -> None:
        write_migrations(tmp_path, {"0001_first.sql": "CREATE TABLE first (id int);"})
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            migrate.apply(conn, migrate.load(tmp_path))
            (tmp_path / "0001_first.sql").write_text("CREATE TABLE first (id bigint);")
            with pytest.raises(migrate.MigrationError, match="changed after it was applied"):
                migrate.apply(conn, migrate.load(tmp_path))

    @pytest.mark.parametrize(
        ("files", "message"),
        [
            ({"1_short.sql": ""}, "NNNN_name.sql"),
            ({"0001_a.sql": "", "0001_b.sql": ""}, "share number 0001"),
        ],
    )
    def test_badly_named_files_are_rejected_before_anything_runs(
        self, tmp_path: pathlib.Path, files: dict[str, str], message: str
    ) -> None:
        write_migrations(tmp_path, files)
        with pytest.raises(migrate.MigrationError, match=message):
            migrate.load(tmp_path)


class TestConcurrentProcesses:
    def test_two_processes_migrating_at_the_same_moment_end_with_one_schema(
        self, pg_dsn: str, tmp_path: pathlib.Path
    ) -> None:
        # The shipped files plus a slow last one, so the two runs surely overlap.
        directory = tmp_path / "migrations"
        shutil.copytree(str(migrate.migration_dir({})), directory)
        last = max(shipped_versions()) + 1
        (directory / f"{last:04d}_slow.sql").write_text("SELECT pg_sleep(1);")
        start_at = time.time() + 2.0
        script = (
            "import json, sys, time\n"
            "from finops.store import migrate, pool\n"
            f"time.sleep(max(0.0, {start_at!r} - time.time()))\n"
            "began = time.time()\n"
            "with pool.connect(pool.dsn_from_env(), autocommit=True) as conn:\n"
            "    ran = migrate.apply(conn)\n"
            "print(json.dumps({'began': began, 'ended': time.time(),"
            " 'applied': [m.version for m in ran]}))\n"
        )
        env = {
            **os.environ,
            "POSTGRES_CONNECTION_STRING": pg_dsn,
            environment.Env.FINOPS_MIGRATION_DIR: str(directory),
        }
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        results = []
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0
            results.append(json.loads(out))
        # Both really ran at once: each began before the other finished.
        assert results[0]["began"] < results[1]["ended"]
        assert results[1]["began"] < results[0]["ended"]
        applied = sorted((r["applied"] for r in results), key=len)
        assert applied == [[], [*shipped_versions(), last]]
        with psycopg.connect(pg_dsn) as conn:
            counts = conn.execute(
                "SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY 1"
            ).fetchall()
        assert counts == [(v, 1) for v in [*shipped_versions(), last]]

    def test_the_module_entry_point_applies_and_reports(self, pg_dsn: str) -> None:
        env = {**os.environ, "POSTGRES_CONNECTION_STRING": pg_dsn}
        env.pop(environment.Env.FINOPS_MIGRATION_DIR, None)
        done = subprocess.run(
            [sys.executable, "-m", "finops.store.migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"applied": shipped_versions()}

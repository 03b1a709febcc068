"""Connecting to the ledger: configuration from the environment, errors that keep secrets."""

from __future__ import annotations

import datetime as dt
import logging
import os
import subprocess
import sys
import threading
import traceback
import urllib.parse

import psycopg
import pytest
from psycopg import conninfo, pq, sql

from finops.store import migrate, pool
from finops_devenv import ports, postgres
from tests.db import builders


def everything_said(exc: BaseException, caplog: pytest.LogCaptureFixture) -> str:
    """The error as a user could ever see it: str, repr, traceback, and every log record."""
    parts = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    parts += [r.getMessage() for r in caplog.records]
    return "\n".join(parts)


class TestEnvironment:
    @pytest.mark.parametrize(
        ("environ", "expected"),
        [({}, "default"), ({"CLUSTER_ID": ""}, "default"), ({"CLUSTER_ID": "eu-1"}, "eu-1")],
    )
    def test_cluster_id_defaults_to_default(self, environ: dict[str, str], expected: str) -> None:
        assert pool.cluster_id(environ) == expected

    def test_a_missing_connection_string_is_named_in_the_error(self) -> None:
        with pytest.raises(pool.LedgerConnectionError, match="POSTGRES_CONNECTION_STRING"):
            pool.dsn_from_env({"POSTGRES_CONNECTION_STRING": "  "})

    def test_a_pool_from_the_environment_serves_a_migrated_ledger(self, pg_dsn: str) -> None:
        environ = {"POSTGRES_CONNECTION_STRING": pg_dsn}
        with pool.open_pool(environ=environ, max_size=2) as ledger, ledger.connection() as conn:
            versions = builders.applied_versions(conn)
            tables = conn.execute("SELECT to_regclass('provider_allocations')").fetchone()
        assert versions == [m.version for m in migrate.load()]
        assert tables == ("provider_allocations",)

    def test_the_password_role_can_use_the_pool(
        self, pg_server: postgres.PostgresCluster, pg_dsn: str
    ) -> None:
        dbname = str(conninfo.conninfo_to_dict(pg_dsn)["dbname"])
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(f'GRANT ALL ON SCHEMA public TO "{postgres.PASSWORD_ROLE}"')
        with pool.open_pool(pg_server.password_dsn(dbname)) as ledger, ledger.connection() as conn:
            assert conn.execute("SELECT current_user").fetchone() == (postgres.PASSWORD_ROLE,)

    def test_every_ledger_session_is_in_utc_whatever_zone_the_database_sets(
        self, pg_dsn: str
    ) -> None:
        # The ledger's months are UTC months; in Europe/Berlin a month after 1 March 00:00 UTC
        # is 31 March 23:00 UTC.
        step = "SELECT timestamptz '2026-03-01 00:00+00' + interval '1 month'"
        april = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET timezone = 'Europe/Berlin'").format(
                    sql.Identifier(str(conninfo.conninfo_to_dict(pg_dsn)["dbname"]))
                )
            )
        with psycopg.connect(pg_dsn) as raw:
            assert raw.execute(step).fetchone() != (april,)
        with pool.connect(pg_dsn) as conn:
            assert conn.info.transaction_status is pq.TransactionStatus.IDLE
            assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
            assert conn.execute(step).fetchone() == (april,)
        with pool.connect(pg_dsn, autocommit=True) as conn:
            assert conn.execute(step).fetchone() == (april,)
        with pool.open_pool(pg_dsn, max_size=1) as ledger, ledger.connection() as conn:
            assert conn.execute(step).fetchone() == (april,)


class TestSecretsStaySecret:
    def test_a_wrong_password_names_the_target_but_not_the_password(
        self, pg_server: postgres.PostgresCluster, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.DEBUG)
        wrong = "Wr0ng-" + pg_server.password
        dsn = pg_server.password_dsn(password=wrong)
        with pytest.raises(pool.LedgerConnectionError) as caught:
            pool.open_pool(dsn)
        said = everything_said(caught.value, caplog)
        assert f"127.0.0.1:{pg_server.port}/postgres" in str(caught.value)
        assert "password authentication failed" in str(caught.value)
        assert wrong not in said
        assert pg_server.password not in said

    def test_an_unreachable_server_names_the_target_but_not_the_password(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.DEBUG)
        secret = "s3cr3t/with:odd@chars"
        port = ports.free_port()  # nothing listens here
        dsn = f"postgresql://ledger:{urllib.parse.quote(secret, safe='')}@127.0.0.1:{port}/finops"
        with pytest.raises(pool.LedgerConnectionError) as caught:
            pool.connect(dsn, connect_timeout=2)
        said = everything_said(caught.value, caplog)
        assert f"ledger@127.0.0.1:{port}/finops" in str(caught.value)
        assert secret not in said
        assert urllib.parse.quote(secret, safe="") not in said

    @pytest.mark.parametrize(
        "dsn",
        [
            "host=db.example password=hunter2-secret port=notaport",
            "host=db.example password='hunter2-secret' unterminated='oops",
            "postgresql://u:hunter2-secret@db.example:5432/finops?bogus_option=1",
        ],
    )
    def test_a_malformed_connection_string_never_echoes_the_password(
        self, dsn: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        with pytest.raises(pool.LedgerConnectionError) as caught:
            pool.connect(dsn, connect_timeout=2)
        assert "hunter2-secret" not in everything_said(caught.value, caplog)

    def test_the_migrate_command_reports_a_bad_password_without_it(
        self, pg_server: postgres.PostgresCluster
    ) -> None:
        wrong = "Wr0ng-" + pg_server.password
        env = {**os.environ, "POSTGRES_CONNECTION_STRING": pg_server.password_dsn(password=wrong)}
        done = subprocess.run(
            [sys.executable, "-m", "finops.store.migrate"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1
        assert "password authentication failed" in done.stderr
        assert wrong not in done.stdout + done.stderr

    def test_the_server_log_never_records_the_password(
        self, pg_server: postgres.PostgresCluster
    ) -> None:
        wrong = "Wr0ng-" + pg_server.password
        with pytest.raises(pool.LedgerConnectionError):
            pool.connect(pg_server.password_dsn(password=wrong))
        with psycopg.connect(pg_server.password_dsn()) as conn:
            conn.execute("SELECT 1")
        log_text = pg_server.log_file.read_text(errors="replace")
        assert "password authentication failed" in log_text
        assert wrong not in log_text
        assert pg_server.password not in log_text

    def test_redaction_covers_every_spelling_of_the_password(self) -> None:
        secret = "p@ss word/1"
        dsn = f"postgresql://u:{urllib.parse.quote(secret, safe='')}@h/db"
        text = f"a {secret} b {urllib.parse.quote(secret, safe='')} c"
        assert pool.redact(text, dsn) == "a ******** b ******** c"


class TestWaitingAtStart:
    """The manager and the gateway wait for a database that is still starting, not for one
    that refuses them."""

    def test_a_server_that_comes_up_later_is_waited_for(self) -> None:
        with postgres.PostgresCluster() as pg:
            pg.stop_server()
            waits: list[float] = []
            later = threading.Timer(2.0, pg.start_server)
            later.start()
            try:
                pool.wait_until_reachable(
                    pg.admin_dsn, within=30, on_retry=lambda exc, wait: waits.append(wait)
                )
            finally:
                later.join()
            assert waits, "the first attempt cannot have reached a stopped server"
            assert waits[:2] == [1.0, 2.0][: len(waits[:2])]
            with psycopg.connect(pg.admin_dsn) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)

    def test_a_refused_password_is_raised_at_once(
        self, pg_server: postgres.PostgresCluster
    ) -> None:
        retried: list[float] = []
        with pytest.raises(pool.LedgerConnectionError) as err:
            pool.wait_until_reachable(
                pg_server.password_dsn(password="not-it"),
                on_retry=lambda exc, wait: retried.append(wait),
            )
        assert not err.value.transient
        assert retried == []
        assert "not-it" not in str(err.value)

    def test_a_server_that_never_answers_is_given_up_after_the_wait(self) -> None:
        now = [0.0]
        waits: list[float] = []

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            now[0] += seconds

        dsn = f"host=127.0.0.1 port={ports.free_port()} user=nobody dbname=none"
        with pytest.raises(pool.LedgerConnectionError) as err:
            pool.wait_until_reachable(dsn, within=20, sleep=sleep, clock=lambda: now[0])
        assert err.value.transient
        # Backing off 1, 2, 4, 8 s, then what is left of the 20 s, then giving up.
        assert waits == [1.0, 2.0, 4.0, 8.0, 5.0]
        assert "127.0.0.1" in str(err.value)


@pytest.mark.parametrize(
    ("message", "again"),
    [
        (
            'connection failed: connection to server at "10.0.0.5", port 5432 failed: '
            "Connection refused\n\tIs the server running on that host and accepting TCP/IP "
            "connections?",
            True,
        ),
        ('failed to resolve host "db.svc": [Errno -2] Name or service not known', True),
        ("connection timeout expired", True),
        ("FATAL:  the database system is starting up", True),
        ("FATAL:  the database system is not yet accepting connections", True),
        ('FATAL:  password authentication failed for user "finops"', False),
        ('FATAL:  database "finopsdb" does not exist', False),
        ('FATAL:  role "finops" does not exist', False),
    ],
)
def test_only_unreachable_or_starting_servers_are_worth_another_try(
    message: str, again: bool
) -> None:
    assert pool.transient(message) is again

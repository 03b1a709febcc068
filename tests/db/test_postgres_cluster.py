"""The throw-away PostgreSQL cluster the db tier and the sandbox run on."""

from __future__ import annotations

import os
import pathlib
import pwd
import signal
import subprocess
import sys

import psycopg
import pytest

from finops_devenv import postgres


def test_the_session_server_trades_durability_for_speed(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("fsync", "full_page_writes", "synchronous_commit", "listen_addresses")
        }
    assert settings == {
        "fsync": "off",
        "full_page_writes": "off",
        "synchronous_commit": "off",
        "listen_addresses": "127.0.0.1",
    }


def test_settings_given_are_added_to_the_defaults_or_replace_them() -> None:
    given = {"shared_buffers": "32MB", "fsync": "on"}
    with (
        postgres.PostgresCluster(settings=given) as cluster,
        psycopg.connect(cluster.admin_dsn) as conn,
    ):
        found = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
            for name in ("shared_buffers", "fsync", "full_page_writes")
        }
    assert found == {"shared_buffers": "32MB", "fsync": "on", "full_page_writes": "off"}


def test_the_server_runs_as_the_postgres_user_when_we_are_root(
    pg_server: postgres.PostgresCluster,
) -> None:
    owner = pwd.getpwuid(pg_server.data_dir.stat().st_uid).pw_name
    expected = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    assert owner == expected
    assert pg_server.socket_dir.parent == pg_server.dir


def test_each_test_gets_its_own_empty_database(
    pg_dsn: str, pg_server: postgres.PostgresCluster
) -> None:
    with psycopg.connect(pg_dsn) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
        dbname = conn.info.dbname
    assert tables == (0,)
    assert dbname not in ("postgres", "template1")


def test_two_clusters_run_side_by_side_and_stop_without_a_trace() -> None:
    first = postgres.PostgresCluster().start()
    second = postgres.PostgresCluster().start()
    try:
        assert first.port != second.port
        for cluster in (first, second):
            with psycopg.connect(cluster.admin_dsn) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
        dirs = [first.dir, second.dir]
    finally:
        first.stop()
        second.stop()
    assert not first.running and not second.running
    assert not any(pathlib.Path(d).exists() for d in dirs)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(first.dsn(), connect_timeout=2)


def test_the_password_role_needs_its_password(pg_server: postgres.PostgresCluster) -> None:
    with psycopg.connect(pg_server.password_dsn()) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (postgres.PASSWORD_ROLE,)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(pg_server.password_dsn(password="not-the-password"))


def test_missing_binaries_are_reported_with_where_we_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setenv("FINOPS_PG_BIN", str(tmp_path))
    with pytest.raises(postgres.PostgresError, match=str(tmp_path)):
        postgres.find_bin_dir()


_HOLD_A_CLUSTER = """
import time
from finops_devenv import postgres
with postgres.PostgresCluster() as cluster:
    print(cluster.dir, cluster._proc.pid, flush=True)
    time.sleep(120)
"""


def test_a_process_stopped_by_sigterm_stops_its_server_and_removes_its_directory() -> None:
    script = subprocess.Popen(
        [sys.executable, "-c", _HOLD_A_CLUSTER], stdout=subprocess.PIPE, text=True
    )
    assert script.stdout is not None
    where, server = script.stdout.readline().split()
    assert pathlib.Path(where).is_dir()
    script.send_signal(signal.SIGTERM)
    assert script.wait(timeout=60) == 128 + signal.SIGTERM
    assert not pathlib.Path(where).exists()
    assert not pathlib.Path(f"/proc/{server}").exists()


def test_a_sigterm_handler_of_the_caller_is_kept() -> None:
    def mine(signum: int, frame: object) -> None:
        """Stands for a program's own handler."""

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with postgres.PostgresCluster():
            assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)

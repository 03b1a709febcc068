"""The FOCUS export over a real ledger: the query, the mapping, and `finops export focus`."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import importlib.util
import json
import pathlib
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from finops import cli
from finops.billing import focus
from finops.cli import export
from finops.store import focus as focus_store
from finops.store import mirror
from tests.db import builders
from tests.oracle import charge_rows, focus_columns
from tests.oracle import ledger as oracle_ledger

START = dt.datetime(2026, 3, 31, 22, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
WINDOW = {"start": START, "end": START + 6 * HOUR}


def _subscription(conn: psycopg.Connection[Any], namespace: str, name: str) -> int:
    return mirror.upsert_subscription_version(
        conn,
        cluster=builders.CLUSTER,
        uid=f"uid-{namespace}-{name}",
        namespace=namespace,
        name=name,
        generation=1,
        resource_version="7",
        spec={"offeringRef": {"name": "platform-base"}},
        namespace_labels={"stakater.com/tenant": namespace, "env": "prod"},
    )


def _ledger(conn: psycopg.Connection[Any]) -> list[charge_rows.ChargeRow]:
    """Fee and CPU rows for two namespaces over six hours across a month boundary, plus one
    hour outside the window and one row of another cluster."""
    offering = builders.offering_version(conn)
    rows: list[charge_rows.ChargeRow] = []
    for namespace in ("team-a", "team-b"):
        version = _subscription(conn, namespace, "web")
        uid = f"uid-{namespace}-web"
        for n in range(7):
            hour = START + n * HOUR
            amount = 1_234_567 * (n + 1) + (7 if namespace == "team-b" else 0)
            quantity = Decimal("0.333333333333") * (n + 1)
            for source, qty, price, micros in (
                ("subscription", Decimal(1), 40_000_000, 40_000_000),
                ("cpuHour", quantity, 31_000, amount),
            ):
                rows.append(
                    charge_rows.ChargeRow(
                        builders.CLUSTER,
                        uid,
                        hour,
                        source,
                        qty,
                        price,
                        micros,
                        "USD",
                        n < 4,
                        offering,
                        version,
                    )
                )
    rows.append(
        charge_rows.ChargeRow(
            "other-cluster",
            "uid-x",
            START,
            "cpuHour",
            Decimal(1),
            1,
            999,
            "USD",
            True,
            offering,
            version,
        )
    )
    oracle_ledger.upsert(conn, rows)
    conn.commit()
    return rows


def _in_window(
    rows: list[charge_rows.ChargeRow], namespace: str | None = None
) -> list[charge_rows.ChargeRow]:
    return [
        r
        for r in rows
        if r.cluster == builders.CLUSTER
        and WINDOW["start"] <= r.hour < WINDOW["end"]
        and (namespace is None or r.subscription_uid.startswith(f"uid-{namespace}-"))
    ]


def _ledger_sum(conn: psycopg.Connection[Any], namespace: str | None = None) -> int:
    row = conn.execute(
        """
        SELECT coalesce(sum(c.amount_micros), 0) FROM subscription_charges c
        JOIN subscription_versions v ON v.id = c.subscription_version_id
        WHERE c.cluster = %s AND c.hour >= %s AND c.hour < %s
          AND (%s::text IS NULL OR v.namespace = %s)
        """,
        (builders.CLUSTER, WINDOW["start"], WINDOW["end"], namespace, namespace),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_billed_cost_sums_equal_the_ledger_to_the_micro(conn: psycopg.Connection[Any]) -> None:
    written = _ledger(conn)
    for namespace in (None, "team-a", "team-b"):
        got = list(
            focus_store.charges(
                conn,
                cluster=builders.CLUSTER,
                namespace=namespace,
                batch=3,
                include_unsettled=True,
                **WINDOW,
            )
        )
        assert len(got) == len(_in_window(written, namespace)) > 0
        rows = [focus.row(c) for c in got]
        assert all(focus_columns.problems(r) == [] for r in rows)
        billed = sum((r["BilledCost"] for r in rows), Decimal(0))
        assert isinstance(billed, Decimal)
        assert billed.scaleb(6) == _ledger_sum(conn, namespace)
        assert billed.scaleb(6) == sum(c.amount_micros for c in _in_window(written, namespace))
    conn.rollback()


def test_hours_in_progress_are_left_out_unless_asked_for(conn: psycopg.Connection[Any]) -> None:
    written = _in_window(_ledger(conn))
    settled = list(focus_store.charges(conn, cluster=builders.CLUSTER, **WINDOW))
    assert {(c.subscription_uid, c.hour, c.source) for c in settled} == {
        (r.subscription_uid, r.hour, r.source) for r in written if r.finalized
    }
    assert all(c.finalized for c in settled) and len(settled) < len(written)
    conn.rollback()


def test_rows_carry_the_version_that_priced_them_oldest_hour_first(
    conn: psycopg.Connection[Any],
) -> None:
    _ledger(conn)
    got = list(
        focus_store.charges(
            conn, cluster=builders.CLUSTER, namespace="team-b", include_unsettled=True, **WINDOW
        )
    )
    assert [c.hour for c in got] == sorted(c.hour for c in got)
    assert {c.namespace for c in got} == {"team-b"}
    first = got[0]
    assert (first.subscription, first.offering) == ("web", "platform-base")
    assert first.labels == {"stakater.com/tenant": "team-b", "env": "prod"}
    assert first.quantity == Decimal(1) or first.quantity == Decimal("0.333333333333")
    row = focus.row(first)
    assert row["BillingPeriodStart"] == dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    last = focus.row(got[-1])
    assert last["BillingPeriodStart"] == dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
    conn.rollback()


def test_tags_carry_the_subscription_labels_each_hour_was_priced_under(
    conn: psycopg.Connection[Any], ledger_dsn: str, tmp_path: pathlib.Path
) -> None:
    """Relabelled mid-window: earlier hours keep the old labels, later ones show the new;
    the namespace's labels are there too and win the key both set (`env`)."""
    offering = builders.offering_version(conn)
    relabelled = (("7", {"cost-center": "cc-42", "env": "dev"}), ("8", {"cost-center": "cc-7"}))
    versions = [
        mirror.upsert_subscription_version(
            conn,
            cluster=builders.CLUSTER,
            uid="uid-team-c-web",
            namespace="team-c",
            name="web",
            generation=1,
            resource_version=rv,
            spec={"offeringRef": {"name": "platform-base"}},
            namespace_labels={"stakater.com/tenant": "team-c", "env": "prod"},
            subscription_labels=own,
        )
        for rv, own in relabelled
    ]
    oracle_ledger.upsert(
        conn,
        [
            charge_rows.ChargeRow(
                builders.CLUSTER,
                "uid-team-c-web",
                START + n * HOUR,
                "subscription",
                Decimal(1),
                1_000_000,
                1_000_000,
                "USD",
                True,
                offering,
                versions[n >= 3],
            )
            for n in range(6)
        ],
    )
    conn.commit()
    out = tmp_path / "tags.csv"
    assert export.run(_args(ledger_dsn, out, namespace="team-c")) == 0
    with out.open(newline="", encoding="utf-8") as f:
        tags = [json.loads(r["Tags"]) for r in csv.DictReader(f)]
    before = {"cost-center": "cc-42", "env": "prod", "stakater.com/tenant": "team-c"}
    after = {"cost-center": "cc-7", "env": "prod", "stakater.com/tenant": "team-c"}
    assert tags == [before] * 3 + [after] * 3


def test_rows_stream_from_a_server_side_cursor_a_batch_at_a_time(
    conn: psycopg.Connection[Any],
) -> None:
    _ledger(conn)
    rows = focus_store.charges(
        conn, cluster=builders.CLUSTER, batch=5, include_unsettled=True, **WINDOW
    )
    next(rows)
    open_cursors = conn.execute("SELECT name FROM pg_cursors").fetchall()
    assert [n for (n,) in open_cursors if str(n).startswith("finops_focus_")]
    assert len(list(rows)) == 23
    assert conn.execute("SELECT count(*) FROM pg_cursors").fetchone() == (0,)
    conn.rollback()


def test_a_failed_read_is_a_ledger_read_error(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP TABLE subscription_charges CASCADE")
    with pytest.raises(focus_store.LedgerReadError, match="subscription_charges"):
        list(focus_store.charges(conn, cluster=builders.CLUSTER, **WINDOW))
    conn.rollback()


def _args(dsn: str, out: pathlib.Path | None, **extra: Any) -> argparse.Namespace:
    fields: dict[str, Any] = {
        "dsn": dsn,
        "window_from": "2026-03-31T22:00:00Z",
        "window_to": "2026-04-01T04:00:00Z",
        "out": None if out is None else str(out),
        "namespace": None,
        "cluster": builders.CLUSTER,
        "provider_name": "Acme Platform",
        "include_unsettled": False,
    }
    fields.update(extra)
    return argparse.Namespace(**fields)


def test_finops_export_focus_writes_a_csv_a_spreadsheet_reads(
    conn: psycopg.Connection[Any], ledger_dsn: str, tmp_path: pathlib.Path
) -> None:
    _ledger(conn)
    out = tmp_path / "focus.csv"
    argv = ["export", "focus", "--dsn", ledger_dsn, "--cluster", builders.CLUSTER]
    argv += ["--from", "2026-03-31T22:00:00Z", "--to", "2026-04-01T04:00:00Z"]
    argv += ["--include-unsettled"]
    assert cli.main([*argv, "--out", str(out), "--provider-name", "Acme Platform"]) == 0
    with out.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == focus.NAMES
        rows = list(reader)
    assert len(rows) == 24
    assert sum(Decimal(r["BilledCost"]) for r in rows).scaleb(6) == _ledger_sum(conn)
    assert {r["ProviderName"] for r in rows} == {"Acme Platform"}
    assert {r["SubAccountId"] for r in rows} == {"team-a", "team-b"}
    for r in rows:
        dt.datetime.strptime(r["ChargePeriodStart"], "%Y-%m-%dT%H:%M:%SZ")
        assert r["ChargeCategory"] in {"Usage", "Purchase"}
        assert (r["ConsumedQuantity"] == "") == (r["ChargeCategory"] == "Purchase")
    conn.rollback()


def test_export_refuses_bad_arguments_in_one_line(
    ledger_dsn: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export.run(_args(ledger_dsn, tmp_path / "x.xlsx")) == 1
    assert export.run(_args(ledger_dsn, None, window_from="yesterday")) == 1
    assert export.run(_args(ledger_dsn, None, window_to="2026-03-01T00:00:00Z")) == 1
    assert export.run(_args("", None)) == 1
    password = "s3cret-pw"
    unreachable = f"host=127.0.0.1 port=1 dbname=x user=x password={password}"
    assert export.run(_args(unreachable, None)) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("finops export focus: ") for line in lines)
    assert any(".csv or .parquet" in line for line in lines)
    assert any("RFC 3339" in line for line in lines)
    assert any("before --to" in line for line in lines)
    assert any("cannot connect" in line for line in lines)
    assert password not in "\n".join(lines)


def test_parquet_needs_pyarrow_or_says_so(
    conn: psycopg.Connection[Any],
    ledger_dsn: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _ledger(conn)
    out = tmp_path / "focus.parquet"
    status = export.run(_args(ledger_dsn, out, namespace="team-a"))
    if importlib.util.find_spec("pyarrow") is None:
        assert status == 1
        assert "needs pyarrow" in capsys.readouterr().err
        assert not out.exists()
        return
    import pyarrow.parquet as pq

    assert status == 0
    table = pq.read_table(out)
    assert tuple(table.column_names) == focus.NAMES
    billed = sum(table.column("BilledCost").to_pylist(), Decimal(0))
    assert billed.scaleb(6) == _ledger_sum(conn, "team-a")
    conn.rollback()


def test_a_failed_export_leaves_no_file_behind(
    conn: psycopg.Connection[Any],
    ledger_dsn: str,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn.execute("DROP TABLE subscription_charges CASCADE")
    conn.commit()
    out = tmp_path / "focus.csv"
    assert export.run(_args(ledger_dsn, out)) == 1
    assert "subscription_charges" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []

"""Migration 0022 converts an existing charge ledger into monthly partitions online: every
row kept exactly, charge writes going on throughout, closed hours still refused after."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import psycopg
import pytest

from finops.store import charge_sql, migrate
from tests.db import builders
from tests.oracle import ledger_sums

JAN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
FEB = dt.datetime(2026, 2, 1, tzinfo=dt.UTC)
SUBS = 60
HOURS = 24 * 45  # January and half of February
Key = tuple[str, str, dt.datetime, str]


def _before_partitions() -> list[migrate.Migration]:
    return [m for m in migrate.load() if m.version < 22]


def _old_ledger(conn: psycopg.Connection[Any]) -> None:
    """A ledger as it stood before 0022: January settled and its period closed, February
    open; three sources per Subscription-hour."""
    migrate.apply(conn, _before_partitions())
    conn.execute(
        "INSERT INTO offering_versions (cluster, uid, namespace, name, generation,"
        " resource_version, spec) VALUES ('c', 'o', 'ns', 'o', 1, '1', '{}')"
    )
    conn.execute(
        "INSERT INTO subscription_versions (cluster, uid, namespace, name, generation,"
        " resource_version, spec) SELECT 'c', 'u' || n, 'ns', 's' || n, 1, '1', '{}'"
        " FROM generate_series(0, %s) n",
        (SUBS - 1,),
    )
    conn.execute(
        """
        INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,
            unit_price_micros, amount_micros, currency, finalized, offering_version_id,
            subscription_version_id)
        SELECT 'c', v.uid, h, s, 1, 7, 7 + v.id, 'EUR', h < %s, 1, v.id
        FROM subscription_versions v,
             generate_series(%s::timestamptz, %s::timestamptz, interval '1 hour') h,
             (VALUES ('subscription'), ('cpuHour'), ('ramGbHour')) x(s)
        """,
        (FEB, JAN, JAN + dt.timedelta(hours=HOURS - 1)),
    )
    conn.execute(
        "INSERT INTO billing_periods (cluster, period_start, period_end, label, time_zone,"
        " closed_by_run) VALUES ('c', %s, %s, '2026-01', 'UTC', %s)",
        (JAN, FEB, FEB),
    )


def _rows(conn: psycopg.Connection[Any]) -> dict[Key, tuple[int, bool, int]]:
    rows = conn.execute(
        "SELECT cluster, subscription_uid, hour, source, amount_micros, finalized,"
        " subscription_version_id FROM subscription_charges"
    ).fetchall()
    return {(c, u, h, s): (a, f, v) for c, u, h, s, a, f, v in rows}


class _Writer(threading.Thread):
    """Charge writes in open hours, one small transaction after another, as a charge run's
    would: new hours inserted, open rows rewritten, stale rows deleted. Keeps what it
    committed in `model`, and each commit's time."""

    def __init__(self, dsn: str, model: dict[Key, tuple[int, bool, int]]) -> None:
        super().__init__(daemon=True)
        self.dsn, self.model = dsn, model
        self.stop = threading.Event()
        self.commits: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                step = 0
                while not self.stop.is_set():
                    self._one(conn, step)
                    self.commits.append(time.monotonic())
                    step += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _one(self, conn: psycopg.Connection[Any], step: int) -> None:
        uid = f"u{step % SUBS}"
        vid = step % SUBS + 1
        new_hour = JAN + dt.timedelta(hours=HOURS + step // SUBS)
        old_hour = FEB + dt.timedelta(hours=step % 300)
        with conn.transaction():
            charge_sql.lock(conn, "c")  # as every charge run holds it
            conn.execute(
                "INSERT INTO subscription_charges (cluster, subscription_uid, hour, source,"
                " quantity, unit_price_micros, amount_micros, currency, offering_version_id,"
                " subscription_version_id) VALUES ('c', %s, %s, 'cpuHour', 1, 1, %s, 'EUR', 1, %s)",
                (uid, new_hour, step, vid),
            )
            conn.execute(
                "UPDATE subscription_charges SET amount_micros = amount_micros + 1000"
                " WHERE cluster = 'c' AND subscription_uid = %s AND hour = %s"
                " AND source = 'subscription'",
                (uid, old_hour),
            )
            deleted = conn.execute(
                "DELETE FROM subscription_charges WHERE cluster = 'c' AND subscription_uid = %s"
                " AND hour = %s AND source = 'ramGbHour'",
                (uid, old_hour),
            ).rowcount
        self.model[("c", uid, new_hour, "cpuHour")] = (step, False, vid)
        key = ("c", uid, old_hour, "subscription")
        if key in self.model:
            amount, final, version = self.model[key]
            self.model[key] = (amount + 1000, final, version)
        if deleted:
            del self.model[("c", uid, old_hour, "ramGbHour")]


def _wait_for(writer: _Writer, commits: int) -> None:
    deadline = time.monotonic() + 60
    while len(writer.commits) < commits and writer.error is None:
        assert time.monotonic() < deadline, "the writer made no progress"
        time.sleep(0.01)
    assert writer.error is None, writer.error


def test_the_conversion_keeps_every_row_while_charge_writes_go_on(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _old_ledger(conn)
        model = _rows(conn)
        assert len(model) == SUBS * HOURS * 3
        writer = _Writer(pg_dsn, model)
        writer.start()
        _wait_for(writer, 5)
        began = time.monotonic()
        ran = migrate.apply(conn)
        ended = time.monotonic()
        writes_before_end = len(writer.commits)
        _wait_for(writer, writes_before_end + 5)
        writer.stop.set()
        writer.join()
        assert writer.error is None, writer.error
        assert [m.version for m in ran] == [m.version for m in migrate.load() if m.version >= 22]
        # The writer went on while the rows were copied and indexed.
        during = [t for t in writer.commits if began < t < ended]
        assert len(during) >= 10, (len(during), ended - began)
        gaps = [b - a for a, b in zip(writer.commits, writer.commits[1:], strict=False)]
        print(
            f"conversion of {SUBS * HOURS * 3} rows: {ended - began:.2f} s, {len(during)} "
            f"writer commits meanwhile, longest gap between two {max(gaps) * 1000:.0f} ms"
        )
        # Every row, as the last writer left it; nothing lost, nothing resurrected.
        assert _rows(conn) == model
        kind = conn.execute(
            "SELECT relkind FROM pg_class WHERE oid = 'subscription_charges'::regclass"
        ).fetchone()
        assert kind == ("p",)
        placed = dict(
            conn.execute(
                "SELECT tableoid::regclass::text, count(*) FROM subscription_charges GROUP BY 1"
            ).fetchall()
        )
        assert set(placed) == {"subscription_charges_y2026m01", "subscription_charges_y2026m02"}
        assert ledger_sums.kept_day_sums(conn) == ledger_sums.day_sums(conn)
        invalid = conn.execute(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relname LIKE 'subscription_charges%' AND NOT i.indisvalid"
        ).fetchone()
        assert invalid == (0,)
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="closed"):
            conn.execute(
                "UPDATE subscription_charges SET amount_micros = 0"
                " WHERE hour = %s AND subscription_uid = 'u1'",
                (JAN,),
            )
        leftovers = conn.execute(
            "SELECT to_regclass('subscription_charges_partitioned'),"
            " to_regclass('subscription_charges_changed_meanwhile')"
        ).fetchone()
        assert leftovers == (None, None)


def test_an_interrupted_conversion_starts_again_and_ends_the_same(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _old_ledger(conn)
        model = _rows(conn)
        conversion = next(m for m in migrate.load() if m.version == 22)
        steps = conversion.steps()
        # Run the first half of the steps by hand, as a process killed midway would have.
        for step in steps[: len(steps) // 2]:
            migrate._run_step(conn, step)
        conn.execute(
            "UPDATE subscription_charges SET amount_micros = 1 WHERE hour = %s"
            " AND subscription_uid = 'u2' AND source = 'cpuHour'",
            (FEB,),
        )
        model[("c", "u2", FEB, "cpuHour")] = (1, False, model[("c", "u2", FEB, "cpuHour")][2])
        migrate.apply(conn)
        assert _rows(conn) == model
        assert ledger_sums.kept_day_sums(conn) == ledger_sums.day_sums(conn)
        assert 22 in builders.applied_versions(conn)

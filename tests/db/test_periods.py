"""Billing periods in the real PostgreSQL: closing by the charge run, the database refusing any
change to a closed period, and late data booked as corrections that add up to the truth."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from finops.billing import periods
from finops.collection import charge_plan
from finops.store import charge_inputs, unit
from finops.store import periods as store_periods
from tests.db import builders
from tests.db import periods_support as ps
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger

MINUTE = dt.timedelta(minutes=1)
ACTIVATED = ps.MARCH_END - 5 * ps.HOUR + 17 * MINUTE


def truth(
    conn: psycopg.Connection[Any], cluster: str, billed: list[charge_plan.Billed]
) -> dict[ps.Key, Any]:
    """The closed hours recomputed by the exact oracle from what the ledger holds now."""
    windows = {
        uid: (lo, min(hi, ps.MARCH_END))
        for uid, (lo, hi) in charge_plan.windows(billed, {}, ps.MARCH_END).items()
        if lo < ps.MARCH_END
    }
    offerings, subs = charge_inputs.record_versions(
        conn,
        cluster=cluster,
        offerings=charge_plan.offering_versions(billed),
        subscriptions=charge_plan.subscription_versions(billed),
    )
    wanted = charge_plan.usage_windows(billed, windows)
    inputs = charge_rows.PricedInputs(
        boundary=None,
        windows=windows,
        versions=charge_plan.version_ids(billed, offerings, subs),
        fee_currency="USD",
        priced=oracle_ledger.priced_usage(
            conn,
            cluster=cluster,
            namespace_windows=wanted.per_namespace,
            any_namespace_window=wanted.anywhere,
        ),
    )
    return ps.oracle_by_hour(charge_rows.rows(cluster, billed, inputs, ps.MARCH_END))


def used(conn: psycopg.Connection[Any], cluster: str, book: int) -> None:
    """Half a core in `ns-a` every hour from five hours before the end of March to four after."""
    for k in range(-5, 4):
        at = ps.MARCH_END + k * ps.HOUR
        ps.allocation(conn, cluster, hour=at, name="p", book=book, currency="USD")


def march(conn: psycopg.Connection[Any], cluster: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT * FROM subscription_charges WHERE cluster = %s AND hour < %s ORDER BY 2, 3, 4",
        (cluster, ps.MARCH_END),
    ).fetchall()


def test_a_month_closes_after_its_grace_and_late_data_becomes_corrections(
    ledger_dsn: str,
) -> None:
    cluster = "close-1"
    with unit.connect(ledger_dsn) as conn:
        eur, usd = ps.books(conn, cluster)
        billed = [
            ps.subscription("a", activated=ACTIVATED, fee="hourly"),
            ps.subscription("b", activated=ACTIVATED, fee="daily", meters=("cpuHour",)),
            ps.subscription("c", activated=ACTIVATED, fee=None),
        ]
        used(conn, cluster, usd)
        first = ps.run(conn, cluster, ps.MARCH_END + ps.HOUR, billed)
        assert first.periods is not None and first.periods.closed == ()
        assert first.periods.waiting is not None and "grace" in first.periods.waiting[1]
        closing = ps.run(conn, cluster, ps.MARCH_END + 2 * ps.HOUR, billed)
        assert closing.periods is not None
        assert [p.label for p in closing.periods.closed] == ["2026-03"]
        closed = march(conn, cluster)
        assert closed and all(row[8] for row in closed)  # every March row final

        # Late data for closed hours: a new row, a changed row, a re-priced hour (EUR).
        for before, name, cpu in ((2, "late", "1.25"), (3, "p", "0.75")):
            at = ps.MARCH_END - before * ps.HOUR
            ps.allocation(conn, cluster, hour=at, name=name, book=usd, currency="USD", cpu=cpu)
        ps.reprice(conn, cluster, ps.MARCH_END - 4 * ps.HOUR, eur, "EUR")
        later = ps.run(conn, cluster, ps.MARCH_END + 3 * ps.HOUR, billed)
        assert later.periods is not None and later.periods.corrections.rows > 0
        assert march(conn, cluster) == closed
        assert ps.ledger_by_hour(conn, cluster, ps.MARCH_END) == truth(conn, cluster, billed)

        again = ps.run(conn, cluster, ps.MARCH_END + 3 * ps.HOUR, billed)
        assert again.periods is not None and again.periods.corrections.rows == 0
        booked = conn.execute(
            "SELECT DISTINCT booked_in FROM charge_corrections WHERE cluster = %s", (cluster,)
        ).fetchall()
        assert booked == [(ps.MARCH_END,)]


def test_a_back_dated_deactivation_is_credited_in_the_next_period(ledger_dsn: str) -> None:
    cluster = "close-2"
    with unit.connect(ledger_dsn) as conn:
        _, usd = ps.books(conn, cluster)
        billed = [ps.subscription("d", activated=ACTIVATED, fee=fee) for fee in ("daily",)]
        billed.append(ps.subscription("e", activated=ACTIVATED, fee="90m"))
        used(conn, cluster, usd)
        ps.run(conn, cluster, ps.MARCH_END + 2 * ps.HOUR, billed)
        assert store_periods.closed_through(conn, cluster=cluster) == ps.MARCH_END
        gone = ps.MARCH_END - 3 * ps.HOUR + 20 * MINUTE
        billed = [
            ps.subscription("d", activated=ACTIVATED, deactivated=gone, fee="daily"),
            ps.subscription("e", activated=ACTIVATED, deactivated=gone, fee="90m"),
        ]
        result = ps.run(conn, cluster, ps.MARCH_END + 3 * ps.HOUR, billed)
        assert result.periods is not None
        assert result.periods.corrections.micros["USD"] < 0
        assert ps.ledger_by_hour(conn, cluster, ps.MARCH_END) == truth(conn, cluster, billed)


def test_the_close_rechecks_only_hours_changed_after_they_were_charged(ledger_dsn: str) -> None:
    """Each hour's allocation rows arrive before the run that charges it, as the allocation
    job writes them; one hour is changed again after it was charged final. Only that change
    waits for the close: the others are in the charge rows already, and keeping them made
    every close recompute the whole month."""
    cluster = "close-3"
    changed = ps.MARCH_END - 3 * ps.HOUR
    with unit.connect(ledger_dsn) as conn:
        _, usd = ps.books(conn, cluster)
        billed = [ps.subscription("g", activated=ACTIVATED, fee="hourly", meters=("cpuHour",))]
        for k in range(-5, 3):
            at = ps.MARCH_END + k * ps.HOUR
            ps.allocation(conn, cluster, hour=at, name="p", book=usd, currency="USD")
            if at == changed + 2 * ps.HOUR:
                ps.allocation(
                    conn, cluster, hour=changed, name="p", book=usd, currency="USD", cpu="1.5"
                )
            if at == ps.MARCH_END + ps.HOUR:
                waiting = conn.execute(
                    "SELECT hour FROM allocation_changes WHERE cluster = %s AND hour < %s",
                    (cluster, ps.MARCH_END),
                ).fetchall()
                assert waiting == [(changed,)]
            result = ps.run(conn, cluster, at + ps.HOUR, billed)
            if at == ps.MARCH_END + ps.HOUR:
                assert result.periods is not None
                assert [p.label for p in result.periods.closed] == ["2026-03"]
        corrected = conn.execute(
            "SELECT DISTINCT hour FROM charge_corrections WHERE cluster = %s", (cluster,)
        ).fetchall()
        assert corrected == [(changed,)]
        assert ps.ledger_by_hour(conn, cluster, ps.MARCH_END) == truth(conn, cluster, billed)


def test_an_allocation_change_while_the_settle_rechecks_is_recorded_after_it(
    ledger_dsn: str,
) -> None:
    """The settle reads the changed hours, recomputes them and forgets them in one
    transaction. An allocation write to one of those hours meanwhile waits for it to commit,
    and its change is recorded again after: the next run rechecks it. Without the wait the
    allocation trigger found the hour still recorded and added nothing, and the settle then
    forgot a change it had never read."""
    cluster = "close-race"
    hour = ps.MARCH_END - 3 * ps.HOUR
    with unit.connect(ledger_dsn) as conn, unit.connect(ledger_dsn) as other:
        _, usd = ps.books(conn, cluster)
        ps.allocation(conn, cluster, hour=hour, name="p", book=usd, currency="USD")
        pid = other.info.backend_pid
        with unit.begin(conn) as work:
            assert store_periods.changed_hours(conn, cluster=cluster) == [hour]
            writer = threading.Thread(
                target=ps.allocation,
                args=(other, cluster),
                kwargs={"hour": hour, "name": "p", "book": usd, "currency": "USD", "cpu": "2"},
            )
            writer.start()
            deadline = time.monotonic() + 10
            while writer.is_alive() and time.monotonic() < deadline:
                waiting = conn.execute(
                    "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                    (pid,),
                ).fetchone()
                if waiting and waiting[0]:
                    break
                time.sleep(0.02)
            assert writer.is_alive(), "the allocation write did not wait for the settle"
            store_periods.forget_changed_hours(conn, cluster=cluster, hours=[hour])
            work.commit()
        writer.join(timeout=10)
        recorded = conn.execute(
            "SELECT hour FROM allocation_changes WHERE cluster = %s", (cluster,)
        ).fetchall()
        assert recorded == [(hour,)]


class TestTheDatabaseKeepsClosedPeriods:
    @pytest.fixture
    def closed(self, ledger_dsn: str) -> tuple[str, str]:
        cluster = "frozen"
        with unit.connect(ledger_dsn) as conn:
            _, usd = ps.books(conn, cluster)
            billed = [ps.subscription("f", activated=ACTIVATED)]
            ps.allocation(
                conn, cluster, hour=ps.MARCH_END - ps.HOUR, name="p", book=usd, currency="USD"
            )
            ps.run(conn, cluster, ps.MARCH_END + 2 * ps.HOUR, billed)
            assert store_periods.closed_through(conn, cluster=cluster) == ps.MARCH_END
        return ledger_dsn, cluster

    @pytest.mark.parametrize(
        "statement",
        [
            "UPDATE subscription_charges SET amount_micros = amount_micros + 1"
            " WHERE cluster = %(c)s AND hour < %(end)s",
            "DELETE FROM subscription_charges WHERE cluster = %(c)s AND hour = %(end)s - interval"
            " '1 hour'",
            "INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,"
            " unit_price_micros, amount_micros, currency, offering_version_id,"
            " subscription_version_id) SELECT cluster, 'other', hour, source, quantity,"
            " unit_price_micros, amount_micros, currency, offering_version_id,"
            " subscription_version_id FROM subscription_charges WHERE cluster = %(c)s LIMIT 1",
            "UPDATE subscription_charges SET hour = hour - interval '20 days'"
            " WHERE cluster = %(c)s AND hour = %(end)s",
            "TRUNCATE subscription_charges",
            "UPDATE billing_periods SET period_end = period_end + interval '1 hour'",
            "DELETE FROM billing_periods",
            "TRUNCATE billing_periods CASCADE",
        ],
    )
    def test_any_change_to_a_closed_period_is_refused(
        self, closed: tuple[str, str], statement: str
    ) -> None:
        dsn, cluster = closed
        with psycopg.connect(dsn, autocommit=True) as conn:
            before = builders.table_contents(conn, "subscription_charges")
            with pytest.raises(psycopg.errors.IntegrityConstraintViolation):
                conn.execute(statement.encode(), {"c": cluster, "end": ps.MARCH_END})
            assert builders.table_contents(conn, "subscription_charges") == before

    def test_open_hours_still_change(self, closed: tuple[str, str]) -> None:
        dsn, cluster = closed
        with psycopg.connect(dsn, autocommit=True) as conn:
            changed = conn.execute(
                "UPDATE subscription_charges SET finalized = false WHERE cluster = %s"
                " AND hour >= %s",
                (cluster, ps.MARCH_END),
            ).rowcount
        assert changed > 0

    def test_a_period_closes_only_in_order_and_only_when_settled(
        self, closed: tuple[str, str]
    ) -> None:
        dsn, cluster = closed
        may = ps.MARCH_END + dt.timedelta(days=30)
        june = may + dt.timedelta(days=31)
        with psycopg.connect(dsn, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="next period"):
                conn.execute(
                    "INSERT INTO billing_periods (cluster, period_start, period_end, label,"
                    " time_zone, closed_by_run) VALUES (%s, %s, %s, '2026-05', 'UTC', %s)",
                    (cluster, may, june, june),
                )
            conn.execute(
                "UPDATE subscription_charges SET finalized = false WHERE cluster = %s"
                " AND hour >= %s",
                (cluster, ps.MARCH_END),
            )
            with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="not final"):
                conn.execute(
                    "INSERT INTO billing_periods (cluster, period_start, period_end, label,"
                    " time_zone, closed_by_run) VALUES (%s, %s, %s, '2026-04', 'UTC', %s)",
                    (cluster, ps.MARCH_END, may, may),
                )

    def test_corrections_are_history_too(self, closed: tuple[str, str]) -> None:
        dsn, cluster = closed
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT subscription_uid, offering_version_id, subscription_version_id"
                " FROM subscription_charges WHERE cluster = %s LIMIT 1",
                (cluster,),
            ).fetchone()
            assert row is not None
            insert = (
                "INSERT INTO charge_corrections (cluster, booked_in, booked_by_run,"
                " corrects_period, subscription_uid, hour, source, quantity, unit_price_micros,"
                " amount_micros, currency, offering_version_id, subscription_version_id)"
                " VALUES (%s, %s, %s, %s, %s, %s, 'subscription', 0, 0, -5, 'USD', %s, %s)"
            )
            last = ps.MARCH_END - ps.HOUR
            start = ps.MARCH_END - dt.timedelta(days=31)
            with pytest.raises(psycopg.errors.IntegrityConstraintViolation, match="first open"):
                conn.execute(insert, (cluster, start, last, start, row[0], last, row[1], row[2]))
            conn.execute(insert, (cluster, ps.MARCH_END, last, start, row[0], last, row[1], row[2]))
            for statement in (
                "UPDATE charge_corrections SET amount_micros = 0",
                "DELETE FROM charge_corrections",
                "TRUNCATE charge_corrections",
            ):
                with pytest.raises(psycopg.errors.IntegrityConstraintViolation):
                    conn.execute(statement.encode())


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    zone=st.sampled_from(["UTC", "Asia/Tokyo", "America/New_York", "Pacific/Kiritimati"]),
    offsets=st.lists(st.integers(-30, 30), min_size=1, max_size=4),
)
def test_the_first_charged_period_is_the_one_of_the_earliest_charge_row(
    ledger_dsn: str, zone: str, offsets: list[int]
) -> None:
    """Closing asks the ledger for an hour of the first charged period: read from the day sums
    when no period starts inside the earliest charged day, from the rows when one does.
    Either way it is the period of the earliest row, in zones whose months start at UTC
    midnight, mid-afternoon the day before, early morning, or at ten the morning before."""
    calendar = periods.Calendar(zone, dt.timedelta(hours=2))
    hours = [ps.MARCH_END + k * ps.HOUR for k in offsets]
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE subscription_charges")
        offering = builders.offering_version(conn)
        rows = []
        for i, at in enumerate(hours):
            version = builders.subscription_version(conn, uid=f"first-{i}")
            rows.append((builders.CLUSTER, f"first-{i}", at, offering, version))
        with conn.cursor() as cur:
            cur.executemany(
                """
                INSERT INTO subscription_charges (cluster, subscription_uid, hour, source,
                    quantity, unit_price_micros, amount_micros, currency, finalized,
                    offering_version_id, subscription_version_id)
                VALUES (%s, %s, %s, 'subscription', 1, 1, 1, 'USD', true, %s, %s)
                """,
                rows,
            )
        facts = store_periods.facts(conn, cluster=builders.CLUSTER, calendar=calendar)
    assert facts.first_hour is not None
    assert calendar.period_of(facts.first_hour, None) == calendar.period_of(min(hours), None)

"""The FOCUS CSV that PostgreSQL makes (`finops.store.focus_csv`) is byte for byte the CSV of
the row builder (`focus.row` over `focus_store.charges`, written by `focus.csv_lines`), over
generated ledgers: fees of every alignment with whole and prorated quantities (ties of the
half-even rounding included), usage with factor and absolute margins (negative ones too), rows
with and without a PriceBook, Offerings with no or broken fee terms, labels on the namespace
and the Subscription sharing keys and holding characters CSV and JSON must escape (and `%`,
which the line templates must), unsettled hours, a closed period with corrections, a calendar
that is not UTC, one namespace or all, currencies including none, and an empty provider name
or one with a line break."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from finops.billing import focus, periods
from finops.store import allocations, focus_csv, mirror, unit
from finops.store import focus as focus_store
from finops.store import periods as store_periods
from tests.db import periods_support as ps

START = dt.datetime(2026, 3, 31, 18, tzinfo=dt.UTC)
HOURS = 12
HOUR = dt.timedelta(hours=1)
SOURCES = ("subscription", "cpuHour", "gpuHour", "ramGbHour", "pvGbHour", "networkGb")
METERS = SOURCES[1:]
ODD = "a,\"b\n\r\\é\u2028\x01 ;'{}[]:%s%1$s"
NAMESPACES = ("team-a", "team,b", 'te"am')
_clusters = itertools.count()


def _fee() -> st.SearchStrategy[dict[str, Any] | None]:
    price = st.one_of(
        st.sampled_from([1, 3, 7, 8192, 16384 * 5, 40_000_000]), st.integers(1, 10**8)
    )
    aligned = st.fixed_dictionaries(
        {
            "priceMicros": price,
            "tickAlignment": st.sampled_from(["HourBoundary", "DayBoundary", "MonthBoundary"]),
            "period": st.sampled_from(["1", "3", "6"]),
        }
    )
    activated = st.fixed_dictionaries(
        {
            "priceMicros": price,
            "tickAlignment": st.just("ActivatedAt"),
            "period": st.sampled_from(["90m", "1h", "3600s", "2h"]),
        }
    )
    broken = st.just({"tickAlignment": "HourBoundary", "period": "1"})
    return st.one_of(st.none(), aligned, activated, broken)


_margin = st.fixed_dictionaries(
    {},
    optional={
        "factorMilli": st.integers(0, 3000),
        "absoluteMicros": st.integers(-50_000, 50_000),
    },
)
_spec = st.builds(
    lambda fee, margins: {
        "pricing": {
            **({} if fee is None else {"subscriptionFee": fee}),
            "resourcePricing": [{"name": m, "margins": margin} for m, margin in margins.items()],
        }
    },
    _fee(),
    st.dictionaries(st.sampled_from(METERS), _margin, max_size=3),
)
_rates = st.dictionaries(st.sampled_from(list(allocations.RATE_COLUMNS)), st.integers(0, 10**6))
_labels = st.dictionaries(
    st.sampled_from(["env", "team", "x/y", ODD[:4], "é"]),
    st.text(alphabet=ODD + "xyz", max_size=6),
    max_size=3,
)
_quantity = st.one_of(
    st.integers(0, 5).map(Decimal),
    st.decimals(0, 1000, places=12),
    st.decimals(0, 10, places=3),
    st.sampled_from([Decimal("0.5"), Decimal("1.000000000000"), Decimal("2E+1")]),
)
_charge = st.tuples(
    st.integers(0, 3),  # Subscription version
    st.integers(0, HOURS - 1),
    st.sampled_from(SOURCES),
    _quantity,
    st.one_of(st.sampled_from([0, 1, 8192, 40_000_000]), st.integers(0, 10**8)),
    st.one_of(st.sampled_from([0, 1, 5, 20_000_000]), st.integers(0, 10**9)),
    st.sampled_from(["USD", "EUR", ""]),
    st.booleans(),
    st.integers(0, 2),  # Offering version
    st.integers(-1, 1),  # PriceBook (-1: none)
    st.one_of(st.none(), st.integers(0, 200)),  # minutes into the hour a fee's service starts
)


def _ledger(
    conn: psycopg.Connection[Any],
    cluster: str,
    specs: list[dict[str, Any]],
    rates: list[dict[str, int]],
    labels: list[dict[str, str]],
    charges: list[tuple[Any, ...]],
) -> None:
    """Three Offering versions of `specs`, two PriceBooks of `rates`, four Subscription
    versions (three Subscriptions in three namespaces; label sets from `labels`, two each),
    and the charge rows (as `_charge` draws them; the last one of a key wins)."""
    offerings = [
        mirror.upsert_offering_version(
            conn,
            cluster=cluster,
            uid=f"off-{n}",
            namespace="o" if n else ODD[:3],
            name=f"offer-{n}",
            generation=1,
            resource_version="1",
            spec=spec,
        )
        for n, spec in enumerate(specs)
    ]
    books = [
        allocations.ensure_pricebook(
            conn,
            cluster=cluster,
            namespace="p",
            name=f"book-{n}",
            uid=f"book-{n}",
            currency="USD",
            rates=rates[n],
        )
        for n in range(2)
    ]
    subs = [
        mirror.upsert_subscription_version(
            conn,
            cluster=cluster,
            uid=f"uid-{n % 3}",
            namespace=NAMESPACES[n % 3],
            name=f"sub-{n % 3}",
            generation=1 + n // 3,
            resource_version=str(n),
            spec={},
            namespace_labels=labels[2 * n],
            subscription_labels=labels[2 * n + 1],
        )
        for n in range(4)
    ]
    rows = {}
    for sub, h, source, qty, price, amount, cur, final, off, book, minutes in charges:
        hour = START + h * HOUR
        covers = None
        if source == "subscription" and minutes is not None:
            begin = hour + dt.timedelta(minutes=minutes)
            covers = (begin, begin + dt.timedelta(minutes=minutes + 1))
        rows[(f"uid-{sub % 3}", hour, source)] = (
            qty,
            price,
            amount,
            cur,
            final,
            offerings[off],
            subs[sub],
            None if book < 0 else books[book],
            *(covers or (None, None)),
        )
    for key, values in rows.items():
        conn.execute(
            """
            INSERT INTO subscription_charges (cluster, subscription_uid, hour, source, quantity,
                unit_price_micros, amount_micros, currency, finalized, offering_version_id,
                subscription_version_id, pricebook_id, covers_start, covers_end)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            """,
            (cluster, *key, *values),
        )


def python_csv(conn: psycopg.Connection[Any], provider: str, **window: Any) -> bytes:
    """The oracle: the row builder's CSV."""
    index = focus_store.period_index(conn, cluster=window["cluster"])
    rows = (focus.row(c, provider, index) for c in focus_store.charges(conn, **window))
    return "".join(focus.csv_lines(rows)).encode()


def database_csv(conn: psycopg.Connection[Any], provider: str, **window: Any) -> tuple[bytes, int]:
    export = focus_csv.CsvExport(conn, provider=provider, **window)
    return b"".join(export.lines()), export.rows


def same_bytes(
    conn: psycopg.Connection[Any], cluster: str, start: dt.datetime, end: dt.datetime
) -> int:
    """Every namespace choice, settled or not, three provider names: the same bytes; the
    number of rows compared."""
    compared = 0
    for namespace, unsettled in itertools.product((None, *NAMESPACES), (False, True)):
        for provider in (focus.DEFAULT_PROVIDER, "", 'Acme, "Inc" 100%\r\n\x1e\x1f'):
            window = {
                "cluster": cluster,
                "start": start,
                "end": end,
                "namespace": namespace,
                "include_unsettled": unsettled,
            }
            expected = python_csv(conn, provider, **window)
            made, rows = database_csv(conn, provider, **window)
            assert made == expected, (window, provider)
            assert rows == len(list(csv.reader(io.StringIO(expected.decode(), newline="")))) - 1
            compared += rows
    return compared


@seed(20261206)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]))
def test_the_database_csv_is_the_row_builders_byte_for_byte(
    ledger_dsn: str, data: Any, zone: str
) -> None:
    cluster = f"gen-{next(_clusters)}"
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        store_periods.save_calendar(conn, cluster=cluster, calendar=periods.Calendar(zone))
        _ledger(
            conn,
            cluster,
            data.draw(st.lists(_spec, min_size=3, max_size=3)),
            data.draw(st.lists(_rates, min_size=2, max_size=2)),
            data.draw(st.lists(_labels, min_size=8, max_size=8)),
            data.draw(st.lists(_charge, max_size=30)),
        )
    first = data.draw(st.integers(0, HOURS - 1))
    last = data.draw(st.integers(first + 1, HOURS + 1))
    with psycopg.connect(ledger_dsn) as conn:
        same_bytes(conn, cluster, START + first * HOUR, START + last * HOUR)


def test_rounding_ties_are_the_same_bytes(ledger_dsn: str) -> None:
    """The rows a random ledger seldom holds: prorated fees whose quantity is a tie of the
    half-even rounding (1 micro of an 8192-micro period rounds down to even, 3 of it up), a
    fee of no terms priced by its row, usage of no quantity at a margin below zero."""
    cluster = "edges"
    fee = {"priceMicros": 8192, "tickAlignment": "HourBoundary", "period": "1"}
    specs: list[dict[str, Any]] = [
        {"pricing": {"subscriptionFee": fee, "resourcePricing": []}},
        {"pricing": {"resourcePricing": [{"name": "cpuHour", "margins": {"absoluteMicros": -9}}]}},
        {"pricing": {}},
    ]
    rates = [{"cpuHour": 5}, {}]
    labels = [{"env": "prod"}, {"env": "dev", "x": ODD}] * 4
    charges = [
        (0, 0, "subscription", Decimal(0), 8192, 1, "USD", True, 0, -1, 30),
        (1, 0, "subscription", Decimal(0), 8192, 3, "USD", True, 0, -1, None),
        (0, 1, "subscription", Decimal(0), 8192, 1, "", True, 2, -1, None),
        (2, 1, "subscription", Decimal(1), 0, 0, "", True, 2, -1, None),
        (0, 2, "cpuHour", Decimal(0), 0, 0, "EUR", True, 1, 0, None),
        (1, 2, "cpuHour", Decimal("0.000"), 0, 0, "EUR", True, 1, 0, None),
        (2, 2, "cpuHour", Decimal("1.5"), 0, 0, "EUR", False, 1, 0, None),
    ]
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        _ledger(conn, cluster, specs, rates, labels, charges)
    with psycopg.connect(ledger_dsn) as conn:
        made, _ = database_csv(conn, "p", cluster=cluster, start=START, end=START + HOURS * HOUR)
        assert b",0.000122070312," in made and b",0.000366210938," in made, made.decode()
        assert same_bytes(conn, cluster, START, START + HOURS * HOUR) > 0


def test_the_rows_of_an_hour_come_in_the_row_builders_order(ledger_dsn: str) -> None:
    """Every Subscription bills several sources in the same hours, so the order within an
    hour (namespace, name, source, uid) is the rows' only difference; a second version of
    one Subscription takes over in the second hour."""
    cluster = "ordered"
    fee = {"priceMicros": 7, "tickAlignment": "HourBoundary", "period": "1"}
    specs: list[dict[str, Any]] = [{"pricing": {"subscriptionFee": fee}}] * 3
    charges = [
        (sub, hour, source, Decimal(1), 7, 7, "USD", True, 0, 0, None)
        for hour, subs in ((0, (0, 1, 2)), (1, (3, 1, 2)))
        for sub in subs
        for source in ("subscription", "cpuHour", "ramGbHour", "networkGb")
    ]
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        _ledger(conn, cluster, specs, [{"cpuHour": 1}, {}], [{}] * 8, charges)
    with psycopg.connect(ledger_dsn) as conn:
        made, rows = database_csv(conn, "p", cluster=cluster, start=START, end=START + 2 * HOUR)
        assert rows == len(charges)
        table = list(csv.DictReader(io.StringIO(made.decode(), newline="")))
        first_hour = [(r["SubAccountId"], r["x_ChargeSource"]) for r in table[:12]]
        assert first_hour == sorted(first_hour), "an hour's rows are sorted by namespace first"
        assert same_bytes(conn, cluster, START, START + 2 * HOUR) > 0


def test_a_closed_month_and_its_corrections_are_the_same_bytes(ledger_dsn: str) -> None:
    """The charge run's own ledger (ps.generated_ledger): a closed March, corrections booked
    in April, every fee alignment, margins, two currencies."""
    cluster = "generated"
    with unit.connect(ledger_dsn) as conn:
        ps.generated_ledger(conn, cluster)
    with psycopg.connect(ledger_dsn) as conn:
        start = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
        end = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
        corrections = conn.execute(
            "SELECT count(*) FROM charge_corrections WHERE cluster = %s", (cluster,)
        ).fetchone()
        assert corrections is not None and corrections[0] > 0
        assert same_bytes(conn, cluster, start, end) > 0


def test_a_row_whose_key_the_tables_miss_stops_the_export(ledger_dsn: str) -> None:
    """Rows written between the key tables and the rows (only outside one snapshot) fail the
    statement instead of making a line short of cells."""
    cluster = "changed"
    fee = {"priceMicros": 5, "tickAlignment": "HourBoundary", "period": "1"}
    specs: list[dict[str, Any]] = [{"pricing": {"subscriptionFee": fee}}] * 3
    charges = [(0, 0, "subscription", Decimal(1), 5, 5, "USD", True, 0, -1, None)]
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        _ledger(conn, cluster, specs, [{}, {}], [{}] * 8, charges)
    with psycopg.connect(ledger_dsn) as conn:
        window = focus_csv.Window(
            cluster=cluster,
            start=START,
            end=START + HOUR,
            namespace=None,
            unsettled=False,
            provider="p",
        )
        index = focus_store.period_index(conn, cluster=cluster)
        params = {**window, **focus_csv.key_tables(conn, window, index)}
        params["k_uid"] = ["another-uid"]
        statement = f"COPY ({focus_csv.rows_statement(None)}) TO STDOUT"
        with (
            pytest.raises(psycopg.errors.InvalidTextRepresentation, match="changed during"),
            conn.cursor() as cur,
            cur.copy(statement, params) as copy,
        ):
            list(copy)


def test_a_window_is_exported_a_billing_period_at_a_time(ledger_dsn: str) -> None:
    """The parts cover the window's whole hours exactly, cut where a period ends (in the
    cluster's calendar); the key tables refuse a window of two periods, naming it."""
    cluster = "two-periods"
    with psycopg.connect(ledger_dsn, autocommit=True) as conn:
        store_periods.save_calendar(
            conn, cluster=cluster, calendar=periods.Calendar("Europe/Berlin")
        )
    with psycopg.connect(ledger_dsn) as conn:
        index = focus_store.period_index(conn, cluster=cluster)
        window = focus_csv.Window(
            cluster=cluster,
            start=START + dt.timedelta(minutes=30),
            end=START + 7 * HOUR + dt.timedelta(minutes=30),
            namespace=None,
            unsettled=False,
            provider="p",
        )
        parts = list(focus_csv.by_period(window, index))
        # March ends at 22:00 UTC in Berlin; the first whole hour is 19:00, the last 01:00.
        berlin_april = dt.datetime(2026, 3, 31, 22, tzinfo=dt.UTC)
        assert [(p["start"], p["end"]) for p in parts] == [
            (START + HOUR, berlin_april),
            (berlin_april, START + 8 * HOUR),
        ]
        assert all(p["cluster"] == cluster and p["provider"] == "p" for p in parts)
        with pytest.raises(ValueError, match="spans 2 billing periods"):
            focus_csv.key_tables(conn, window, index)
        inside = focus_csv.Window(
            **{**window, "start": START, "end": START + dt.timedelta(minutes=59)}
        )
        assert list(focus_csv.by_period(inside, index)) == [
            focus_csv.Window(**{**window, "start": START, "end": START + HOUR})
        ]
        empty = focus_csv.Window(
            **{
                **window,
                "start": START + dt.timedelta(minutes=1),
                "end": START + dt.timedelta(minutes=59),
            }
        )
        assert list(focus_csv.by_period(empty, index)) == []

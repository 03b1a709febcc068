"""subscription_charges: idempotent upserts, the watermark, and the sums status.costs reads."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from finops.store import charges
from tests.db import builders
from tests.db.builders import CLUSTER, HOUR, hour
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger


@dataclasses.dataclass
class Versions:
    offering: int
    subscription: int


@pytest.fixture
def versions(conn: psycopg.Connection[Any]) -> Versions:
    made = Versions(builders.offering_version(conn), builders.subscription_version(conn))
    conn.commit()
    return made


def fee(
    at: int, v: Versions, *, uid: str = "sub-uid-1", finalized: bool = True
) -> charge_rows.ChargeRow:
    return charge_rows.ChargeRow(
        cluster=CLUSTER,
        subscription_uid=uid,
        hour=hour(at),
        source="subscription",
        quantity=Decimal(1),
        unit_price_micros=40_000_000,
        amount_micros=40_000_000,
        currency="USD",
        finalized=finalized,
        offering_version_id=v.offering,
        subscription_version_id=v.subscription,
    )


def cpu(
    at: int, v: Versions, core_hours: str, *, finalized: bool = True, uid: str = "sub-uid-1"
) -> charge_rows.ChargeRow:
    quantity = Decimal(core_hours)
    return dataclasses.replace(
        fee(at, v, uid=uid, finalized=finalized),
        source="cpuHour",
        quantity=quantity,
        unit_price_micros=31_620,
        amount_micros=int((quantity * 31_620).to_integral_value()),
    )


def write(conn: psycopg.Connection[Any], rows: list[charge_rows.ChargeRow]) -> int:
    written = oracle_ledger.upsert(conn, rows)
    conn.commit()
    return written


class TestUpserts:
    def test_rows_read_back_with_every_column_exact(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        row = cpu(0, versions, "2.123456789012345")
        write(conn, [row])
        stored = conn.execute(
            """
            SELECT cluster, subscription_uid, hour, source, quantity, unit_price_micros,
                   amount_micros, currency, finalized, offering_version_id, subscription_version_id
            FROM subscription_charges
            """
        ).fetchall()
        assert [charge_rows.ChargeRow(*r) for r in stored] == [row]

    def test_replaying_the_same_charges_leaves_the_table_byte_identical(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        rows = [fee(h, versions) for h in range(24)] + [
            cpu(h, versions, f"0.{h + 1}") for h in range(24)
        ]
        first = write(conn, rows)
        before = builders.table_contents(conn, "subscription_charges")
        second = write(conn, list(reversed(rows)))
        assert (first, second) == (48, 0)
        assert builders.table_contents(conn, "subscription_charges") == before

    def test_a_finalized_charge_keeps_the_price_it_was_billed_at(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        write(conn, [cpu(0, versions, "1")])
        repriced = dataclasses.replace(
            cpu(0, versions, "1"), unit_price_micros=99, amount_micros=99
        )
        assert write(conn, [repriced]) == 0
        assert conn.execute("SELECT unit_price_micros FROM subscription_charges").fetchone() == (
            31_620,
        )

    def test_an_open_charge_is_recomputed_and_promoted(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        write(conn, [cpu(0, versions, "1", finalized=False)])
        write(conn, [cpu(0, versions, "3", finalized=True)])
        stored = conn.execute("SELECT quantity, amount_micros, finalized FROM subscription_charges")
        assert stored.fetchall() == [(Decimal("3"), 94_860, True)]

    def test_unknown_sources_and_naive_hours_are_refused(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        with pytest.raises(ValueError, match="source"):
            oracle_ledger.upsert(
                conn, [dataclasses.replace(fee(0, versions), source="spotCPUHour")]
            )
        with pytest.raises(ValueError, match="timezone-aware"):
            oracle_ledger.upsert(
                conn, [dataclasses.replace(fee(0, versions), hour=dt.datetime(2026, 4, 1))]
            )

    def test_a_charge_must_reference_mirrored_versions(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        orphan = dataclasses.replace(
            fee(0, versions), subscription_version_id=versions.subscription + 99
        )
        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            oracle_ledger.upsert(conn, [orphan])


class TestWatermark:
    def test_no_finalized_charge_means_no_watermark(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        write(conn, [fee(0, versions, finalized=False)])
        assert oracle_ledger.watermark(conn, cluster=CLUSTER, subscription_uid="sub-uid-1") is None

    def test_the_watermark_is_the_latest_finalized_hour(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        write(conn, [fee(h, versions) for h in range(5)] + [fee(5, versions, finalized=False)])
        assert oracle_ledger.watermark(conn, cluster=CLUSTER, subscription_uid="sub-uid-1") == hour(
            4
        )

    def test_an_open_usage_hour_holds_the_watermark_back(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        # Fees are final through hour 4 but usage for hour 2 waits on allocations.
        rows = [fee(h, versions) for h in range(5)]
        rows += [cpu(h, versions, "1") for h in range(2)] + [cpu(2, versions, "1", finalized=False)]
        write(conn, rows)
        assert oracle_ledger.watermark(conn, cluster=CLUSTER, subscription_uid="sub-uid-1") == hour(
            1
        )

    def test_a_missing_fee_hour_holds_the_watermark_back_so_it_is_written_again(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        write(conn, [fee(h, versions) for h in (0, 1, 3, 4)] + [fee(5, versions, finalized=False)])
        assert oracle_ledger.watermark(conn, cluster=CLUSTER, subscription_uid="sub-uid-1") == hour(
            1
        )

    def test_watermarks_are_per_subscription(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        write(conn, [fee(h, versions) for h in range(3)] + [fee(0, versions, uid="sub-uid-2")])
        marks = charges.watermarks(
            conn, cluster=CLUSTER, subscription_uids=["sub-uid-1", "sub-uid-2", "sub-uid-3"]
        )
        assert marks == {"sub-uid-1": hour(2), "sub-uid-2": hour(0)}


class TestSums:
    def test_sums_per_subscription_and_source_cover_a_half_open_window(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        rows = [fee(h, versions) for h in range(6)] + [cpu(h, versions, "0.5") for h in range(6)]
        rows.append(fee(3, versions, uid="sub-uid-2"))
        rows.append(fee(5, versions, finalized=False, uid="sub-uid-2"))
        write(conn, rows)
        totals = oracle_ledger.sums(
            conn,
            cluster=CLUSTER,
            subscription_uids=["sub-uid-1", "sub-uid-2", "sub-uid-9"],
            start=hour(1),
            end=hour(5),
        )
        expected_cpu = sum(r.amount_micros for r in rows[6:12] if hour(1) <= r.hour < hour(5))
        assert totals == {
            "sub-uid-1": {"subscription": 4 * 40_000_000, "cpuHour": expected_cpu},
            "sub-uid-2": {"subscription": 40_000_000},
        }

    def test_open_rows_count_towards_the_current_figure(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        write(conn, [fee(0, versions, finalized=False)])
        totals = oracle_ledger.sums(
            conn, cluster=CLUSTER, subscription_uids=["sub-uid-1"], start=hour(0), end=hour(1)
        )
        assert totals == {"sub-uid-1": {"subscription": 40_000_000}}

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        cells=st.lists(
            st.tuples(
                st.sampled_from(["sub-uid-1", "sub-uid-2", "sub-uid-3"]),
                # 08:00 on 29 March to 01:00 on 3 April: UTC midnights and a month's end.
                st.integers(-217, 88),
                st.sampled_from(["subscription", "cpuHour", "ramGbHour"]),
                st.integers(0, 10**12),
                st.booleans(),
            ),
            max_size=40,
        ),
        at=st.integers(-220, 90),
    )
    def test_the_bucket_windows_are_the_sums_of_their_rows(
        self,
        conn: psycopg.Connection[Any],
        versions: Versions,
        cells: list[tuple[str, int, str, int, bool]],
        at: int,
    ) -> None:
        """The charge run's read-back (month and day sums less the rows from the hour on)
        against the exact sums of the rows of `[month, day)`, `[day, hour)` and `[hour, hour +
        1h)`: hours at, before and after UTC midnights and a month's end, with rows after the
        hour (a replayed hour) and sums that come to zero."""
        conn.execute("TRUNCATE subscription_charges")
        # Each row under its own Subscription's version, as the charge run writes them: the
        # month and day sums are read through the versions.
        own = {
            uid: Versions(versions.offering, builders.subscription_version(conn, uid=uid))
            for uid in {uid for uid, *_ in cells}
        }
        rows = {
            (uid, h, source): dataclasses.replace(
                fee(h, own[uid], uid=uid, finalized=final), source=source, amount_micros=amount
            )
            for uid, h, source, amount, final in cells
        }
        write(conn, list(rows.values()))
        uids = ["sub-uid-1", "sub-uid-2", "sub-uid-9"]
        h = hour(at)
        day = h.replace(hour=0)
        month = day.replace(day=1)
        sums = charges.bucket_sums(conn, cluster=CLUSTER, subscription_uids=uids, hour=h)
        exact = [
            oracle_ledger.sums(conn, cluster=CLUSTER, subscription_uids=uids, start=s, end=e)
            for s, e in ((month, day), (day, h), (h, h + HOUR))
        ]
        nonzero = [
            {u: kept for u, per in w.items() if (kept := {s: a for s, a in per.items() if a})}
            for w in exact
        ]
        assert list(sums) == nonzero

    def test_bucket_sums_ask_for_a_whole_hour(self, conn: psycopg.Connection[Any]) -> None:
        args = {"cluster": CLUSTER, "subscription_uids": ["sub-uid-1"]}
        with pytest.raises(ValueError, match="is not a whole hour"):
            charges.bucket_sums(conn, **args, hour=hour(0) + dt.timedelta(minutes=1))
        with pytest.raises(ValueError):
            charges.bucket_sums(conn, **args, hour=hour(0).replace(tzinfo=None))
        assert charges.bucket_sums(conn, **args, hour=hour(0)) == ({}, {}, {})

    def test_charges_roll_up_per_tenant_through_their_subscription_version(
        self, conn: psycopg.Connection[Any], versions: Versions
    ) -> None:
        globex = Versions(
            versions.offering, builders.subscription_version(conn, uid="sub-2", tenant="globex")
        )
        loose = Versions(
            versions.offering, builders.subscription_version(conn, uid="sub-3", tenant=None)
        )
        rows = [fee(0, versions), fee(1, versions), fee(0, globex, uid="sub-2")]
        rows += [fee(0, loose, uid="sub-3"), cpu(0, globex, "2", uid="sub-2")]
        write(conn, rows)
        by_tenant = oracle_ledger.sums_by_tenant(conn, cluster=CLUSTER, start=hour(0), end=hour(24))
        globex_only = oracle_ledger.sums_for_tenant(
            conn, cluster=CLUSTER, tenant="globex", start=hour(0), end=hour(24)
        )
        assert by_tenant == {
            "acme": {"subscription": 80_000_000},
            "globex": {"subscription": 40_000_000, "cpuHour": 63_240},
            None: {"subscription": 40_000_000},
        }
        assert globex_only == by_tenant["globex"]

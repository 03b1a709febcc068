"""Case 7: a soak of simulated hours with Subscriptions churning through the real controller.

The controller runs as a process against the ledger; each simulated hour the test deletes
some Subscriptions, creates as many, and deactivates a family (deleting a parent deactivates
its children, which a later hour deletes), waits for the controller to settle (activation,
finalizer, `deactivatedAt`), then runs the allocation job and the charge job for the hour.
Two extra hours without churn let the last deletions settle.

The controller stamps `activatedAt`/`deactivatedAt` from the real clock, and the run takes
minutes while it simulates a day, so every activation and deactivation falls within the
first real hour: churn here exercises object and finalizer turnover and a day of hourly
ledger growth, not long histories per churned Subscription.

Invariants at the end: the fee ledger equals an oracle computed here from the stamped times
(ticks every hour from `activatedAt`, the last one at the first tick at or after
`deactivatedAt`, hours before the last run final); no Subscription is left deleting (no
leaked finalizer); the controller's resident memory stays flat (printed every hour).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from tests.faults import _harness as h
from tests.kube import _hierarchy as hier
from tests.kube.test_controller_support import ControllerProcess, running_controller

from finops_devenv import controlplane

SUBSCRIPTIONS = int(os.environ.get("FAULTS_SOAK_SUBSCRIPTIONS", "500"))
HOURS = 24
SETTLE_HOURS = 2
FAMILY = 5  # a parent and four children
CHURN = SUBSCRIPTIONS // 50  # plain Subscriptions deleted and created per hour
PRICE = 1_000_000
FEE = {"tickAlignment": "ActivatedAt", "period": "60m", "priceMicros": PRICE}


def rss_kib(proc: ControllerProcess) -> int:
    assert proc.proc is not None
    with open(f"/proc/{proc.proc.pid}/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1])


class Soak:
    """The churning population of one namespace, and the simulated clock.

    The controller stamps `activatedAt`/`deactivatedAt` from the real clock, but a soak
    lasting minutes simulates a day; so once the controller has stamped a time, the test
    moves it to the simulated minute of the hour the change happened in (as the jobs' clock
    is pinned to the simulated hour), keeping every stamp after the runs that came before.
    """

    def __init__(self, uni: h.Universe, start: dt.datetime) -> None:
        self.uni = uni
        self.start = start
        self.hour = start
        self.serial = 0
        self.plain: list[str] = []
        self.families: list[list[str]] = []
        self.deactivated_children: list[str] = []
        self.activated: dict[str, dt.datetime] = {}
        self.deactivated: dict[str, dt.datetime] = {}
        self.times: dict[str, tuple[dt.datetime, dt.datetime | None]] = {}
        self.created = self.deleted = 0

    def _at(self, offset: int) -> dt.datetime:
        return self.hour + h.MINUTE * (1 + (self.serial + offset) % 50)

    def _create(self, names: list[str], parent: str | None = None) -> None:
        with self.uni.kube.http() as client:
            for name in names:
                body = hier.subscription_body(name, self.uni.namespace, "hourly", parent=parent)
                resp = client.post(hier.path("Subscription", self.uni.namespace), json=body)
                assert resp.status_code == 201, resp.text
                self.activated[name] = self._at(0)
        self.created += len(names)

    def _end(self, names: list[str], delete: bool) -> None:
        with self.uni.kube.http() as client:
            for name in names:
                # After any activation of the hour (minutes 1-50), before its runs (minute 52).
                self.deactivated.setdefault(name, self.hour + 51 * h.MINUTE)
                if delete:
                    resp = client.delete(hier.path("Subscription", self.uni.namespace, name))
                    assert resp.status_code in (200, 202), resp.text
                    self.deleted += 1

    def _name(self, kind: str) -> str:
        self.serial += 1
        return f"{kind}-{self.serial:05d}"

    def grow(self, plain: int, families: int) -> None:
        names = [self._name("s") for _ in range(plain)]
        self._create(names)
        self.plain += names
        for _ in range(families):
            parent = self._name("p")
            self._create([parent])
            children = [self._name("c") for _ in range(FAMILY - 1)]
            self._create(children, parent=parent)
            self.families.append([parent, *children])

    def churn(self, hour: dt.datetime) -> None:
        """Delete the oldest plain ones and the children deactivated last hour; deactivate
        the oldest family by deleting its parent; then grow back to the same size."""
        self.hour = hour
        gone, self.plain = self.plain[:CHURN], self.plain[CHURN:]
        self._end(gone + self.deactivated_children, delete=True)
        family, self.families = self.families[0], self.families[1:]
        self._end(family[:1], delete=True)
        self._end(family[1:], delete=False)
        self.deactivated_children = family[1:]
        self.grow(CHURN, 1)

    def settle(self, timeout: float = 240.0) -> None:
        """Wait until the controller has activated and guarded every live Subscription and
        stamped `deactivatedAt` on every ending one; then move the stamps to simulated time
        and record them."""
        live = set(self.plain) | {n for f in self.families for n in f}

        def done() -> dict[str, dict[str, Any]] | None:
            subs = self.uni.subscriptions()
            for name, obj in subs.items():
                status = obj.get("status") or {}
                guarded = h.FINALIZER in (obj["metadata"].get("finalizers") or [])
                if name in live and not (status.get("activatedAt") and guarded):
                    return None
                if name in self.deactivated and not status.get("deactivatedAt"):
                    return None
            return subs

        deadline = time.monotonic() + timeout
        while (subs := done()) is None:
            assert time.monotonic() < deadline, "the controller did not settle"
            time.sleep(0.5)
        for name, obj in subs.items():
            status = obj["status"]
            want = {"activatedAt": h.rfc(self.activated[name])}
            if name in self.deactivated:
                want["deactivatedAt"] = h.rfc(self.deactivated[name])
            if any(status.get(k) != v for k, v in want.items()):
                self.uni.put_status(name, **want)
            self.times[obj["metadata"]["uid"]] = (
                self.activated[name],
                self.deactivated.get(name),
            )


def oracle(
    times: dict[str, tuple[dt.datetime, dt.datetime | None]], last: dt.datetime
) -> dict[tuple[str, dt.datetime], tuple[int, int, bool]]:
    """(uid, hour) → (ticks, micros, finalized) of the hourly `ActivatedAt` fee: a tick at
    every hour after `activatedAt`, the last at the first tick at or after `deactivatedAt`;
    one row per hour from the activation hour through the last tick's hour (or the last run)."""
    rows: dict[tuple[str, dt.datetime], tuple[int, int, bool]] = {}
    for uid, (act, deact) in times.items():
        end = None
        if deact is not None:
            end = act + h.HOUR * -((act - deact) // h.HOUR)  # first tick at or after deact
        hour = act.replace(minute=0, second=0, microsecond=0)
        stop = last
        if end is not None:
            closing = end - dt.timedelta(microseconds=1)
            stop = min(last, closing.replace(minute=0, second=0, microsecond=0))
        while hour <= stop:
            k = max(1, 1 + (hour - act) // h.HOUR)
            tick = act + k * h.HOUR  # the first tick after `hour`
            ticks = int(hour < tick <= hour + h.HOUR and (end is None or tick <= end))
            rows[(uid, hour)] = (ticks, ticks * PRICE, hour < last)
            hour += h.HOUR
    return rows


def fee_ledger(dsn: str) -> dict[tuple[str, dt.datetime], tuple[int, int, bool]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT subscription_uid, hour, quantity, amount_micros, finalized "
            "FROM subscription_charges WHERE source = 'subscription'"
        ).fetchall()
    return {(u, hr.astimezone(h.UTC)): (int(q), int(a), bool(f)) for u, hr, q, a, f in rows}


def soak_namespace(kube: controlplane.ControlPlane, uni: h.Universe) -> dict[str, str]:
    """The soak's namespace and CostJobs; the controller's environment."""
    uni.namespace = f"soak-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(uni.namespace, labels=h.TENANT_LABELS)
    for name, kind in (
        ("allocations", "ResourceCostCollection"),
        ("charges", "SubscriptionChargeCollection"),
    ):
        uni.post("costjobs", h.make_object("CostJob", name, {"type": kind, "interval": "1h"}))
    return {
        **hier.NO_WEBHOOKS,
        "POSTGRES_CONNECTION_STRING": uni.dsn,
        "CLUSTER_ID": h.CLUSTER,
        "FINOPS_RESYNC_SECONDS": "600",
    }


class Day:
    """The simulated hours: churn, let the controller settle, run both jobs; time each phase
    and sample the controller's RSS after every hour."""

    def __init__(self, uni: h.Universe, soak: Soak, proc: ControllerProcess) -> None:
        self.uni, self.soak, self.proc = uni, soak, proc
        self.rss: list[int] = []
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def spent(self, what: str) -> Iterator[None]:
        began = time.monotonic()
        yield
        self.seconds[what] = round(self.seconds.get(what, 0.0) + time.monotonic() - began, 1)

    def hour(self, k: int, at: dt.datetime, churn: bool) -> None:
        if churn:
            with self.spent("churn"):
                self.soak.churn(at)
            with self.spent("controller settling"):
                self.soak.settle()
        for mode in (h.ALLOCATIONS, h.CHARGES):
            with self.spent(f"{mode} runs"):
                code, seen = self.uni.run(mode, at + 52 * h.MINUTE)
            assert code == 0, (mode, k, seen[-5:])
        self.rss.append(rss_kib(self.proc))
        print(f"[faults] soak hour {k}: controller RSS {self.rss[-1]} KiB", flush=True)


def test_a_day_of_churn_through_the_controller_ends_with_the_oracle_ledger_and_no_leaks(
    universes: Callable[[], h.Universe], kube: controlplane.ControlPlane
) -> None:
    started = time.monotonic()
    uni = universes()
    env = soak_namespace(kube, uni)
    # Simulated hours start after the real clock, so no stamp the controller wrote is later.
    start = dt.datetime.now(h.UTC).replace(minute=0, second=0, microsecond=0) + h.HOUR
    soak = Soak(uni, start)
    with running_controller(kube, uni.namespace, env=env, skip_db=False) as proc:
        uni.post("offerings", hier.offering_body("hourly", uni.namespace, fee=FEE))
        families = SUBSCRIPTIONS // 10 // FAMILY
        soak.grow(SUBSCRIPTIONS - families * FAMILY, families)
        soak.settle()
        day = Day(uni, soak, proc)
        for k in range(HOURS + SETTLE_HOURS):
            day.hour(k, start + h.HOUR * k, churn=k < HOURS)
        assert proc.healthy()
    last = start + h.HOUR * (HOURS + SETTLE_HOURS - 1)
    leftovers = [
        n for n, o in uni.subscriptions().items() if o["metadata"].get("deletionTimestamp")
    ]
    assert not leftovers, f"finalizers never released: {leftovers}"
    want = oracle(soak.times, last)
    got = fee_ledger(uni.dsn)
    assert got == want
    rss = day.rss
    warm = max(rss[: HOURS // 4])
    assert rss[-1] <= warm * 1.25 + 16_384, f"controller RSS grew: {rss}"
    h.write_figures(
        "case7-soak",
        {
            "subscriptions_live": SUBSCRIPTIONS,
            "simulated_hours": HOURS + SETTLE_HOURS,
            "created": soak.created,
            "deleted": soak.deleted,
            "subscriptions_billed": len(soak.times),
            "fee_rows_compared": len(got),
            "controller_rss_kib": {"first": rss[0], "max": max(rss), "last": rss[-1]},
            "controller_rss_series_kib": rss,
            "seconds": round(time.monotonic() - started),
            "seconds_by_phase": day.seconds,
        },
    )

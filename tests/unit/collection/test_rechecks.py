"""Which closed hours a charge run recomputes: term changes, gaps, changed allocation hours."""

from __future__ import annotations

import datetime as dt

from finops.collection import rechecks

H = dt.timedelta(hours=1)
T0 = dt.datetime(2026, 3, 31, 12, tzinfo=dt.UTC)
CLOSED = rechecks.Closed(dt.datetime(2026, 3, 1, tzinfo=dt.UTC), T0 + 12 * H)
NOW = T0 + 20 * H


def sub(uid: str = "a", **kw: object) -> rechecks.Charged:
    base: dict[str, object] = {
        "uid": uid,
        "activated_at": T0 + dt.timedelta(minutes=20),
        "deactivated_at": None,
        "offering_version_id": 1,
        "bills_usage": True,
        "last_hour": None,
        "window": (CLOSED.through, NOW + H),
    }
    base.update(kw)
    return rechecks.Charged(**base)  # type: ignore[arg-type]


def record(**kw: object) -> rechecks.TermsRecord:
    base: dict[str, object] = {
        "activated_at": T0 + dt.timedelta(minutes=20),
        "deactivated_at": None,
        "offering_version_id": 1,
        "charged_through": NOW,
    }
    base.update(kw)
    return rechecks.TermsRecord(**base)  # type: ignore[arg-type]


def test_same_terms_and_no_changes_recheck_nothing() -> None:
    plan = rechecks.plan([sub()], {"a": record()}, CLOSED, NOW, [], None)
    assert plan.windows == {} and plan.records["a"].recheck is None
    assert plan.records["a"].charged_through == NOW


def test_a_back_dated_deactivation_rechecks_closed_hours_now_and_the_rest_later() -> None:
    gone = T0 + 3 * H + dt.timedelta(minutes=10)
    plan = rechecks.plan(
        [sub(deactivated_at=gone, last_hour=T0 + 3 * H)], {"a": record()}, CLOSED, NOW, [], None
    )
    assert plan.windows == {"a": (T0 + 3 * H, CLOSED.through)}
    assert plan.records["a"].recheck == (CLOSED.through, NOW)
    assert plan.records["a"].deactivated_at == gone


def test_pending_hours_wait_until_their_period_has_closed() -> None:
    pending = record(recheck=(CLOSED.through, NOW))
    plan = rechecks.plan([sub()], {"a": pending}, CLOSED, NOW, [], None)
    assert plan.windows == {} and plan.records["a"].recheck == (CLOSED.through, NOW)
    later = rechecks.Closed(CLOSED.first, NOW + 2 * H)
    charged = record(recheck=(CLOSED.through, NOW), charged_through=NOW + 30 * H)
    plan = rechecks.plan([sub()], {"a": charged}, later, NOW + 30 * H, [], None)
    assert plan.windows == {"a": (CLOSED.through, NOW)} and plan.records["a"].recheck is None


def test_a_new_subscription_activated_in_a_closed_period_is_charged_for_it() -> None:
    plan = rechecks.plan([sub()], {}, CLOSED, NOW, [], None)
    assert plan.windows == {"a": (T0, CLOSED.through)}


def test_a_subscription_that_failed_across_the_close_is_caught_up_once() -> None:
    stuck = sub(window=(T0 + 5 * H, NOW + H))
    before_close = record(charged_through=CLOSED.first)
    plan = rechecks.plan([stuck], {"a": before_close}, CLOSED, NOW, [], None)
    assert plan.windows == {"a": (T0 + 5 * H, CLOSED.through)}
    again = rechecks.plan([stuck], plan.records, CLOSED, NOW, [], None)
    assert again.windows == {}


def test_changed_allocation_hours_are_rechecked_once_closed_for_usage_alive_then() -> None:
    subs = [sub("a"), sub("b", bills_usage=False), sub("c", activated_at=T0 + 9 * H)]
    records = {s.uid: record(activated_at=s.activated_at) for s in subs}
    closed_hour, open_hour, recent = T0 + 4 * H, CLOSED.through + H, NOW
    plan = rechecks.plan(subs, records, CLOSED, NOW, [closed_hour, open_hour, recent], NOW - H)
    assert plan.windows == {"a": (closed_hour, closed_hour + H)}
    assert plan.pending_hours == [open_hour]
    assert plan.done_hours == [closed_hour, recent]


def test_closed_hours_are_cut_off_the_charge_windows() -> None:
    windows = {"a": (T0, NOW), "b": (T0, T0 + H), "c": (NOW, NOW + H)}
    assert rechecks.clip(windows, CLOSED.through) == {
        "a": (CLOSED.through, NOW),
        "c": (NOW, NOW + H),
    }
    assert rechecks.clip(windows, None) == windows


def test_only_records_that_differ_from_the_recorded_ones_are_written_again() -> None:
    later = rechecks.Closed(CLOSED.first, NOW + 2 * H)
    plan = rechecks.plan([sub("same"), sub("moved"), sub("new")], {}, later, NOW, [], None)
    recorded = {"same": plan.records["same"], "moved": record()}
    changed = rechecks.changed(plan.records, recorded)
    assert set(changed) == {"moved", "new"}
    assert changed["moved"].charged_through == NOW + 2 * H
    assert rechecks.changed(plan.records, plan.records) == {}

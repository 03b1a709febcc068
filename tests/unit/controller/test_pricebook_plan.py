"""The PriceBook decision: readiness per book, one winner, statuses and the document."""

from __future__ import annotations

import datetime as dt
from typing import Any

from finops.kube import status
from finops.provisioning import pricebooks

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def book(
    name: str,
    *,
    ns: str = "ns",
    created: str = "2026-01-01T00:00:00Z",
    rates: dict[str, str] | None = None,
    mode: str = "currency",
    annotated: bool = False,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "creationTimestamp": created,
        "generation": 1,
        "resourceVersion": "1",
    }
    if annotated:
        meta["annotations"] = {"finops.stakater.com/active": "true"}
    return {
        "metadata": meta,
        "spec": {"currency": "USD", "valuationMode": mode, "rates": rates or {"cpuHour": "0.031"}},
        "status": status or {},
    }


def by_name(plan: pricebooks.ElectionPlan) -> dict[str, pricebooks.BookPlan]:
    return {bp.name: bp for bp in plan.books}


def test_bad_rate_is_not_ready_and_names_field_and_value() -> None:
    cond = pricebooks.readiness(book("b", rates={"cpuHour": "0.1", "ramGbHour": "0.0000001"}))
    assert (cond.status, cond.reason) == ("False", "PricebookParseFailed")
    assert "ramGbHour" in cond.message and "0.0000001" in cond.message


def test_percent_book_is_ready_trivially() -> None:
    cond = pricebooks.readiness(book("p", mode="percent", rates={"cpuHour": "x"}))
    assert (cond.status, cond.reason) == ("True", "ValidationSucceeded")


def test_newest_book_wins_and_gets_active_pricing_and_activated() -> None:
    plan = pricebooks.plan(
        [book("old"), book("new", created="2026-02-01T00:00:00Z", rates={"networkGiB": "0.02"})],
        NOW,
    )
    assert plan.winner == ("ns", "new")
    new = by_name(plan)["new"]
    assert new.status["active"] is True
    assert new.status["activePricing"]["zoneNetworkEgress"] == "0.02"
    assert new.status["activePricing"]["CPU"] == "0"
    assert [e[1] for e in new.events] == ["Activated"]
    old = by_name(plan)["old"]
    assert old.status["active"] is False and "activePricing" not in old.status
    assert old.events == ()  # never active: no Active condition, no event
    assert plan.document is not None and plan.document["provider"] == "custom"


def test_annotation_beats_incumbent_and_demotes_it() -> None:
    incumbent = book(
        "inc",
        created="2026-02-01T00:00:00Z",
        status={"active": True, "activePricing": {"CPU": "0.031"}},
    )
    plan = pricebooks.plan([incumbent, book("pinned", annotated=True)], NOW)
    assert plan.winner == ("ns", "pinned")
    inc = by_name(plan)["inc"]
    assert inc.changed and "activePricing" not in inc.status
    active = [c for c in inc.status["conditions"] if c["type"] == "Active"]
    assert (active[0]["status"], active[0]["reason"]) == ("False", "Demoted")
    assert "ns/pinned" in active[0]["message"]


def test_settled_status_plans_no_write() -> None:
    first = pricebooks.plan([book("only")], NOW)
    settled = book("only", status=first.books[0].status)
    again = pricebooks.plan([settled], NOW + dt.timedelta(minutes=5))
    assert not again.books[0].changed
    assert again.books[0].events == ()


def test_unready_winner_stays_active_and_leaves_the_document_alone() -> None:
    plan = pricebooks.plan([book("bad", rates={"cpuHour": "99999999999999999"})], NOW)
    assert plan.winner == ("ns", "bad")
    assert plan.document is None
    bad = plan.books[0]
    assert bad.status["active"] is True and bad.status["ready"] == "False"


def test_ties_on_creation_break_by_namespace_then_name() -> None:
    plan = pricebooks.plan([book("b", ns="z"), book("b", ns="a"), book("a", ns="z")], NOW)
    assert plan.winner == ("a", "b")


def test_status_patch_nulls_removed_keys() -> None:
    body = status.patch_body({"activePricing": {"CPU": "1"}, "active": True}, {"active": False})
    assert body == {"active": False, "activePricing": None}

"""`SubscriptionView.parse`: what the reconciler and the charge run read of a Subscription."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from finops.api import views

pytestmark = pytest.mark.unit

UTC = dt.UTC


def _body(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "team-a",
            "name": "db",
            "uid": "u-1",
            "generation": 3,
            "resourceVersion": "42",
            "labels": {"tier": "gold"},
            "finalizers": ["subscriptions.finops.stakater.com/finalizer"],
        },
        "spec": {
            "offeringRef": {"namespace": "catalog", "name": "postgres"},
            "parent": {"subscriptionRef": {"namespace": "team-a", "name": "platform"}},
        },
        "status": status,
    }


def test_a_full_body() -> None:
    view = views.SubscriptionView.parse(
        _body(
            activatedAt="2026-01-02T03:04:05Z",
            deactivatedAt="2026-01-03T00:00:00+02:00",
            compatibilityRoot="root-uid",
            ready="True",
        )
    )
    assert view.key == views.Key("team-a", "db")
    assert str(view.key) == "team-a/db"
    assert (view.uid, view.generation, view.resource_version) == ("u-1", 3, "42")
    assert view.labels == {"tier": "gold"}
    assert view.finalizers == ("subscriptions.finops.stakater.com/finalizer",)
    assert view.offering == views.Key("catalog", "postgres")
    assert view.parent == views.Key("team-a", "platform")
    assert view.compatibility_root == "root-uid"
    assert view.activated_at == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert view.deactivated_at == dt.datetime(2026, 1, 2, 22, 0, tzinfo=UTC)
    assert view.activated and view.deactivated and not view.active
    assert view.ready and not view.deleting and view.problems == ()


def test_an_empty_body_reads_as_nothing_set() -> None:
    view = views.SubscriptionView.parse({})
    assert view.key == views.Key("", "")
    assert (view.uid, view.generation, view.resource_version) == ("", None, "")
    assert view.labels == {} and view.finalizers == ()
    assert view.offering is None and view.parent is None
    assert view.offering_namespace == "" and view.offering_name == ""
    assert view.compatibility_root is None
    assert not (view.activated or view.deactivated or view.active or view.ready or view.deleting)
    assert view.activated_at is None and view.deactivated_at is None
    assert view.spec == {} and view.status == {} and view.problems == ()


def test_odd_shapes_are_read_as_absent() -> None:
    body = _body(activatedAt="")
    body["metadata"]["generation"] = "3"
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body["spec"] = {"offeringRef": {"namespace": "catalog"}, "parent": "platform"}
    view = views.SubscriptionView.parse(body)
    assert view.generation is None
    assert view.deleting
    assert view.offering is None and view.offering_namespace == "catalog"
    assert view.parent is None
    assert not view.activated and view.activated_at is None and view.problems == ()


def test_an_active_subscription() -> None:
    view = views.SubscriptionView.parse(_body(activatedAt="2026-01-02T03:00:00Z"))
    assert view.active and view.deactivated_at is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("yesterday", "is not RFC 3339"),
        ("2026-01-02T03:04:05", "has no timezone"),
        (12345, "must be a string"),
    ],
)
def test_a_bad_timestamp_is_a_problem_not_an_error(value: object, problem: str) -> None:
    view = views.SubscriptionView.parse(_body(activatedAt=value))
    assert view.activated, "the field is written, so the gates see an activated Subscription"
    assert view.activated_at is None
    assert len(view.problems) == 1 and problem in view.problems[0]


def test_problems_keep_activation_first() -> None:
    view = views.SubscriptionView.parse(_body(activatedAt="bad-a", deactivatedAt="bad-d"))
    assert len(view.problems) == 2
    assert "bad-a" in view.problems[0] and "bad-d" in view.problems[1]


def test_parse_time() -> None:
    assert views.parse_time(None) is None
    assert views.parse_time("") is None
    naive = dt.datetime(2026, 1, 1)
    with pytest.raises(views.TimestampError, match="no timezone"):
        views.parse_time(naive)
    aware = dt.datetime(2026, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert views.parse_time(aware) == dt.datetime(2026, 1, 1, tzinfo=UTC)


def test_ref_key() -> None:
    assert views.ref_key({"name": "x"}) == views.Key("", "x")
    assert views.ref_key({"namespace": "n"}) is None
    assert views.ref_key("n/x") is None

"""AdmissionReview in and out: decoding, routing to the decisions, and the refusal encoding."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from tests.unit.hierarchy import builders as b

from finops.controller import webhooks
from finops.hierarchy import admission

OFFERINGS = webhooks.OFFERING_PATH
SUBSCRIPTIONS = webhooks.SUBSCRIPTION_PATH


class Snapshot:
    """Stored objects handed to the decisions, as the cluster LISTs would return them."""

    def __init__(
        self,
        offerings: list[dict[str, Any]] | None = None,
        subscriptions: list[dict[str, Any]] | None = None,
    ) -> None:
        self._offerings = offerings or []
        self._subscriptions = subscriptions or []
        self.reads = 0

    async def offerings(self) -> list[dict[str, Any]]:
        self.reads += 1
        return self._offerings

    async def subscriptions(self) -> list[dict[str, Any]]:
        self.reads += 1
        return self._subscriptions


class Unreadable(Snapshot):
    async def offerings(self) -> list[dict[str, Any]]:
        raise ConnectionError("API server unreachable")


def review(
    operation: str,
    resource: str,
    *,
    obj: Mapping[str, Any] | None = None,
    old: Mapping[str, Any] | None = None,
    namespace: str = b.NS,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
) -> bytes:
    source = obj or old or {}
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "finops.stakater.com", "version": "v1alpha1", "kind": "X"},
            "resource": {
                "group": "finops.stakater.com",
                "version": "v1alpha1",
                "resource": resource,
            },
            "namespace": namespace,
            "name": (source.get("metadata") or {}).get("name", ""),
            "operation": operation,
            "object": obj,
            "oldObject": old,
        },
    }
    return json.dumps(body).encode()


def answer(path: str, body: bytes, reads: webhooks.Reads | None = None) -> dict[str, Any]:
    code, out = asyncio.run(webhooks.handle_review(path, body, reads or Snapshot()))
    assert code == 200, out
    return out


class TestDecoding:
    def test_a_review_yields_uid_operation_resource_and_both_objects(self) -> None:
        old = b.offering("vm")
        req = webhooks.parse_review(review("DELETE", "offerings", old=old, uid="u-1"))
        assert (req.uid, req.operation, req.group, req.resource) == (
            "u-1",
            "DELETE",
            "finops.stakater.com",
            "offerings",
        )
        assert (req.namespace, req.name) == (b.NS, "vm")
        assert req.object is None
        assert req.old_object == old

    @pytest.mark.parametrize(
        "body",
        [
            b"not json",
            b"[]",
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}
            ),
        ],
    )
    def test_anything_but_a_v1_review_with_a_uid_is_refused(self, body: str | bytes) -> None:
        raw = body.encode() if isinstance(body, str) else body
        with pytest.raises(webhooks.BadReviewError):
            webhooks.parse_review(raw)

    def test_an_undecodable_body_is_a_bad_request_without_a_review(self) -> None:
        code, out = asyncio.run(webhooks.handle_review(OFFERINGS, b"{", Snapshot()))
        assert code == 400
        assert "response" not in out

    def test_an_unknown_path_is_not_found(self) -> None:
        body = review("CREATE", "offerings", obj=b.offering("vm"))
        code, _ = asyncio.run(webhooks.handle_review("/validate-other", body, Snapshot()))
        assert code == 404


class TestEncoding:
    def test_an_allowed_answer_echoes_the_uid_and_carries_no_status(self) -> None:
        out = webhooks.review_response("u-7", admission.ALLOWED)
        assert out == {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "u-7", "allowed": True},
        }

    def test_a_refusal_is_a_403_with_the_verdicts_reason_and_exact_message(self) -> None:
        verdict = admission.Verdict(False, "TargetIsSelfReference", "no, not yourself")
        response = webhooks.review_response("u-8", verdict)["response"]
        assert response["uid"] == "u-8"
        assert response["allowed"] is False
        assert response["status"] == {
            "status": "Failure",
            "code": 403,
            "reason": "TargetIsSelfReference",
            "message": "no, not yourself",
        }

    def test_the_answer_round_trips_through_json(self) -> None:
        verdict = admission.Verdict(False, "CircularDependencyDetected", "a -> b -> a")
        out = webhooks.review_response("u-9", verdict)
        assert json.loads(json.dumps(out)) == out


class TestOfferingWebhook:
    def test_create_with_a_cycle_through_stored_offerings_is_refused_and_named(self) -> None:
        reads = Snapshot(offerings=[b.offering("b", requires=["a"])])
        out = answer(
            OFFERINGS, review("CREATE", "offerings", obj=b.offering("a", requires=["b"])), reads
        )
        response = out["response"]
        assert response["allowed"] is False
        assert response["status"]["reason"] == "CircularDependencyDetected"
        assert response["status"]["message"] == (
            f"circular dependency detected: {b.NS}/a -> {b.NS}/b -> {b.NS}/a"
        )

    def test_create_takes_the_namespace_from_the_request_when_the_body_has_none(self) -> None:
        offering = b.offering("a", requires=["a"])
        del offering["metadata"]["namespace"]
        out = answer(OFFERINGS, review("CREATE", "offerings", obj=offering, namespace=b.NS))
        assert out["response"]["status"]["message"] == (
            f"circular dependency detected: {b.NS}/a -> {b.NS}/a"
        )

    def test_create_without_a_cycle_is_allowed(self) -> None:
        reads = Snapshot(offerings=[b.offering("vm")])
        body = review("CREATE", "offerings", obj=b.offering("disk", requires=["vm", "ghost"]))
        assert answer(OFFERINGS, body, reads)["response"]["allowed"] is True

    def test_delete_reads_the_stored_object_and_names_its_dependents(self) -> None:
        reads = Snapshot(
            offerings=[b.offering("disk", requires=["vm"])],
            subscriptions=[b.subscription("s1", "vm")],
        )
        out = answer(OFFERINGS, review("DELETE", "offerings", old=b.offering("vm")), reads)
        status = out["response"]["status"]
        assert status["reason"] == "DependentSubscriptionsExist"
        assert status["message"] == (
            f"offering {b.NS}/vm cannot be deleted: still referenced by subscriptions: "
            f"{b.NS}/s1; still required by dependent resources: {b.NS}/disk"
        )

    def test_delete_without_dependents_is_allowed(self) -> None:
        reads = Snapshot(subscriptions=[b.subscription("s1", "db")])
        out = answer(OFFERINGS, review("DELETE", "offerings", old=b.offering("vm")), reads)
        assert out["response"]["allowed"] is True

    def test_update_is_allowed_without_reading_anything(self) -> None:
        reads = Snapshot()
        obj = b.offering("a", requires=["a"])
        out = answer(OFFERINGS, review("UPDATE", "offerings", obj=obj, old=obj), reads)
        assert out["response"]["allowed"] is True
        assert reads.reads == 0

    def test_a_failed_read_refuses_with_a_500_naming_the_request(self) -> None:
        out = answer(OFFERINGS, review("CREATE", "offerings", obj=b.offering("a")), Unreadable())
        response = out["response"]
        assert response["allowed"] is False
        assert response["status"]["code"] == 500
        assert f"CREATE offerings {b.NS}/a" in response["status"]["message"]
        assert "API server unreachable" in response["status"]["message"]

    def test_a_review_for_another_resource_is_refused(self) -> None:
        body = review("CREATE", "subscriptions", obj=b.subscription("s", "vm"))
        response = answer(OFFERINGS, body)["response"]
        assert response["allowed"] is False
        assert "validates offerings" in response["status"]["message"]


class TestSubscriptionWebhook:
    def test_itself_as_parent_is_refused_as_a_circular_dependency(self) -> None:
        body = review("CREATE", "subscriptions", obj=b.subscription("s", "vm", parent="s"))
        status = answer(SUBSCRIPTIONS, body)["response"]["status"]
        assert status["reason"] == "CircularDependencyDetected"
        assert status["message"] == (
            f"subscription {b.NS}/s cannot name itself as its parent (spec.parent.subscriptionRef)"
        )

    def test_itself_as_target_is_refused_as_a_self_reference(self) -> None:
        target = {
            "apiVersion": "finops.stakater.com/v1alpha1",
            "kind": "Subscription",
            "name": "s",
            "namespace": b.NS,
        }
        sub = b.subscription("s", "vm", lifecycle={"targetRef": target})
        status = answer(SUBSCRIPTIONS, review("CREATE", "subscriptions", obj=sub))["response"][
            "status"
        ]
        assert status["reason"] == "TargetIsSelfReference"
        assert (
            status["message"]
            == f"subscription {b.NS}/s cannot name itself as its lifecycle.targetRef"
        )

    def test_a_target_of_another_kind_with_the_same_name_is_allowed(self) -> None:
        target = {"apiVersion": "v1", "kind": "ConfigMap", "name": "s", "namespace": b.NS}
        sub = b.subscription("s", "vm", lifecycle={"targetRef": target})
        out = answer(SUBSCRIPTIONS, review("CREATE", "subscriptions", obj=sub))
        assert out["response"]["allowed"] is True

    def test_only_creates_are_checked(self) -> None:
        sub = b.subscription("s", "vm", parent="s")
        out = answer(SUBSCRIPTIONS, review("UPDATE", "subscriptions", obj=sub, old=sub))
        assert out["response"]["allowed"] is True


class TestCertificateFiles:
    def test_an_empty_directory_flag_means_the_charts_mount(self) -> None:
        crt, key = webhooks.cert_files("", "tls.crt", "tls.key")
        assert str(crt) == "/tmp/k8s-webhook-server/serving-certs/tls.crt"
        assert str(key) == "/tmp/k8s-webhook-server/serving-certs/tls.key"

    def test_the_flags_name_the_files(self) -> None:
        crt, key = webhooks.cert_files("/certs", "serving.pem", "serving-key.pem")
        assert (str(crt), str(key)) == ("/certs/serving.pem", "/certs/serving-key.pem")


class TestLogging:
    def test_a_refusal_is_logged_with_its_reason_and_message(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        body = review("CREATE", "subscriptions", obj=b.subscription("s", "vm", parent="s"))
        with caplog.at_level(logging.INFO, logger="finops.controller.webhooks"):
            answer(SUBSCRIPTIONS, body)
        [record] = [r for r in caplog.records if r.getMessage() == "admission refused"]
        assert record.reason == "CircularDependencyDetected"  # type: ignore[attr-defined]
        assert "cannot name itself as its parent" in record.refusal  # type: ignore[attr-defined]

    def test_a_failed_decision_is_logged_as_an_error(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        body = review("CREATE", "offerings", obj=b.offering("a"))
        with caplog.at_level(logging.INFO, logger="finops.controller.webhooks"):
            answer(OFFERINGS, body, Unreadable())
        assert [r.levelname for r in caplog.records] == ["ERROR"]

"""PriceBook reconciler on a real API server, with the controller running as a process.

The election is cluster-wide, so every test here starts and ends with no PriceBooks at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from tests.kube.test_controller_support import (
    FINOPS,
    ControllerProcess,
    create,
    delete,
    delete_all_pricebooks,
    deployment,
    events_for,
    get,
    merge_patch,
    running_controller,
    wait_for,
    wait_more_reconciles,
)

from finops.pricing import opencost_document
from finops_devenv import controlplane

DEPLOYMENT = "finops-operator-opencost"


@pytest.fixture
def no_books(kube: controlplane.ControlPlane) -> Iterator[None]:
    delete_all_pricebooks(kube)
    yield
    delete_all_pricebooks(kube)


@pytest.fixture
def controller(
    kube: controlplane.ControlPlane, kube_namespace: str, no_books: None
) -> Iterator[ControllerProcess]:
    create(
        kube,
        f"/apis/apps/v1/namespaces/{kube_namespace}/deployments",
        deployment(DEPLOYMENT, kube_namespace),
    )
    with running_controller(kube, kube_namespace) as proc:
        yield proc


def book_body(name: str, rates: dict[str, str], *, annotated: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if annotated:
        meta["annotations"] = {"finops.stakater.com/active": "true"}
    return {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "PriceBook",
        "metadata": meta,
        "spec": {"currency": "USD", "valuationMode": "currency", "rates": rates},
    }


def books_path(ns: str) -> str:
    return f"{FINOPS}/namespaces/{ns}/pricebooks"


def status(kube: controlplane.ControlPlane, ns: str, name: str) -> dict[str, Any]:
    obj = get(kube, f"{books_path(ns)}/{name}") or {}
    return dict(obj.get("status") or {})


def cond(st: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), None)


def deployment_generation(kube: controlplane.ControlPlane, ns: str) -> int:
    obj = get(kube, f"/apis/apps/v1/namespaces/{ns}/deployments/{DEPLOYMENT}")
    assert obj is not None
    return int(obj["metadata"]["generation"])


def pricing_document(kube: controlplane.ControlPlane, ns: str) -> str | None:
    cm = get(kube, f"/api/v1/namespaces/{ns}/configmaps/{opencost_document.CONFIGMAP_NAME}")
    return None if cm is None else cm["data"][opencost_document.DOCUMENT_KEY]


def wait_two_more_reconciles(proc: ControllerProcess) -> None:
    wait_more_reconciles(proc, "pricebook-controller")


def test_a_book_is_ready_active_rendered_and_opencost_restarted_once(
    kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
) -> None:
    ns = kube_namespace
    rates = {"cpuHour": "0.031", "networkGiB": "0.02", "spotCPUHour": "0.01"}
    create(kube, books_path(ns), book_body("standard", rates))
    st = wait_for(
        lambda: (s := status(kube, ns, "standard")).get("activePricing") and s, what="active"
    )
    assert st["active"] is True and st["ready"] == "True"
    assert cond(st, "Ready")["reason"] == "ValidationSucceeded"  # type: ignore[index]
    assert cond(st, "Active")["reason"] == "Activated"  # type: ignore[index]
    expected = opencost_document.render("standard", rates)
    assert st["activePricing"] == expected
    doc = wait_for(lambda: pricing_document(kube, ns), what="ConfigMap")
    assert json.loads(doc) == expected
    assert json.loads(doc)["internetNetworkEgress"] == "0.02"
    assert json.loads(doc)["RAM"] == "0"
    wait_for(lambda: deployment_generation(kube, ns) == 2, what="one restart")
    restarted_at = get(kube, f"/apis/apps/v1/namespaces/{ns}/deployments/{DEPLOYMENT}")[  # type: ignore[index]
        "spec"
    ]["template"]["metadata"]["annotations"][opencost_document.RESTARTED_AT_ANNOTATION]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", restarted_at)

    # A change that does not touch the document: reconciled, nothing restarted, no new transition.
    transition = cond(st, "Active")["lastTransitionTime"]  # type: ignore[index]
    merge_patch(kube, f"{books_path(ns)}/standard", {"metadata": {"labels": {"team": "a"}}})
    wait_two_more_reconciles(controller)
    assert deployment_generation(kube, ns) == 2
    assert cond(status(kube, ns, "standard"), "Active")["lastTransitionTime"] == transition  # type: ignore[index]
    assert [e["reason"] for e in events_for(kube, ns, "standard")].count("Activated") == 1

    # A real rate change: new content, exactly one more restart.
    merge_patch(kube, f"{books_path(ns)}/standard", {"spec": {"rates": {"cpuHour": "0.05"}}})
    wait_for(lambda: '"0.05"' in (pricing_document(kube, ns) or ""), what="new document")
    wait_for(lambda: deployment_generation(kube, ns) == 3, what="second restart")
    wait_two_more_reconciles(controller)
    assert deployment_generation(kube, ns) == 3
    assert status(kube, ns, "standard")["activePricing"]["CPU"] == "0.05"


def test_election_tiers_demotion_and_sticky_incumbent(
    kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
) -> None:
    ns = kube_namespace
    create(kube, books_path(ns), book_body("first", {"cpuHour": "0.01"}))
    wait_for(lambda: status(kube, ns, "first").get("active") is True, what="first active")

    # Newest wins when nobody is incumbent... but "first" is incumbent now: sticky.
    create(kube, books_path(ns), book_body("second", {"cpuHour": "0.02"}))
    wait_for(lambda: status(kube, ns, "second").get("active") is False, what="second reconciled")
    assert status(kube, ns, "first")["active"] is True
    assert cond(status(kube, ns, "second"), "Active") is None  # never held the slot

    # The annotation beats the incumbent.
    merge_patch(
        kube,
        f"{books_path(ns)}/second",
        {"metadata": {"annotations": {"finops.stakater.com/active": "true"}}},
    )
    wait_for(lambda: status(kube, ns, "second").get("active") is True, what="second active")
    wait_for(lambda: status(kube, ns, "first").get("active") is False, what="first demoted")
    first = status(kube, ns, "first")
    assert "activePricing" not in first
    demoted = cond(first, "Active")
    assert demoted is not None and (demoted["status"], demoted["reason"]) == ("False", "Demoted")
    assert f"{ns}/second" in demoted["message"]
    wait_for(lambda: "Pricebook from: second" in (pricing_document(kube, ns) or ""), what="doc")
    reasons = [e["reason"] for e in events_for(kube, ns, "first")]
    assert reasons.count("Activated") == 1 and reasons.count("Demoted") == 1

    # Deleting the winner hands the slot to the newest remaining book.
    delete(kube, f"{books_path(ns)}/second")
    wait_for(lambda: status(kube, ns, "first").get("active") is True, what="first again")
    wait_for(lambda: "Pricebook from: first" in (pricing_document(kube, ns) or ""), what="doc")


def test_an_unready_winner_keeps_the_last_good_document(
    kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
) -> None:
    ns = kube_namespace
    create(kube, books_path(ns), book_body("good", {"cpuHour": "0.031"}))
    wait_for(lambda: deployment_generation(kube, ns) == 2, what="first restart")
    good_doc = pricing_document(kube, ns)
    create(kube, books_path(ns), book_body("typo", {"ramGbHour": "0.0000001"}, annotated=True))
    st = wait_for(lambda: (s := status(kube, ns, "typo")).get("ready") == "False" and s)
    ready = cond(st, "Ready")
    assert ready is not None and ready["reason"] == "PricebookParseFailed"
    assert "ramGbHour" in ready["message"] and "0.0000001" in ready["message"]
    assert st["active"] is True and "activePricing" not in st
    wait_two_more_reconciles(controller)
    assert pricing_document(kube, ns) == good_doc
    assert deployment_generation(kube, ns) == 2

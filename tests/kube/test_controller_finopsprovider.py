"""FinOpsProvider reconciler on a real API server, in bring-your-own and MTO modes.

MTO's `OpenCost` CRD is not ours; the test installs a minimal stand-in for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.kube.test_controller_support import (
    FINOPS,
    create,
    delete,
    delete_all_pricebooks,
    deployment,
    get,
    merge_patch,
    running_controller,
    wait_for,
    wait_more_reconciles,
)

from finops_devenv import controlplane

DEPLOYMENT = "finops-operator-opencost"
PROVIDER = f"{FINOPS}/finopsproviders/default"
OC_GROUP = "/apis/dependencies.tenantoperator.stakater.com/v1alpha1"
SECRET_NAME = "aws-cur-credentials-5f1e"

OPENCOST_CRD_NAME = "opencosts.dependencies.tenantoperator.stakater.com"
OPENCOST_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": OPENCOST_CRD_NAME},
    "spec": {
        "group": "dependencies.tenantoperator.stakater.com",
        "names": {"kind": "OpenCost", "plural": "opencosts", "singular": "opencost"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def opencost_crd(kube: controlplane.ControlPlane) -> None:
    """Install the stand-in CRD and wait until OpenCost objects can be listed."""
    path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    with kube.http() as client:
        resp = client.post(path, json=OPENCOST_CRD)
        assert resp.status_code in (201, 409), resp.text

    def established() -> bool:
        crd = get(kube, f"{path}/{OPENCOST_CRD_NAME}") or {}
        conds = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    wait_for(established, what="OpenCost CRD established")
    wait_for(lambda: get(kube, f"{OC_GROUP}/opencosts") is not None, what="OpenCost served")


@pytest.fixture
def no_provider(kube: controlplane.ControlPlane) -> Iterator[None]:
    delete(kube, PROVIDER)
    wait_for(lambda: get(kube, PROVIDER) is None, what="no provider")
    yield
    delete(kube, PROVIDER)


@pytest.fixture
def opencost(
    kube: controlplane.ControlPlane, kube_namespace: str, opencost_crd: None, no_provider: None
) -> dict[str, Any]:
    ns = kube_namespace
    delete_all_pricebooks(kube)  # or the PriceBook reconciler would restart OpenCost too
    create(kube, f"/apis/apps/v1/namespaces/{ns}/deployments", deployment(DEPLOYMENT, ns))
    return create(
        kube,
        f"{OC_GROUP}/namespaces/{ns}/opencosts",
        {
            "apiVersion": "dependencies.tenantoperator.stakater.com/v1alpha1",
            "kind": "OpenCost",
            "metadata": {"name": "opencost"},
            "spec": {"opencost": {"customPricing": {"enabled": False}}, "keep": "me"},
        },
    )


def provider(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "FinOpsProvider",
        "metadata": {"name": "default"},
        "spec": spec,
    }


def ready(kube: controlplane.ControlPlane) -> dict[str, Any] | None:
    st = (get(kube, PROVIDER) or {}).get("status") or {}
    return next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), None)


def generation(kube: controlplane.ControlPlane, ns: str) -> int:
    obj = get(kube, f"/apis/apps/v1/namespaces/{ns}/deployments/{DEPLOYMENT}") or {}
    return int(obj["metadata"]["generation"])


def opencost_cr(kube: controlplane.ControlPlane, ns: str) -> dict[str, Any]:
    obj = get(kube, f"{OC_GROUP}/namespaces/{ns}/opencosts/opencost")
    assert obj is not None
    return obj


def test_bring_your_own_reports_status_and_leaves_opencost_alone(
    kube: controlplane.ControlPlane, kube_namespace: str, opencost: dict[str, Any]
) -> None:
    ns = kube_namespace
    with running_controller(kube, ns) as proc:
        create(
            kube,
            f"{FINOPS}/finopsproviders",
            provider({"onpremoptions": {"pricingModelSource": "Pricebook"}}),
        )
        cond = wait_for(lambda: ready(kube), what="Ready condition")
        assert (cond["status"], cond["reason"]) == ("True", "BringYourOwnOpenCost")
        status = (get(kube, PROVIDER) or {})["status"]
        assert status["observedGeneration"] == 1 and status["lastSyncTime"]
        wait_more_reconciles(proc, "finopsprovider-controller")
    assert (
        opencost_cr(kube, ns)["metadata"]["resourceVersion"]
        == opencost["metadata"]["resourceVersion"]
    )
    assert generation(kube, ns) == 1


def test_mto_patches_once_restarts_once_and_reports_an_invalid_option(
    kube: controlplane.ControlPlane, kube_namespace: str, opencost: dict[str, Any]
) -> None:
    ns = kube_namespace
    with running_controller(kube, ns, env={"MTO_ENABLED": "true"}) as proc:
        create(
            kube,
            f"{FINOPS}/finopsproviders",
            provider(
                {
                    "awsoptions": {
                        "cloudIntegrationSecret": SECRET_NAME,
                        "pricingModelSource": "Pricebook",
                    }
                }
            ),
        )
        cond = wait_for(lambda: (c := ready(kube)) and c["reason"] == "ProviderApplied" and c)
        assert cond["status"] == "True"
        spec = opencost_cr(kube, ns)["spec"]
        assert spec == {
            "opencost": {
                "cloudIntegrationSecret": SECRET_NAME,
                "cloudCost": {"enabled": True},
                "customPricing": {"enabled": True},
            },
            "keep": "me",
        }
        wait_for(lambda: generation(kube, ns) == 2, what="one restart")
        version = opencost_cr(kube, ns)["metadata"]["resourceVersion"]

        # Unchanged re-reconciles write nothing to OpenCost and restart nothing.
        wait_more_reconciles(proc, "finopsprovider-controller")
        assert opencost_cr(kube, ns)["metadata"]["resourceVersion"] == version
        assert generation(kube, ns) == 2

        # An awsoptions block without a secret is reported, not applied.
        merge_patch(kube, PROVIDER, {"spec": {"awsoptions": {"cloudIntegrationSecret": ""}}})
        cond = wait_for(lambda: (c := ready(kube)) and c["status"] == "False" and c)
        assert cond["reason"] == "NoValidProviderOption"
        assert cond["observedGeneration"] == 2
        wait_more_reconciles(proc, "finopsprovider-controller")
        assert opencost_cr(kube, ns)["metadata"]["resourceVersion"] == version
        assert generation(kube, ns) == 2
        assert SECRET_NAME not in proc.logs()


def test_last_sync_time_moves_only_on_a_successful_sync(
    kube: controlplane.ControlPlane, kube_namespace: str, no_provider: None
) -> None:
    ns = kube_namespace
    with running_controller(kube, ns) as proc:
        create(
            kube,
            f"{FINOPS}/finopsproviders",
            provider({"awsoptions": {"cloudIntegrationSecret": SECRET_NAME}}),
        )
        cond = wait_for(lambda: ready(kube), what="Ready condition")
        assert (cond["status"], cond["reason"]) == ("True", "BringYourOwnOpenCost")
        synced = (get(kube, PROVIDER) or {})["status"]["lastSyncTime"]

        # Every pass from now on fails: Ready says so, lastSyncTime keeps the last success
        # (several resync passes, seconds apart, would each have moved it).
        merge_patch(kube, PROVIDER, {"spec": {"awsoptions": {"cloudIntegrationSecret": ""}}})
        cond = wait_for(lambda: (c := ready(kube)) and c["status"] == "False" and c)
        assert (cond["reason"], cond["observedGeneration"]) == ("NoValidProviderOption", 2)
        wait_more_reconciles(proc, "finopsprovider-controller")
        status = (get(kube, PROVIDER) or {})["status"]
        assert status["lastSyncTime"] == synced
        assert status["observedGeneration"] == 2
        assert cond["lastTransitionTime"] >= synced

        # The next successful pass moves it again.
        merge_patch(
            kube, PROVIDER, {"spec": {"awsoptions": {"cloudIntegrationSecret": SECRET_NAME}}}
        )
        wait_for(lambda: (c := ready(kube)) and c["status"] == "True", what="Ready again")
        wait_for(
            lambda: (get(kube, PROVIDER) or {})["status"]["lastSyncTime"] > synced,
            what="lastSyncTime moved by the successful pass",
        )

"""The kube tier talks to a real kube-apiserver backed by a real etcd."""

from __future__ import annotations

import ssl

import httpx

from finops_devenv import controlplane


def test_server_is_a_real_kube_apiserver_of_the_pinned_release(
    kube: controlplane.ControlPlane,
) -> None:
    with kube.http() as client:
        version = client.get("/version").json()
    assert version["gitVersion"].startswith("v1.3")
    assert version["major"] == "1"


def test_admin_client_certificate_is_authorized_and_anonymous_is_not(
    kube: controlplane.ControlPlane,
) -> None:
    with kube.http() as client:
        assert client.get("/api/v1/namespaces/default").status_code == 200
    trust_only = ssl.create_default_context(cafile=str(kube.ca_file))
    with httpx.Client(base_url=kube.server, verify=trust_only) as anon:
        assert anon.get("/api/v1/namespaces/default").status_code in (401, 403)


def test_every_finops_crd_is_installed_and_served(kube: controlplane.ControlPlane) -> None:
    with kube.http() as client:
        resources = client.get("/apis/finops.stakater.com/v1alpha1").json()["resources"]
    kinds = {r["kind"] for r in resources if "/" not in r["name"]}
    assert kinds == {
        "FinOpsProvider", "PriceBook", "CostJob", "Offering", "Subscription", "Budget"
    }  # fmt: skip


def test_a_second_control_plane_runs_beside_the_first(kube: controlplane.ControlPlane) -> None:
    with controlplane.ControlPlane() as other:
        assert other.port != kube.port
        with other.http() as client:
            assert client.get("/readyz").status_code == 200
        with kube.http() as client:
            assert client.get("/readyz").status_code == 200
    assert not other.dir.exists()


def test_kube_namespace_gives_a_fresh_namespace(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    with kube.http() as client:
        ns = client.get(f"/api/v1/namespaces/{kube_namespace}").json()
    assert ns["status"]["phase"] == "Active"

"""The job identity can do exactly what the two job modes need, and nothing else.

The chart's job ServiceAccount, its ClusterRole and the binding are created for real on the
test API server; then the server itself answers `kubectl auth can-i` (SubjectAccessReview)
for `system:serviceaccount:<ns>:<release>-job`, with the groups a real token carries.
"""

from __future__ import annotations

import pathlib
import ssl
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.kube import _helm

from finops_devenv import controlplane

RELEASE = "finops-operator"
JOB_SA = f"{RELEASE}-job"
OTHER_NAMESPACE = "tenant-a"

# (group, resource, subresource, verb) the job modes call, in any namespace.
F = "finops.stakater.com"
NEEDED: list[tuple[str, str, str, str]] = [
    (F, "costjobs", "", "get"),
    (F, "costjobs", "status", "get"),
    (F, "costjobs", "status", "patch"),
    (F, "costjobs", "status", "update"),
    (F, "pricebooks", "", "list"),
    (F, "pricebooks", "", "get"),
    (F, "subscriptions", "", "list"),
    (F, "subscriptions", "", "get"),
    (F, "subscriptions", "", "patch"),
    (F, "subscriptions", "status", "get"),
    (F, "subscriptions", "status", "patch"),
    (F, "subscriptions", "status", "update"),
    (F, "offerings", "", "get"),
    (F, "offerings", "", "list"),
    ("", "namespaces", "", "list"),
    # Budgets, judged after each charge run: their status, and an Event per crossed threshold.
    (F, "budgets", "", "list"),
    (F, "budgets", "status", "get"),
    (F, "budgets", "status", "patch"),
    (F, "budgets", "status", "update"),
    ("", "events", "", "create"),
]

# (group, resource, subresource, verb) the jobs never need.
DENIED: list[tuple[str, str, str, str]] = [
    ("", "secrets", "", "get"),
    ("", "secrets", "", "list"),
    ("", "secrets", "", "create"),
    ("", "configmaps", "", "get"),
    ("", "pods", "", "list"),
    ("", "pods", "", "create"),
    ("", "serviceaccounts", "token", "create"),
    ("", "namespaces", "", "update"),
    ("", "events", "", "update"),
    ("", "events", "", "delete"),
    ("batch", "cronjobs", "", "create"),
    ("batch", "jobs", "", "create"),
    ("apps", "deployments", "", "patch"),
    ("coordination.k8s.io", "leases", "", "create"),
    ("rbac.authorization.k8s.io", "rolebindings", "", "create"),
    (F, "offerings", "", "create"),
    (F, "offerings", "", "delete"),
    (F, "offerings", "", "patch"),
    (F, "offerings", "status", "patch"),
    (F, "subscriptions", "", "create"),
    (F, "subscriptions", "", "delete"),
    (F, "subscriptions", "", "update"),
    (F, "subscriptions", "", "watch"),
    (F, "pricebooks", "", "update"),
    (F, "pricebooks", "", "patch"),
    (F, "pricebooks", "status", "patch"),
    (F, "costjobs", "", "update"),
    (F, "costjobs", "", "patch"),
    (F, "costjobs", "", "list"),
    (F, "costjobs", "", "delete"),
    (F, "finopsproviders", "", "get"),
    (F, "finopsproviders", "status", "patch"),
    (F, "budgets", "", "create"),
    (F, "budgets", "", "update"),
    (F, "budgets", "", "patch"),
    (F, "budgets", "", "delete"),
]


class Installed:
    """The rendered chart, and the identity (user and groups) a job pod's token carries."""

    def __init__(self, namespace: str, objects: list[dict[str, Any]]) -> None:
        self.namespace = namespace
        self.objects = objects
        self.user = f"system:serviceaccount:{namespace}:{JOB_SA}"
        self.groups = (
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        )


def _job_identity_objects(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job ServiceAccount and every binding (with its role) that names it."""
    picked = [_helm.find(objects, "ServiceAccount", JOB_SA)]
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if any(s.get("name") == JOB_SA for s in binding.get("subjects", [])):
            picked.append(binding)
            picked.append(
                _helm.find(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"])
            )
    return picked


@pytest.fixture(scope="module")
def installed(
    kube: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Installed]:
    """The chart's job identity, created for real in a fresh release namespace."""
    namespace = "finops-rbac-test"
    kube.create_namespace(namespace)
    kube.create_namespace(OTHER_NAMESPACE)
    workdir = tmp_path_factory.mktemp("helm")
    objects = _helm.template(RELEASE, namespace, {}, pathlib.Path(workdir))
    with kube.http() as client:
        api = _helm.Api(client)
        for obj in _job_identity_objects(objects):
            resp = api.apply(obj, dry_run=False)
            assert resp.status_code in (200, 201), resp.text
    yield Installed(namespace, objects)


def _can(
    client: httpx.Client,
    who: Installed,
    group: str,
    resource: str,
    sub: str,
    verb: str,
    namespace: str,
) -> bool:
    return _helm.subject_access(
        client,
        who.user,
        verb,
        resource,
        group=group,
        namespace=namespace,
        subresource=sub,
        groups=who.groups,
    )


class TestCanIMatrix:
    @pytest.mark.parametrize("namespace", ["release", OTHER_NAMESPACE, ""])
    @pytest.mark.parametrize(("group", "resource", "sub", "verb"), NEEDED)
    def test_job_identity_may_do_what_the_jobs_need(
        self,
        kube: controlplane.ControlPlane,
        installed: Installed,
        group: str,
        resource: str,
        sub: str,
        verb: str,
        namespace: str,
    ) -> None:
        ns = installed.namespace if namespace == "release" else namespace
        with kube.http() as client:
            assert _can(client, installed, group, resource, sub, verb, ns)

    @pytest.mark.parametrize(("group", "resource", "sub", "verb"), DENIED)
    def test_job_identity_may_not_do_anything_else(
        self,
        kube: controlplane.ControlPlane,
        installed: Installed,
        group: str,
        resource: str,
        sub: str,
        verb: str,
    ) -> None:
        with kube.http() as client:
            for ns in (installed.namespace, OTHER_NAMESPACE):
                assert not _can(client, installed, group, resource, sub, verb, ns)

    def test_an_identity_without_the_job_binding_is_denied(
        self, kube: controlplane.ControlPlane, installed: Installed
    ) -> None:
        """Control: the review is not allowing everyone."""
        stranger = Installed(installed.namespace, installed.objects)
        stranger.user = f"system:serviceaccount:{installed.namespace}:someone-else"
        with kube.http() as client:
            assert not _can(client, stranger, F, "costjobs", "", "get", "")
            assert _can(client, installed, F, "costjobs", "", "get", "")


class TestRenderedRole:
    def test_job_role_grants_exactly_the_needed_verbs(self, installed: Installed) -> None:
        granted: set[tuple[str, str, str, str]] = set()
        bindings = [
            o for o in _job_identity_objects(installed.objects) if o["kind"].endswith("Binding")
        ]
        assert [b["kind"] for b in bindings] == ["ClusterRoleBinding"]
        role = _helm.find(installed.objects, "ClusterRole", bindings[0]["roleRef"]["name"])
        for rule in role["rules"]:
            assert not rule.get("resourceNames") and not rule.get("nonResourceURLs")
            for group in rule["apiGroups"]:
                for res in rule["resources"]:
                    resource, _, sub = res.partition("/")
                    for verb in rule["verbs"]:
                        granted.add((group, resource, sub, verb))
        assert granted == set(NEEDED)

    def test_generated_job_pods_use_the_job_identity(self, installed: Installed) -> None:
        deployment = _helm.find(installed.objects, "Deployment", f"{RELEASE}-controller-manager")
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["JOB_SERVICE_ACCOUNT"] == JOB_SA
        manager_sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        assert manager_sa != JOB_SA


def test_a_real_job_token_reads_its_costjob_but_not_secrets(
    kube: controlplane.ControlPlane, installed: Installed
) -> None:
    """Beyond reviews: a token issued to the job ServiceAccount, used against the server."""
    ns = installed.namespace
    with kube.http() as admin:
        resp = admin.post(
            f"/api/v1/namespaces/{ns}/serviceaccounts/{JOB_SA}/token",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
        assert resp.status_code == 201, resp.text
        token = resp.json()["status"]["token"]
    trust = ssl.create_default_context(cafile=str(kube.ca_file))
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=kube.server, verify=trust, headers=headers, timeout=30) as job:

        def get(path: str) -> httpx.Response:
            """GET, waiting out 429 while a fresh CRD's watch cache initializes."""
            deadline = time.monotonic() + 30
            while True:
                resp = job.get(path)
                if resp.status_code != 429 or time.monotonic() > deadline:
                    return resp
                time.sleep(0.2)

        costjob = get(f"/apis/finops.stakater.com/v1alpha1/namespaces/{ns}/costjobs/none")
        secrets = get(f"/api/v1/namespaces/{ns}/secrets")
        offerings = get("/apis/finops.stakater.com/v1alpha1/offerings")
        pods = get(f"/api/v1/namespaces/{ns}/pods")
    assert costjob.status_code == 404, costjob.text  # allowed to look; there is none
    assert offerings.status_code == 200, offerings.text
    assert secrets.status_code == 403
    assert pods.status_code == 403

"""The admission webhooks, called by the real API server on a real controller process.

The ValidatingWebhookConfigurations made here only select namespaces carrying this module's
label, so tests sharing the API server are never sent to them; each is deleted at the end.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.kube.test_controller_support import (
    FINOPS,
    ControllerProcess,
    get,
    running_controller,
    wait_for,
)

from finops_devenv import controlplane, tls
from finops_devenv import webhooks as local_webhooks

LABEL = "finops-webhook-test"
OFFERING_HOOK = local_webhooks.OFFERING_HOOK
SUBSCRIPTION_HOOK = local_webhooks.SUBSCRIPTION_HOOK
VWC_API = local_webhooks.API


# ---------------------------------------------------------------- set-up


class Certificates:
    """A test CA and the serving certificate for 127.0.0.1 in a `--webhook-cert-path` dir."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.ca = tls.TinyCA("finops-webhook-test-ca")
        self.dir = directory
        self.ca_file = directory / "ca.crt"
        self.ca_file.write_bytes(self.ca.cert_pem)
        self.current = self.rotate()

    def rotate(self) -> tls.KeyPair:
        """Issue a new certificate and swap both files in atomically, key first."""
        pair = self.ca.serving(["127.0.0.1"])
        staged_crt, staged_key = pair.write(self.dir, f"staged-{uuid.uuid4().hex[:6]}")
        os.replace(staged_key, self.dir / "tls.key")
        os.replace(staged_crt, self.dir / "tls.crt")
        self.current = pair
        return pair

    def args(self) -> list[str]:
        return [
            f"--webhook-cert-path={self.dir}",
            "--webhook-cert-name=tls.crt",
            "--webhook-cert-key=tls.key",
        ]


def served_certificate(port: int, ca_file: pathlib.Path) -> bytes:
    """The DER certificate a fresh TLS handshake with the webhook port presents (verified)."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
        ctx.wrap_socket(sock, server_hostname="127.0.0.1") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return der


def der(pair: tls.KeyPair) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pair.cert_pem.decode())


def configuration(name: str, port: int, ca_pem: bytes, selector: dict[str, str]) -> dict[str, Any]:
    """Both webhooks as the chart registers them, but by URL and scoped by a label."""
    return local_webhooks.local_configuration(name, port, ca_pem, selector)


@contextlib.contextmanager
def registered(
    kube: controlplane.ControlPlane, port: int, certs: Certificates, selector: dict[str, str]
) -> Iterator[None]:
    """A configuration live in the API server until the block ends (then deleted)."""
    name = f"finops-webhook-test-{uuid.uuid4().hex[:8]}"
    body = configuration(name, port, certs.ca.cert_pem, selector)
    with kube.http() as client:
        resp = client.post(VWC_API, json=body)
        assert resp.status_code == 201, resp.text
    try:
        yield
    finally:
        with kube.http() as client:
            client.delete(f"{VWC_API}/{name}")


def labelled_namespace(kube: controlplane.ControlPlane, selector: dict[str, str]) -> str:
    name = f"wh-{uuid.uuid4().hex[:10]}"
    kube.create_namespace(name, labels=selector)
    return name


def wait_until_enforced(kube: controlplane.ControlPlane, namespace: str) -> None:
    """The API server picks configurations up asynchronously: probe with a dry run."""
    probe = offering("probe", namespace, requires=[("probe", namespace)])
    wait_for(
        lambda: post(kube, f"{offerings_path(namespace)}?dryRun=All", probe).status_code == 403,
        timeout=30,
        what="the webhook configuration to take effect",
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates(tmp_path_factory.mktemp("webhook-certs"))


@pytest.fixture(scope="module")
def selector() -> dict[str, str]:
    return {LABEL: uuid.uuid4().hex[:10]}


@pytest.fixture(scope="module")
def controller(
    kube: controlplane.ControlPlane, certs: Certificates, selector: dict[str, str]
) -> Iterator[ControllerProcess]:
    own = f"wh-op-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(own)
    with (
        running_controller(kube, own, env={"ENABLE_WEBHOOKS": "true"}, args=certs.args()) as proc,
        registered(kube, proc.webhook_port, certs, selector),
    ):
        wait_until_enforced(kube, labelled_namespace(kube, selector))
        yield proc


@pytest.fixture
def ns(kube: controlplane.ControlPlane, selector: dict[str, str]) -> str:
    return labelled_namespace(kube, selector)


@pytest.fixture
def other_ns(kube: controlplane.ControlPlane, selector: dict[str, str]) -> str:
    return labelled_namespace(kube, selector)


# ---------------------------------------------------------------- objects and calls


def offerings_path(namespace: str) -> str:
    return f"{FINOPS}/namespaces/{namespace}/offerings"


def subscriptions_path(namespace: str) -> str:
    return f"{FINOPS}/namespaces/{namespace}/subscriptions"


def offering(
    name: str, namespace: str, requires: list[tuple[str, str]] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "pricing": {
            "subscriptionFee": {"period": "1h", "tickAlignment": "ActivatedAt", "priceMicros": 1}
        }
    }
    if requires:
        spec["compatibility"] = {
            "requiredOfferings": [{"name": n, "namespace": s} for n, s in requires]
        }
    return {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Offering",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def subscription(
    name: str,
    namespace: str,
    offering_ref: tuple[str, str],
    *,
    parent: tuple[str, str] | None = None,
    target: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"offeringRef": {"name": offering_ref[0], "namespace": offering_ref[1]}}
    if parent is not None:
        spec["parent"] = {"subscriptionRef": {"name": parent[0], "namespace": parent[1]}}
    if target is not None:
        spec["lifecycle"] = {"targetRef": target}
    return {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Subscription",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def post(kube: controlplane.ControlPlane, path: str, body: dict[str, Any]) -> httpx.Response:
    with kube.http() as client:
        return client.post(path, json=body)


def delete(kube: controlplane.ControlPlane, path: str) -> httpx.Response:
    with kube.http() as client:
        return client.delete(path)


def admitted(resp: httpx.Response) -> None:
    assert resp.status_code in (200, 201, 202), resp.text


def refused(resp: httpx.Response, hook: str, reason: str, message: str) -> None:
    """The API server's answer carries our code, reason and message, prefixed by the hook."""
    assert resp.status_code == 403, resp.text
    status = resp.json()
    assert status["reason"] == reason
    assert status["message"] == f'admission webhook "{hook}" denied the request: {message}'


# ---------------------------------------------------------------- Offering CREATE


class TestOfferingCreate:
    def test_an_offering_requiring_itself_is_refused(
        self, kube: controlplane.ControlPlane, controller: ControllerProcess, ns: str
    ) -> None:
        resp = post(kube, offerings_path(ns), offering("a", ns, requires=[("a", ns)]))
        refused(
            resp,
            OFFERING_HOOK,
            "CircularDependencyDetected",
            f"circular dependency detected: {ns}/a -> {ns}/a",
        )
        assert get(kube, f"{offerings_path(ns)}/a") is None

    def test_an_offering_closing_a_cycle_across_namespaces_is_refused_naming_the_path(
        self,
        kube: controlplane.ControlPlane,
        controller: ControllerProcess,
        ns: str,
        other_ns: str,
    ) -> None:
        # a -> b is admitted while b does not exist yet: a missing Offering closes no loop.
        admitted(post(kube, offerings_path(ns), offering("a", ns, requires=[("b", other_ns)])))
        admitted(post(kube, offerings_path(other_ns), offering("b", other_ns, [("c", ns)])))
        resp = post(kube, offerings_path(ns), offering("c", ns, requires=[("a", ns)]))
        refused(
            resp,
            OFFERING_HOOK,
            "CircularDependencyDetected",
            f"circular dependency detected: {ns}/c -> {ns}/a -> {other_ns}/b -> {ns}/c",
        )

    def test_an_acyclic_requirement_graph_is_admitted(
        self, kube: controlplane.ControlPlane, controller: ControllerProcess, ns: str
    ) -> None:
        admitted(post(kube, offerings_path(ns), offering("vm", ns)))
        admitted(post(kube, offerings_path(ns), offering("disk", ns, requires=[("vm", ns)])))
        both = [("vm", ns), ("disk", ns)]
        admitted(post(kube, offerings_path(ns), offering("monitor", ns, requires=both)))


# ---------------------------------------------------------------- Offering DELETE


class TestOfferingDelete:
    def test_an_offering_with_dependents_cannot_be_deleted_and_the_refusal_names_them(
        self,
        kube: controlplane.ControlPlane,
        controller: ControllerProcess,
        ns: str,
        other_ns: str,
    ) -> None:
        admitted(post(kube, offerings_path(ns), offering("base", ns)))
        admitted(post(kube, offerings_path(ns), offering("addon", ns, requires=[("base", ns)])))
        admitted(
            post(kube, subscriptions_path(other_ns), subscription("user", other_ns, ("base", ns)))
        )
        refused(
            delete(kube, f"{offerings_path(ns)}/base"),
            OFFERING_HOOK,
            "DependentSubscriptionsExist",
            f"offering {ns}/base cannot be deleted: still referenced by subscriptions: "
            f"{other_ns}/user; still required by dependent resources: {ns}/addon",
        )
        stored = get(kube, f"{offerings_path(ns)}/base")
        assert stored is not None
        assert not stored["metadata"].get("deletionTimestamp")

    def test_an_offering_only_other_offerings_require_cannot_be_deleted(
        self, kube: controlplane.ControlPlane, controller: ControllerProcess, ns: str
    ) -> None:
        admitted(post(kube, offerings_path(ns), offering("vm", ns)))
        admitted(post(kube, offerings_path(ns), offering("disk", ns, requires=[("vm", ns)])))
        refused(
            delete(kube, f"{offerings_path(ns)}/vm"),
            OFFERING_HOOK,
            "DependentOfferingsExist",
            f"offering {ns}/vm cannot be deleted: still required by dependent resources: {ns}/disk",
        )

    def test_an_offering_nobody_references_is_deleted(
        self, kube: controlplane.ControlPlane, controller: ControllerProcess, ns: str
    ) -> None:
        admitted(post(kube, offerings_path(ns), offering("vm", ns)))
        admitted(post(kube, offerings_path(ns), offering("disk", ns, requires=[("vm", ns)])))
        admitted(delete(kube, f"{offerings_path(ns)}/disk"))  # the dependent goes first


# ---------------------------------------------------------------- Subscription CREATE


class TestSubscriptionCreate:
    def test_a_subscription_naming_itself_as_parent_is_refused(
        self, kube: controlplane.ControlPlane, controller: ControllerProcess, ns: str
    ) -> None:
        body = subscription("s", ns, ("vm", ns), parent=("s", ns))
        refused(
            post(kube, subscriptions_path(ns), body),
            SUBSCRIPTION_HOOK,
            "CircularDependencyDetected",
            f"subscription {ns}/s cannot name itself as its parent (spec.parent.subscriptionRef)",
        )

    def test_a_subscription_naming_itself_as_target_is_refused(
        self, kube: controlplane.ControlPlane, controller: ControllerProcess, ns: str
    ) -> None:
        me = {
            "apiVersion": "finops.stakater.com/v1alpha1",
            "kind": "Subscription",
            "name": "s",
            "namespace": ns,
        }
        refused(
            post(kube, subscriptions_path(ns), subscription("s", ns, ("vm", ns), target=me)),
            SUBSCRIPTION_HOOK,
            "TargetIsSelfReference",
            f"subscription {ns}/s cannot name itself as its lifecycle.targetRef",
        )

    def test_another_parent_and_a_same_named_target_of_another_kind_are_admitted(
        self, kube: controlplane.ControlPlane, controller: ControllerProcess, ns: str
    ) -> None:
        config_map = {"apiVersion": "v1", "kind": "ConfigMap", "name": "s", "namespace": ns}
        body = subscription("s", ns, ("vm", ns), parent=("p", ns), target=config_map)
        admitted(post(kube, subscriptions_path(ns), body))
        assert get(kube, f"{subscriptions_path(ns)}/s") is not None


def test_namespaces_outside_the_selector_are_never_sent_to_the_webhook(
    kube: controlplane.ControlPlane, controller: ControllerProcess, kube_namespace: str
) -> None:
    # Admitted by the API server alone: only this module's labelled namespaces are hooked.
    ns = kube_namespace
    admitted(post(kube, f"{offerings_path(ns)}?dryRun=All", offering("a", ns, [("a", ns)])))


# ---------------------------------------------------------------- serving


def test_a_rotated_certificate_is_served_without_a_restart(
    kube: controlplane.ControlPlane,
    controller: ControllerProcess,
    certs: Certificates,
    ns: str,
) -> None:
    before = certs.current
    assert served_certificate(controller.webhook_port, certs.ca_file) == der(before)
    after = certs.rotate()
    assert der(after) != der(before)
    wait_for(
        lambda: served_certificate(controller.webhook_port, certs.ca_file) == der(after),
        timeout=15,
        what="the rotated certificate to be served",
    )
    assert controller.proc is not None and controller.proc.poll() is None
    resp = post(kube, offerings_path(ns), offering("a", ns, requires=[("a", ns)]))
    assert resp.status_code == 403, resp.text  # the API server still trusts and reaches it


def test_a_standby_replica_answers_admission_requests(
    kube: controlplane.ControlPlane, certs: Certificates, kube_namespace: str
) -> None:
    standby_selector = {f"{LABEL}-standby": uuid.uuid4().hex[:10]}
    ns = labelled_namespace(kube, standby_selector)
    settings = {"ENABLE_WEBHOOKS": "true", "FINOPS_LEASE_DURATION_SECONDS": "4"}
    args = ["--leader-elect", *certs.args()]
    leader = ControllerProcess(kube, namespace=kube_namespace, env=settings, args=args).start()
    standby: ControllerProcess | None = None
    try:
        wait_for(lambda: "became leader" in leader.logs(), what="first replica leads")
        standby = ControllerProcess(kube, namespace=kube_namespace, env=settings, args=args)
        standby.start()
        with registered(kube, standby.webhook_port, certs, standby_selector):
            wait_until_enforced(kube, ns)
            body = subscription("s", ns, ("vm", ns), parent=("s", ns))
            resp = post(kube, subscriptions_path(ns), body)
        assert resp.status_code == 403, resp.text
        assert "became leader" not in standby.logs()
    finally:
        leader.stop(signal.SIGKILL)
        if standby is not None:
            standby.stop(signal.SIGKILL)


def test_with_webhooks_disabled_nothing_listens_on_the_webhook_port(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    # No certificate flags at all: a disabled server does not need one.
    with running_controller(kube, kube_namespace, env={"ENABLE_WEBHOOKS": "false"}) as proc:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proc.webhook_port), timeout=5).close()
        assert "serving webhooks" not in proc.logs()


def test_a_manager_without_a_readable_certificate_stops_and_says_why(
    kube: controlplane.ControlPlane, kube_namespace: str, tmp_path: pathlib.Path
) -> None:
    proc = ControllerProcess(
        kube,
        namespace=kube_namespace,
        env={"ENABLE_WEBHOOKS": "true"},
        args=[f"--webhook-cert-path={tmp_path}"],
    )
    proc.proc = subprocess.Popen(
        proc.args, env=proc.env, stdout=proc.log_fd, stderr=subprocess.STDOUT
    )
    try:
        code = proc.proc.wait(timeout=30)
    finally:
        proc.stop(signal.SIGKILL)
    assert code == 1
    assert f"{tmp_path / 'tls.crt'}" in proc.logs()
    assert "webhook server failed to start" in proc.logs()

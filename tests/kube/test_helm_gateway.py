"""The chart's gateway: what it renders, and that the rendered container really serves.

The run test takes the gateway container exactly as `helm template` renders it (command,
args, env) and starts it as a process against the test control plane and PostgreSQL. What
a kubelet would do is done by hand: the `secretKeyRef` is read from a Secret created on the
API server, the image's PATH becomes this virtualenv's scripts folder (the image installs
the same console scripts), and the pod's projected ServiceAccount token becomes a kubeconfig
holding a token of the chart's gateway ServiceAccount, with only the RBAC the chart grants.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from psycopg import conninfo
from tests.e2e import test_gateway as ledger
from tests.kube import _helm

from finops.api import environment
from finops_devenv import controlplane, ports

GATEWAY = "finops-operator-finops-gateway-gateway"
GATEWAY_SA = "finops-operator-finops-gateway"
WINDOW = {"from": "2026-04-01T00:00:00Z", "to": "2026-04-02T00:00:00Z"}
RBAC = "/apis/rbac.authorization.k8s.io/v1"
REVIEWS = {
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
}


def render(values: dict[str, Any], workdir: pathlib.Path, release: str = "finops-operator") -> Any:
    return _helm.template(release, "finops-operator-system", values, workdir)


def gateway_pod(objects: list[dict[str, Any]], fullname: str = "finops-operator") -> Any:
    deployment = _helm.find(objects, "Deployment", f"{fullname}-finops-gateway-gateway")
    return deployment["spec"]["template"]["spec"]


def identity(objects: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    """The ServiceAccount, every binding naming it, and the roles those bind."""
    picked = [_helm.find(objects, "ServiceAccount", account)]
    for obj in objects:
        if obj["kind"].endswith("Binding") and any(
            s.get("name") == account for s in obj.get("subjects", [])
        ):
            picked += [obj, _helm.find(objects, obj["roleRef"]["kind"], obj["roleRef"]["name"])]
    return picked


def granted(objects: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    rules = [r for o in objects if o["kind"].endswith("Role") for r in o["rules"]]
    return {
        (group, res, verb)
        for r in rules
        for group in r.get("apiGroups", [])
        for res in r.get("resources", [])
        for verb in r["verbs"]
    }


class TestRendered:
    def test_the_gateway_runs_a_console_script_the_image_has_on_its_path(
        self, tmp_path: pathlib.Path
    ) -> None:
        [container] = gateway_pod(render({}, tmp_path))["containers"]
        assert "args" not in container, "the operator binary has no gateway --mode"
        [script] = container["command"]
        project = tomllib.loads((_helm.REPO / "pyproject.toml").read_text())
        assert project["project"]["scripts"][script] == "finops.gateway.app:main"
        dockerfile = (_helm.REPO / "Dockerfile").read_text()
        assert re.search(r"^ENV PATH=/opt/finops/bin:", dockerfile, re.MULTILINE)
        assert "/opt/finops/bin/pip install /dist/*.whl" in dockerfile

    def test_env_follows_the_documented_keys(self, tmp_path: pathlib.Path) -> None:
        env = {"port": "9090", "enableAuth": "true", "mtoGatewayUrl": "http://mto"}
        values = {
            "secrets": {"postgres": "ledger-dsn"},
            "finopsGatewayGateway": {
                "finopsGatewayContainer": {
                    "env": {**env, "allowedOrigins": "https://a.example,https://b.example"},
                    "extraEnv": [{"name": environment.Env.CLUSTER_ID.value, "value": "east"}],
                }
            },
        }
        [container] = gateway_pod(render(values, tmp_path))["containers"]
        by_name = {e["name"]: e for e in container["env"]}
        assert by_name[environment.Env.PG_CONNECTION_STRING]["valueFrom"]["secretKeyRef"] == {
            "name": "ledger-dsn",
            "key": environment.Env.POSTGRES_CONNECTION_STRING,
        }
        plain = {
            k: v.get("value")
            for k, v in by_name.items()
            if k != environment.Env.PG_CONNECTION_STRING
        }
        assert plain == {
            environment.Env.PORT: "9090",
            environment.Env.ENABLE_AUTH: "true",
            "MTO_GATEWAY_URL": "http://mto",
            environment.Env.ALLOWED_ORIGINS: "https://a.example,https://b.example",
            "KUBERNETES_CLUSTER_DOMAIN": "cluster.local",
            environment.Env.CLUSTER_ID: "east",
        }
        assert container["ports"] == [{"name": "http", "containerPort": 9090, "protocol": "TCP"}]
        for probe in ("livenessProbe", "readinessProbe"):
            assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}

    def test_it_is_on_by_default_and_can_be_left_out(self, tmp_path: pathlib.Path) -> None:
        objects = render({}, tmp_path)
        service = _helm.find(objects, "Service", "finops-operator-finops-gateway-service")
        labels = _helm.find(objects, "Deployment", GATEWAY)["spec"]["template"]["metadata"]
        assert service["spec"]["selector"].items() <= labels["labels"].items()
        assert [p["targetPort"] for p in service["spec"]["ports"]] == [8080]
        manager_services = [s for s in _helm.of_kind(objects, "Service") if s is not service]
        for other in manager_services:  # no manager Service routes to the gateway pods
            assert not other["spec"]["selector"].items() <= labels["labels"].items()
        assert not _helm.of_kind(objects, "Ingress")
        off = render({"finopsGatewayGateway": {"enabled": False}}, tmp_path)
        assert not [o for o in off if "finops-gateway" in o["metadata"]["name"]]

    def test_its_own_identity_may_only_create_the_two_reviews(self, tmp_path: pathlib.Path) -> None:
        objects = render({}, tmp_path)
        pod = gateway_pod(objects)
        assert pod["serviceAccountName"] == GATEWAY_SA
        assert pod["automountServiceAccountToken"] is True
        assert granted(identity(objects, GATEWAY_SA)) == REVIEWS
        manager_sa = _helm.find(objects, "Deployment", "finops-operator-controller-manager")
        assert manager_sa["spec"]["template"]["spec"]["serviceAccountName"] != GATEWAY_SA

    def test_without_authentication_it_gets_no_binding_and_no_token(
        self, tmp_path: pathlib.Path
    ) -> None:
        values = {
            "finopsGatewayGateway": {"finopsGatewayContainer": {"env": {"enableAuth": "false"}}}
        }
        objects = render(values, tmp_path)
        assert granted(identity(objects, GATEWAY_SA)) == set()
        assert gateway_pod(objects)["automountServiceAccountToken"] is False
        assert (
            _helm.find(objects, "ServiceAccount", GATEWAY_SA)["automountServiceAccountToken"]
            is False
        )

    def test_the_ingress_routes_the_configured_rules(self, tmp_path: pathlib.Path) -> None:
        rule = {"host": "costs.example.com", "http": {"paths": []}}
        values = {
            "finopsGatewayIngress": {
                "enabled": True,
                "className": "nginx",
                "annotations": {"a": "b"},
                "tls": [{"hosts": ["costs.example.com"], "secretName": "costs-tls"}],
                "rules": [rule],
            }
        }
        ingress = _helm.find(render(values, tmp_path), "Ingress")
        assert ingress["metadata"]["annotations"] == {"a": "b"}
        assert ingress["spec"]["ingressClassName"] == "nginx"
        assert ingress["spec"]["rules"] == [rule]
        assert ingress["spec"]["tls"][0]["secretName"] == "costs-tls"

    def test_the_gateway_pod_passes_the_restricted_pod_security_standard(
        self, kube: controlplane.ControlPlane, tmp_path: pathlib.Path
    ) -> None:
        namespace = f"psa-{uuid.uuid4().hex[:8]}"
        kube.create_namespace(namespace, {"pod-security.kubernetes.io/enforce": "restricted"})
        spec = gateway_pod(_helm.template("finops-operator", namespace, {}, tmp_path))
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gw"}, "spec": spec}
        with kube.http() as client:
            resp = client.post(
                f"/api/v1/namespaces/{namespace}/pods", json=pod, params={"dryRun": "All"}
            )
        assert resp.status_code == 201, resp.text


# --- the rendered container, run for real ---------------------------------------------------


def _service_account_token(client: httpx.Client, namespace: str, name: str) -> str:
    resp = client.post(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert resp.status_code == 201, resp.text
    token: str = resp.json()["status"]["token"]
    return token


def _tenant(client: httpx.Client, namespace: str) -> str:
    """A ServiceAccount of `namespace` that may `get` Subscriptions there; its token."""
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}}
    client.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", json=sa).raise_for_status()
    meta = {"name": "subscription-reader"}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta,
        "rules": [
            {"apiGroups": ["finops.stakater.com"], "resources": ["subscriptions"], "verbs": ["get"]}
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", **meta},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
    }
    client.post(f"{RBAC}/namespaces/{namespace}/roles", json=role).raise_for_status()
    client.post(f"{RBAC}/namespaces/{namespace}/rolebindings", json=binding).raise_for_status()
    return _service_account_token(client, namespace, "tenant")


def _container_env(client: httpx.Client, namespace: str, container: dict[str, Any]) -> Any:
    """The container's env as the kubelet resolves it: values, and Secret keys from the API."""
    env = {}
    for entry in container["env"]:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        ref = entry["valueFrom"]["secretKeyRef"]  # the only other kind the chart renders
        secret = client.get(f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}")
        assert secret.status_code == 200, f"the pod would not start: {secret.text}"
        env[entry["name"]] = base64.b64decode(secret.json()["data"][ref["key"]]).decode()
    return env


def _token_kubeconfig(kube: controlplane.ControlPlane, token: str, path: pathlib.Path) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {"server": kube.server, "certificate-authority": str(kube.ca_file)},
            }
        ],
        "users": [{"name": "gateway", "user": {"token": token}}],
        "contexts": [{"name": "gateway", "context": {"cluster": "test", "user": "gateway"}}],
        "current-context": "gateway",
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


@contextlib.contextmanager
def _running(argv: list[str], env: dict[str, str], health: str, dsn: str) -> Iterator[None]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[0].decode()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health, timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the gateway did not become ready"
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0].decode()
        password = conninfo.conninfo_to_dict(dsn).get("password")
        assert dsn not in output and (not password or str(password) not in output)


@pytest.fixture
def chart_gateway(
    kube: controlplane.ControlPlane, ledger_dsn: str, tmp_path: pathlib.Path
) -> Iterator[dict[str, Any]]:
    """The gateway as the chart renders it, running; two tenants with charges each."""
    release_ns, ns_a, ns_b = (f"t-{uuid.uuid4().hex[:10]}" for _ in range(3))
    for ns in (release_ns, ns_a, ns_b):
        kube.create_namespace(ns)
    port = ports.free_port()  # a free port instead of 8080: tests share the machine
    values = {"finopsGatewayGateway": {"finopsGatewayContainer": {"env": {"port": str(port)}}}}
    release = f"fo-{uuid.uuid4().hex[:6]}"  # apart from other tests' cluster-scoped names
    fullname = f"{release}-finops-operator"
    objects = _helm.template(release, release_ns, values, tmp_path)
    pod = gateway_pod(objects, fullname)
    [container] = pod["containers"]
    # The installer's part: the Secret the chart's secretKeyRef names, holding the DSN.
    [ref] = [e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": ref["name"]},
        "stringData": {ref["key"]: ledger_dsn},
    }
    with kube.http() as client:
        api = _helm.Api(client)
        for obj in identity(objects, pod["serviceAccountName"]):
            resp = api.apply(obj, dry_run=False)
            assert resp.status_code in (200, 201), resp.text
        client.post(f"/api/v1/namespaces/{release_ns}/secrets", json=secret).raise_for_status()
        env = _container_env(client, release_ns, container)
        gateway_token = _service_account_token(client, release_ns, pod["serviceAccountName"])
        tokens = {"a": _tenant(client, ns_a), "b": _tenant(client, ns_b)}
    rows = {"a": ledger._write_ledger(ledger_dsn, ns_a, "uid-a")}
    ledger._write_ledger(ledger_dsn, ns_b, "uid-b")
    # What the image provides: its scripts on PATH, and the pod's ServiceAccount token.
    bin_dir = pathlib.Path(sys.executable).parent
    env["PATH"] = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    env["KUBECONFIG"] = _token_kubeconfig(kube, gateway_token, tmp_path / "gateway.kubeconfig")
    argv = [*container["command"], *container.get("args", [])]
    assert shutil.which(argv[0], path=env["PATH"]) == str(bin_dir / argv[0])
    [http] = [p["containerPort"] for p in container["ports"] if p["name"] == "http"]
    url = f"http://127.0.0.1:{http}"
    health = url + container["readinessProbe"]["httpGet"]["path"]
    with _running(argv, env, health, ledger_dsn):
        yield {"url": url, "a": ns_a, "b": ns_b, "tokens": tokens, "rows": rows}


def _get(url: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(url, params=WINDOW, headers=headers, timeout=10)


def test_the_rendered_gateway_serves_each_tenant_its_own_charges_only(
    chart_gateway: dict[str, Any],
) -> None:
    gw, tokens = chart_gateway, chart_gateway["tokens"]
    charges_a = f"{gw['url']}/api/v1/namespaces/{gw['a']}/subscriptions/web/charges"
    got = _get(charges_a, tokens["a"])
    assert got.status_code == 200, got.text
    expected = sorted(gw["rows"]["a"], key=lambda c: (c.hour, c.source))
    assert [
        (i["hour"], i["source"], i["amountMicros"], i["finalized"]) for i in got.json()["items"]
    ] == [
        (c.hour.strftime("%Y-%m-%dT%H:%M:%SZ"), c.source, c.amount_micros, c.finalized)
        for c in expected
    ]
    costs = _get(f"{gw['url']}/api/v1/namespaces/{gw['a']}/costs", tokens["a"])
    assert costs.status_code == 200, costs.text
    fee = next(i for i in costs.json()["items"] if i["source"] == "subscription")
    assert (fee["totalMicros"], fee["finalizedMicros"]) == (120_000_000, 80_000_000)

    assert _get(charges_a, tokens["b"]).status_code == 403
    assert _get(f"{gw['url']}/api/v1/namespaces/{gw['b']}/costs", tokens["a"]).status_code == 403
    assert _get(f"{gw['url']}/api/v1/namespaces/{gw['b']}/costs", tokens["b"]).status_code == 200
    assert _get(charges_a).status_code == 401
    assert _get(charges_a, "not-a-token").status_code == 401

"""Helpers for the chart tests: a helm built from the Go module proxy, rendering, and
applying rendered objects to the real API server (server-side apply, optionally dry run)."""

from __future__ import annotations

import base64
import functools
import pathlib
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import httpx
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "finops-operator"
BUILD_SCRIPT = REPO / "tools" / "build-helm.sh"
KUBE_VERSION = "1.35.4"
FIELD_MANAGER = "finops-chart-test"


@functools.cache
def helm_binary() -> pathlib.Path:
    """Path of helm, built (once per machine) by tools/build-helm.sh, which prints it."""
    done = subprocess.run([str(BUILD_SCRIPT)], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    path = pathlib.Path(done.stdout.strip().splitlines()[-1])
    if not path.is_file():
        raise RuntimeError(f"{BUILD_SCRIPT} printed {path}, which is not a file")
    return path


def _values_args(values: Mapping[str, Any], workdir: pathlib.Path) -> list[str]:
    path = workdir / "values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return ["-f", str(path)]


def run_helm(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm_binary()), *args], check=False, capture_output=True, text=True, timeout=120
    )


def install_dry_run(
    values: Mapping[str, Any], workdir: pathlib.Path, namespace: str, kubeconfig: pathlib.Path
) -> subprocess.CompletedProcess[str]:
    """Helm's own install path (CRD check, discovery, NOTES) as a server-side dry run."""
    release = f"fo-{uuid.uuid4().hex[:6]}"
    return run_helm(
        [
            "install",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--dry-run=server",
            "--kubeconfig",
            str(kubeconfig),
            *_values_args(values, workdir),
        ]
    )


def lint(
    values: Mapping[str, Any], workdir: pathlib.Path, namespace: str = "finops-operator-system"
) -> subprocess.CompletedProcess[str]:
    return run_helm(
        [
            "lint",
            str(CHART),
            "--strict",
            "--namespace",
            namespace,
            "--kube-version",
            KUBE_VERSION,
            *_values_args(values, workdir),
        ]
    )


def template(
    release: str,
    namespace: str,
    values: Mapping[str, Any],
    workdir: pathlib.Path,
    kubeconfig: pathlib.Path | None = None,
) -> list[dict[str, Any]]:
    """`helm template` output as objects; raises with helm's stderr when rendering fails.

    With `kubeconfig`, renders against that cluster (`--dry-run=server`), so `lookup` sees
    what exists there; without, `lookup` finds nothing."""
    server = ["--dry-run=server", "--kubeconfig", str(kubeconfig)] if kubeconfig else []
    done = run_helm(
        [
            "template",
            release,
            str(CHART),
            "--namespace",
            namespace,
            *(server or ["--kube-version", KUBE_VERSION]),
            *_values_args(values, workdir),
        ]
    )
    if done.returncode != 0:
        raise RenderError(done.stderr)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


class RenderError(RuntimeError):
    """helm template refused the values."""


def find(objects: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def of_kind(objects: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def secret_data(objects: Iterable[dict[str, Any]], name: str) -> dict[str, str]:
    """A rendered Secret's data, decoded."""
    secret = find(objects, "Secret", name)
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


class Api:
    """Resolves kinds to URLs through the server's discovery, then applies objects."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self._groups: dict[str, dict[str, tuple[str, bool]]] = {}

    def _resources(self, api_version: str) -> dict[str, tuple[str, bool]]:
        if api_version not in self._groups:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            resp = self.client.get(base)
            resp.raise_for_status()
            self._groups[api_version] = {
                r["kind"]: (r["name"], bool(r["namespaced"]))
                for r in resp.json()["resources"]
                if "/" not in r["name"]
            }
        return self._groups[api_version]

    def url(self, obj: Mapping[str, Any]) -> str:
        api_version = obj["apiVersion"]
        plural, namespaced = self._resources(api_version)[obj["kind"]]
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        meta = obj["metadata"]
        if namespaced:
            return f"{base}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
        return f"{base}/{plural}/{meta['name']}"

    def apply(self, obj: Mapping[str, Any], dry_run: bool) -> httpx.Response:
        """Server-side apply with strict field validation (unknown fields are errors)."""
        params = {"fieldManager": FIELD_MANAGER, "force": "true", "fieldValidation": "Strict"}
        if dry_run:
            params["dryRun"] = "All"
        deadline = time.monotonic() + 30
        while True:
            resp = self.client.patch(
                self.url(obj),
                params=params,
                json=dict(obj),
                headers={"Content-Type": "application/apply-patch+yaml"},
            )
            # 429 while a freshly installed CRD's storage initializes: wait it out.
            if resp.status_code != 429 or time.monotonic() > deadline:
                return resp
            time.sleep(0.2)


def subject_access(
    client: httpx.Client,
    user: str,
    verb: str,
    resource: str,
    group: str = "finops.stakater.com",
    namespace: str = "",
    subresource: str = "",
    groups: tuple[str, ...] = (),
) -> bool:
    """Ask the API server whether `user` may do `verb` (kubectl auth can-i, as a review)."""
    attrs: dict[str, str] = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attrs["namespace"] = namespace
    if subresource:
        attrs["subresource"] = subresource
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": list(groups), "resourceAttributes": attrs},
    }
    resp = client.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json=body)
    resp.raise_for_status()
    return bool(resp.json()["status"].get("allowed"))


def permissive_crd(group: str, version: str, kind: str, plural: str) -> dict[str, Any]:
    """A namespaced CRD that accepts any object: enough to dry-run a third party's kind
    (cert-manager's, the Prometheus Operator's) the chart may render."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }

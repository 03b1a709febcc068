"""Installing the chart on the real node as a platform team would, and reading what it runs."""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from finops.devenv import realnode, tls
from tests.kube import _helm

NAMESPACE = "finops-operator-system"
RELEASE = "finops-operator"
EXAMPLES = _helm.REPO / "examples"


def image_values(images: Mapping[str, realnode.Image]) -> dict[str, Any]:
    """Values that point every image of the chart at the ones imported into the node."""

    def ref(name: str) -> dict[str, str]:
        return {"repository": images[name].repository, "tag": images[name].tag}

    return {
        "controllerManager": {"manager": {"image": ref("finops-operator")}},
        "mdoDependencies": {
            "postgres": {"image": ref("postgres"), "persistence": {"size": "1Gi"}},
            "opencost": {"image": ref("opencost")},
            "prometheus": {"image": ref("prometheus")},
        },
    }


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def helm(node: realnode.RealNode, *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [str(_helm.helm_binary()), f"--kubeconfig={node.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}{done.stdout}"
    return done.stdout


def values_file(values: Mapping[str, Any], workdir: pathlib.Path) -> str:
    path = workdir / f"values-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return str(path)


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    node: realnode.RealNode,
    interval: float = 1.0,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    pods = node.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    events = node.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False).stdout
    logs = []
    for line in pods.splitlines()[1:]:
        cols = line.split()
        if len(cols) > 3 and cols[3] not in ("Running", "Completed"):
            tail = node.kubectl(
                "logs", "-n", cols[0], cols[1], "--all-containers", "--tail=20", check=False
            )
            logs.append(f"--- {cols[0]}/{cols[1]} ({cols[3]}):\n{tail.stdout}{tail.stderr}")
    raise AssertionError(
        f"{what}: not within {timeout}s\n{pods}\n{events[-4000:]}\n" + "\n".join(logs)
    )


def get(node: realnode.RealNode, *args: str) -> Any:
    done = node.kubectl("get", *args, "-o", "json", check=False)
    if done.returncode != 0:
        return None
    return json.loads(done.stdout)


def webhook_certificate(node: realnode.RealNode, namespace: str, release: str) -> None:
    """What a cluster without cert-manager needs: the serving Secret and the caBundle.

    The chart names the Secret `webhook-server-cert` and the hook's Service in the
    ValidatingWebhookConfiguration; the manager's pod waits for the Secret to exist.
    """
    vwc = get(node, "validatingwebhookconfiguration", f"{release}-validating-webhook-configuration")
    assert vwc is not None, "the chart installed no ValidatingWebhookConfiguration"
    service = vwc["webhooks"][0]["clientConfig"]["service"]
    ca = tls.TinyCA(f"{release}-webhook-ca")
    host = f"{service['name']}.{service['namespace']}.svc"
    pair = ca.serving([host, f"{host}.cluster.local"])
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": "webhook-server-cert", "namespace": namespace},
        "data": {
            "tls.crt": base64.b64encode(pair.cert_pem).decode(),
            "tls.key": base64.b64encode(pair.key_pem).decode(),
            "ca.crt": base64.b64encode(ca.cert_pem).decode(),
        },
    }
    node.apply([secret])
    bundle = base64.b64encode(ca.cert_pem).decode()
    patch = [
        {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
        for i in range(len(vwc["webhooks"]))
    ]
    node.kubectl(
        "patch",
        "validatingwebhookconfiguration",
        vwc["metadata"]["name"],
        "--type=json",
        f"-p={json.dumps(patch)}",
    )


def workloads_available(node: realnode.RealNode, namespace: str) -> bool:
    deployments = get(node, "deployments", "-n", namespace) or {"items": []}
    sets = get(node, "statefulsets", "-n", namespace) or {"items": []}
    if not deployments["items"]:
        return False
    for d in deployments["items"]:
        conds = d.get("status", {}).get("conditions") or []
        if not any(c["type"] == "Available" and c["status"] == "True" for c in conds):
            return False
        if d["status"].get("updatedReplicas", 0) != d["spec"].get("replicas", 1):
            return False
    for s in sets["items"]:
        if s.get("status", {}).get("readyReplicas", 0) != s["spec"].get("replicas", 1):
            return False
    return True


def examples(interval: str = "1m") -> list[dict[str, Any]]:
    """The repository's examples, with both CostJobs scheduled every `interval`."""
    docs: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if doc["kind"] == "CostJob":
                doc["spec"]["interval"] = interval
            docs.append(doc)
    return docs


def psql(node: realnode.RealNode, namespace: str, release: str, sql: str) -> str:
    """Run SQL in the bundled PostgreSQL pod as the superuser; return the unaligned rows."""
    pod = f"{release}-postgres-0"
    done = node.kubectl(
        "exec",
        "-n",
        namespace,
        pod,
        "--",
        "psql",
        "-U",
        "postgres",
        "-d",
        "finopsdb",
        "-At",
        "-F",
        "\t",
        "-c",
        sql,
    )
    return done.stdout.strip()

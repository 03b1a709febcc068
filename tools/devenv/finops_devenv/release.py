"""The Helm chart installed on a real node the way a platform team installs it.

Used by `finops sandbox --real-node` and by the `cluster` test tier: `helm install` of the
repository's chart with the images `tools/images.sh` built, what a cluster without
cert-manager needs for the admission webhooks (the serving Secret and the `caBundle`), waits
that explain themselves when they time out, and Jobs started from a generated CronJob as a
user starts them (`kubectl create job --from=cronjob/...`).
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import pathlib
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from finops_devenv import realnode, sandbox, tls

CHART = realnode.REPO_ROOT / "deploy" / "helm" / "finops-operator"
HELM_BUILD = realnode.REPO_ROOT / "tools" / "build-helm.sh"
EXAMPLES = realnode.REPO_ROOT / "examples"
NAMESPACE = "finops-operator-system"
RELEASE = "finops-operator"
WEBHOOK_SECRET = "webhook-server-cert"
SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"


class ReleaseError(RuntimeError):
    """helm failed, or the release did not reach the state waited for; the message says why."""


@functools.cache
def helm_binary() -> pathlib.Path:
    """helm, built once per machine from the Go module proxy by `tools/build-helm.sh`."""
    done = subprocess.run([str(HELM_BUILD)], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise ReleaseError(f"{HELM_BUILD} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return pathlib.Path(done.stdout.strip().splitlines()[-1])


def image_values(images: Mapping[str, realnode.Image]) -> dict[str, Any]:
    """Values pointing every image of the chart at the ones imported into the node."""

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
    """`extra` laid over `base`, mappings merged key by key (as Helm merges values files)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def helm(node: realnode.RealNode, *args: str, timeout: float = 300) -> str:
    """Run helm against the node's cluster; its output, or ReleaseError with what it said."""
    done = subprocess.run(
        [str(helm_binary()), f"--kubeconfig={node.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise ReleaseError(f"helm {' '.join(args)}: {done.stderr}{done.stdout}")
    return done.stdout


def get(node: realnode.RealNode, *args: str) -> Any:
    """`kubectl get ... -o json`, or None when the object does not exist."""
    done = node.kubectl("get", *args, "-o", "json", check=False)
    if done.returncode != 0:
        return None
    return json.loads(done.stdout)


def items(node: realnode.RealNode, *args: str) -> list[dict[str, Any]]:
    """The items of a `kubectl get` list (empty when the list cannot be read)."""
    found = get(node, *args)
    return list(found["items"]) if found else []


def diagnostics(node: realnode.RealNode) -> str:
    """Pods, recent Events and the logs of every pod that is not Running or Completed."""
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
    return f"{pods}\n{events[-4000:]}\n" + "\n".join(logs)


def wait_for(
    node: realnode.RealNode, what: str, check: Callable[[], bool], timeout: float, every: float = 1
) -> None:
    """Poll `check` until it holds; on timeout raise with the cluster's state attached."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise ReleaseError(f"{what}: not within {timeout:.0f}s\n{diagnostics(node)}")


def webhook_certificate(node: realnode.RealNode, namespace: str, release: str) -> None:
    """What a cluster without cert-manager needs: the serving Secret and the `caBundle`.

    The chart names the Secret `webhook-server-cert` and the hooks' Service in the
    ValidatingWebhookConfiguration; the manager's pod waits for the Secret to exist.
    """
    vwc = get(node, "validatingwebhookconfiguration", f"{release}-validating-webhook-configuration")
    if vwc is None:
        raise ReleaseError(f"release {release} installed no ValidatingWebhookConfiguration")
    service = vwc["webhooks"][0]["clientConfig"]["service"]
    ca = tls.TinyCA(f"{release}-webhook-ca")
    host = f"{service['name']}.{service['namespace']}.svc"
    pair = ca.serving([host, f"{host}.{realnode.CLUSTER_DOMAIN}"])
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": WEBHOOK_SECRET, "namespace": namespace},
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
        "patch", "validatingwebhookconfiguration", vwc["metadata"]["name"], "--type=json",
        f"-p={json.dumps(patch)}",
    )  # fmt: skip


def rolled_out(deployment: Mapping[str, Any]) -> bool:
    """What `kubectl rollout status` waits for: the newest template observed, every wanted
    replica of it updated and available, and no pod of an older template still counted."""
    want = deployment.get("spec", {}).get("replicas", 1)
    generation = deployment.get("metadata", {}).get("generation", 1)
    st = deployment.get("status") or {}
    return st.get("observedGeneration", 0) >= generation and all(
        st.get(field, 0) == want for field in ("replicas", "updatedReplicas", "availableReplicas")
    )


def pod_settled(pod: Mapping[str, Any]) -> bool:
    """Succeeded, or Running with every container ready, and not on its way out."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    st = pod.get("status") or {}
    if st.get("phase") == "Succeeded":
        return True
    return st.get("phase") == "Running" and sandbox.condition(pod, "Ready").get("status") == "True"


def workloads_available(node: realnode.RealNode, namespace: str) -> bool:
    """Every Deployment rolled out, every StatefulSet's replicas ready."""
    deployments = items(node, "deployments", "-n", namespace)
    if not deployments or not all(rolled_out(d) for d in deployments):
        return False
    return all(
        s.get("status", {}).get("readyReplicas", 0) == s["spec"].get("replicas", 1)
        for s in items(node, "statefulsets", "-n", namespace)
    )


def settled(node: realnode.RealNode) -> bool:
    """The whole cluster at rest: every Deployment rolled out and every pod settled. A
    Deployment restarted a moment ago keeps its old pod Running until the new one is ready,
    so pods alone do not tell a rollout in progress from a finished one."""
    pods = items(node, "pods", "-A")
    return (
        bool(pods)
        and all(pod_settled(p) for p in pods)
        and all(rolled_out(d) for d in items(node, "deployments", "-A"))
    )


def install(
    node: realnode.RealNode,
    values: Mapping[str, Any],
    workdir: pathlib.Path,
    *,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    timeout: float = 300,
) -> None:
    """`helm install` the repository's chart and wait until every workload is Available."""
    if get(node, "namespace", namespace) is None:
        node.kubectl("create", "namespace", namespace)
    helm(node, "install", release, str(CHART), "-n", namespace, "-f", values_file(values, workdir))
    if not values.get("certManager", {}).get("enabled", True):
        webhook_certificate(node, namespace, release)
    wait_for(
        node,
        f"every Deployment and StatefulSet of release {release} Available",
        lambda: workloads_available(node, namespace),
        timeout,
    )
    wait_for(
        node,
        f"the admission webhooks of release {release} answering through their Service",
        lambda: webhooks_answer(node, namespace),
        60,
    )


def webhooks_answer(node: realnode.RealNode, namespace: str) -> bool:
    """Whether the API server reaches the manager's webhooks: a server-side dry run of an
    example Offering gets their answer (allowed or denied). An Available manager is not enough:
    kube-proxy may not have programmed the Service's endpoints yet, and a create then fails
    with "failed calling webhook"."""
    offering = next(d for d in examples() if d["kind"] == "Offering")
    probe = {**offering, "metadata": {**offering["metadata"], "namespace": namespace}}
    done = node.kubectl(
        "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe), check=False
    )
    return webhook_answered(done.returncode, done.stderr + done.stdout)


def webhook_answered(returncode: int, output: str) -> bool:
    """Whether a server-side dry run got an answer from the admission webhooks: it passed
    them, or one of them denied it. Any other failure (the API server unreachable, the
    webhook's Service not yet routed, the kind not yet served) is no answer, so the wait goes
    on and its timeout reports the state rather than the next step failing on it."""
    if returncode == 0:
        return True
    return "admission webhook" in output and "denied the request" in output


def values_file(values: Mapping[str, Any], workdir: pathlib.Path) -> str:
    """Write `values` to a new file under `workdir` for `helm -f`."""
    path = workdir / f"values-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return str(path)


def examples(interval: str | None = None) -> list[dict[str, Any]]:
    """The repository's examples, with both CostJobs scheduled every `interval` if given."""
    docs: list[dict[str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                if doc["kind"] == "CostJob" and interval:
                    doc["spec"]["interval"] = interval
                docs.append(doc)
    return docs


def job_from_cronjob(
    node: realnode.RealNode,
    namespace: str,
    cronjob: str,
    name: str,
    scheduled: dt.datetime | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """A Job from a CronJob's template, as `kubectl create job --from=cronjob/...` makes it.

    With `scheduled`, the Job and its pod carry the scheduled-time annotation the CronJob
    controller would have set for a run at that time (the pod reads it through the
    downward API as SCHEDULED_TIMESTAMP); without, the pod pins the current hour. `env`
    replaces the container's variables of those names (a value instead of a Secret's key).
    """
    create = ["create", "job", name, "-n", namespace, f"--from=cronjob/{cronjob}"]
    if scheduled is None and not env:
        node.kubectl(*create)
        return
    job = json.loads(node.kubectl(*create, "--dry-run=client", "-o", "json").stdout)
    pod = job["spec"]["template"]
    if scheduled is not None:
        stamp = scheduled.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        job["metadata"].setdefault("annotations", {})[SCHEDULED_ANNOTATION] = stamp
        pod.setdefault("metadata", {}).setdefault("annotations", {})[SCHEDULED_ANNOTATION] = stamp
    for container in pod["spec"]["containers"]:
        kept = [e for e in container.get("env") or [] if e["name"] not in (env or {})]
        container["env"] = kept + [{"name": k, "value": v} for k, v in (env or {}).items()]
    node.kubectl("create", "-f", "-", input=json.dumps(job))


def job_finished(node: realnode.RealNode, namespace: str, name: str) -> str:
    """'Complete', 'Failed' or '' (still running) for one Job."""
    job = get(node, "job", "-n", namespace, name)
    for cond in (job or {}).get("status", {}).get("conditions") or []:
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return str(cond["type"])
    return ""


def run_job(
    node: realnode.RealNode,
    namespace: str,
    cronjob: str,
    name: str,
    scheduled: dt.datetime | None = None,
    timeout: float = 180,
) -> str:
    """Start a Job from `cronjob`, wait for it to complete, return its pod's log."""
    job_from_cronjob(node, namespace, cronjob, name, scheduled)
    wait_for(
        node, f"Job {namespace}/{name}", lambda: bool(job_finished(node, namespace, name)), timeout
    )
    logs = node.kubectl("logs", "-n", namespace, f"job/{name}", check=False)
    if job_finished(node, namespace, name) != "Complete":
        raise ReleaseError(f"Job {namespace}/{name} failed:\n{logs.stdout}{logs.stderr}")
    return logs.stdout

"""The chart on a real node, used as a platform team uses it.

`helm install` of the repository's chart with the bundled dependencies (PostgreSQL, the
OpenCost stand-in, Prometheus), every workload Available, the examples applied with both
CostJobs scheduled every minute, then: admission through the webhook Service, CronJobs fired
by the real CronJob controller running the image's job modes, costs on the Subscriptions
equal to the ledger and to the gateway's answer through its Service, garbage collection of a
deleted CostJob's CronJob and Secret, an upgrade that rolls the manager without losing a
charge row, and an uninstall that strands nothing. The tests run in file order and share one
release.

There is no cert-manager here: `certManager.enabled=false`, and the test does what such a
cluster's admin does (the serving Secret and the caBundle; see `_chart.webhook_certificate`).
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from finops.devenv import realnode
from tests.cluster import _chart
from tests.cluster._chart import NAMESPACE, RELEASE

TENANT = "team-apps"
# The OpenCost stand-in serves a generated cluster (namespaces ns-0000..ns-0002); this
# Subscription meters one of them, next to the examples.
GENERATED_SUB = "apps-generated"
GENERATED = {
    "apiVersion": "finops.stakater.com/v1alpha1",
    "kind": "Subscription",
    "metadata": {"name": GENERATED_SUB, "namespace": TENANT},
    "spec": {
        "offeringRef": {"name": "app-hosting", "namespace": NAMESPACE},
        "parent": {"subscriptionRef": {"name": "apps-platform", "namespace": TENANT}},
        "usageSources": [{"namespace": "ns-0000"}],
    },
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("chart")


@pytest.fixture(scope="module")
def values(images: dict[str, realnode.Image]) -> dict[str, Any]:
    return _chart.merge(
        _chart.image_values(images),
        {"certManager": {"enabled": False}, "mdoDependencies": {"enabled": True}},
    )


@pytest.fixture(scope="module")
def release(
    node: realnode.RealNode, values: dict[str, Any], workdir: pathlib.Path
) -> Iterator[str]:
    node.kubectl("create", "namespace", NAMESPACE)
    _chart.helm(
        node,
        "install",
        RELEASE,
        str(_chart._helm.CHART),
        "-n",
        NAMESPACE,
        "-f",
        _chart.values_file(values, workdir),
    )
    _chart.webhook_certificate(node, NAMESPACE, RELEASE)
    _chart.wait_for(
        "every Deployment and StatefulSet Available",
        lambda: _chart.workloads_available(node, NAMESPACE),
        300,
        node,
    )
    yield RELEASE


def pods(node: realnode.RealNode, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["pods", "-n", namespace] + (["-l", selector] if selector else [])
    found = _chart.get(node, *args)
    return list(found["items"]) if found else []


def test_every_pod_of_the_release_runs_as_its_image_says(
    node: realnode.RealNode, release: str
) -> None:
    running = pods(node, NAMESPACE)
    assert running, "no pod in the release namespace"
    for pod in running:
        assert pod["status"]["phase"] == "Running", json.dumps(pod["status"])[:2000]
        for status in pod["status"]["containerStatuses"]:
            assert status["ready"], f"{pod['metadata']['name']}/{status['name']} not ready"
    manager = pods(node, NAMESPACE, "control-plane=controller-manager")
    assert len(manager) == 1
    security = manager[0]["spec"]["containers"][0].get("securityContext") or {}
    assert security.get("readOnlyRootFilesystem") is True
    # The image's numeric non-root user is the one the container runs as.
    uid = node.kubectl(
        "exec",
        "-n",
        NAMESPACE,
        manager[0]["metadata"]["name"],
        "--",
        "python3",
        "-c",
        "import os; print(os.getuid())",
    ).stdout.strip()
    assert uid == "65532"


def test_the_examples_apply_and_a_bad_offering_is_refused_by_the_webhook_service(
    node: realnode.RealNode, release: str
) -> None:
    node.apply([*_chart.examples("1m"), GENERATED])
    bad = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Offering",
        "metadata": {"name": "loop", "namespace": NAMESPACE},
        "spec": {
            "pricing": {
                "subscriptionFee": {
                    "period": "1h",
                    "tickAlignment": "ActivatedAt",
                    "priceMicros": 1,
                }
            },
            "compatibility": {"requiredOfferings": [{"name": "loop", "namespace": NAMESPACE}]},
        },
    }
    done = node.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert 'admission webhook "voffering-v1alpha1.kb.io" denied the request' in done.stderr
    assert f"circular dependency detected: {NAMESPACE}/loop -> {NAMESPACE}/loop" in done.stderr

    def all_active() -> bool:
        subs = _chart.get(node, "subscriptions", "-n", TENANT) or {"items": []}
        return len(subs["items"]) == 4 and all(
            (s.get("status") or {}).get("activatedAt") for s in subs["items"]
        )

    _chart.wait_for(
        "the example Subscriptions and the generated one activated", all_active, 120, node
    )


def completed_jobs(node: realnode.RealNode, cronjob: str) -> list[dict[str, Any]]:
    jobs = _chart.get(node, "jobs", "-n", NAMESPACE) or {"items": []}
    return [
        j
        for j in jobs["items"]
        if any(o.get("name") == cronjob for o in j["metadata"].get("ownerReferences") or [])
        and (j.get("status") or {}).get("succeeded")
    ]


@pytest.mark.parametrize("costjob", ["resource-cost-collection", "subscription-charge-collection"])
def test_each_costjob_cronjob_fires_and_its_pod_runs_the_job_mode_to_completion(
    node: realnode.RealNode, release: str, costjob: str
) -> None:
    cronjob = f"{costjob}-cronjob"
    cj = _chart.get(node, "cronjob", "-n", NAMESPACE, cronjob)
    assert cj is not None, f"no CronJob {cronjob}"
    assert cj["spec"]["schedule"] == "* * * * *"
    _chart.wait_for(
        f"a Job of CronJob {cronjob} completed",
        lambda: bool(completed_jobs(node, cronjob)),
        200,
        node,
        interval=2,
    )
    job = completed_jobs(node, cronjob)[0]
    scheduled = job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
    template = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in template["env"]}
    assert "fieldRef" in env["SCHEDULED_TIMESTAMP"]["valueFrom"]
    pod = pods(node, NAMESPACE, f"job-name={job['metadata']['name']}")[0]
    assert pod["status"]["phase"] == "Succeeded"
    logs = node.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"]).stdout
    # The pod pinned its hour from the downward-API timestamp the CronJob controller set.
    hour = dt.datetime.fromisoformat(scheduled.replace("Z", "+00:00")).replace(
        minute=0, second=0, microsecond=0
    )
    if costjob == "resource-cost-collection":
        assert f"up to {hour.strftime('%Y-%m-%dT%H:00:00Z')}" in logs, logs[-3000:]
    status = _chart.get(node, "costjob", "-n", NAMESPACE, costjob)["status"]
    assert status.get("lastStatus") or status.get("conditions"), status


def ledger_sums(node: realnode.RealNode) -> dict[str, int]:
    """Ledger total per Subscription uid."""
    rows = _chart.psql(
        node,
        NAMESPACE,
        RELEASE,
        "SELECT subscription_uid, sum(amount_micros) FROM subscription_charges GROUP BY 1",
    )
    out: dict[str, int] = {}
    for line in rows.splitlines():
        uid, total = line.split("\t")
        out[uid] = int(total)
    return out


def tenant_uids(node: realnode.RealNode) -> dict[str, str]:
    subs = _chart.get(node, "subscriptions", "-n", TENANT)["items"]
    return {s["metadata"]["uid"]: s["metadata"]["name"] for s in subs}


def test_costs_appear_on_the_subscriptions_and_equal_the_ledger(
    node: realnode.RealNode, release: str
) -> None:
    metered = next(u for u, n in tenant_uids(node).items() if n == GENERATED_SUB)

    def costed() -> bool:
        return ledger_sums(node).get(metered, 0) > 0

    _chart.wait_for("usage of the generated namespace charged", costed, 240, node, interval=5)
    sub = _chart.get(node, "subscription", "-n", TENANT, GENERATED_SUB)
    costs = (sub.get("status") or {}).get("costs") or []
    assert costs, f"{GENERATED_SUB} has no status.costs: {sub.get('status')}"


def test_the_gateway_answers_through_its_service_with_the_ledger_sums(
    node: realnode.RealNode, release: str
) -> None:
    svc = _chart.get(node, "service", "-n", NAMESPACE, f"{RELEASE}-finops-gateway-service")
    assert svc is not None
    ip = svc["spec"]["clusterIP"]
    node.kubectl("create", "serviceaccount", "reader", "-n", TENANT, check=False)
    node.kubectl(
        "create",
        "rolebinding",
        "reader-view",
        "-n",
        TENANT,
        "--clusterrole=view",
        f"--serviceaccount={TENANT}:reader",
        check=False,
    )
    token = node.kubectl("create", "token", "reader", "-n", TENANT).stdout.strip()
    now = dt.datetime.now(dt.UTC)
    start = (now - dt.timedelta(days=2)).strftime("%Y-%m-%dT00:00:00Z")
    end = (now + dt.timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z")
    uids = tenant_uids(node)
    sums = {u: v for u, v in ledger_sums(node).items() if u in uids}
    resp = httpx.get(
        f"http://{ip}:8080/api/v1/namespaces/{TENANT}/costs",
        params={"from": start, "to": end},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    by_uid: dict[str, int] = {}
    for item in body["items"]:
        by_uid[item["subscriptionUid"]] = by_uid.get(item["subscriptionUid"], 0) + int(
            item["totalMicros"]
        )
    assert {u: v for u, v in by_uid.items() if v} == {u: v for u, v in sums.items() if v}
    assert sum(sums.values()) > 0
    denied = httpx.get(
        f"http://{ip}:8080/api/v1/namespaces/{TENANT}/costs",
        params={"from": start, "to": end},
        timeout=30,
    )
    assert denied.status_code == 401


def test_deleting_a_costjob_garbage_collects_its_cronjob_and_secret(
    node: realnode.RealNode, release: str
) -> None:
    spare = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": "spare", "namespace": NAMESPACE},
        "spec": {"type": "ResourceCostCollection", "interval": "24h"},
    }
    node.apply([spare])
    _chart.wait_for(
        "the spare CronJob",
        lambda: _chart.get(node, "cronjob", "-n", NAMESPACE, "spare-cronjob") is not None,
        60,
        node,
    )
    owned = [
        s["metadata"]["name"]
        for s in (_chart.get(node, "secrets", "-n", NAMESPACE) or {"items": []})["items"]
        if any(
            o.get("kind") == "CostJob" and o.get("name") == "spare"
            for o in s["metadata"].get("ownerReferences") or []
        )
    ]
    assert owned, "the spare CostJob has no Secret"
    node.kubectl("delete", "costjob", "spare", "-n", NAMESPACE, "--wait=true")

    def gone() -> bool:
        return _chart.get(node, "cronjob", "-n", NAMESPACE, "spare-cronjob") is None and all(
            _chart.get(node, "secret", "-n", NAMESPACE, name) is None for name in owned
        )

    _chart.wait_for("CronJob and Secret of the deleted CostJob collected", gone, 60, node)


def test_an_upgrade_rolls_the_manager_and_loses_no_charge_row(
    node: realnode.RealNode, release: str, values: dict[str, Any], workdir: pathlib.Path
) -> None:
    before = _chart.psql(
        node,
        NAMESPACE,
        RELEASE,
        "SELECT count(*), coalesce(sum(amount_micros), 0) FROM subscription_charges",
    )
    old = {p["metadata"]["name"] for p in pods(node, NAMESPACE, "control-plane=controller-manager")}
    changed = _chart.merge(
        values, {"controllerManager": {"manager": {"env": {"finopsWorkers": "2"}}}}
    )
    _chart.helm(
        node,
        "upgrade",
        RELEASE,
        str(_chart._helm.CHART),
        "-n",
        NAMESPACE,
        "-f",
        _chart.values_file(changed, workdir),
    )

    def rolled() -> bool:
        now = pods(node, NAMESPACE, "control-plane=controller-manager")
        return (
            len(now) == 1
            and now[0]["metadata"]["name"] not in old
            and now[0]["status"]["phase"] == "Running"
            and all(c["ready"] for c in now[0]["status"].get("containerStatuses") or [])
        )

    _chart.wait_for("the manager rolled to the new values", rolled, 180, node)
    env = pods(node, NAMESPACE, "control-plane=controller-manager")[0]["spec"]["containers"][0]
    assert {"name": "FINOPS_WORKERS", "value": "2"} in env["env"]
    count, total = before.split("\t")
    after = _chart.psql(
        node,
        NAMESPACE,
        RELEASE,
        "SELECT count(*), coalesce(sum(amount_micros), 0) FROM subscription_charges",
    )
    count_after, _total_after = after.split("\t")
    assert int(count_after) >= int(count), (before, after)
    kept = _chart.psql(node, NAMESPACE, RELEASE, "SELECT count(*) FROM subscription_charges")
    assert int(kept) >= int(count)
    del total


def test_uninstall_removes_every_workload_and_binding_of_the_release(
    node: realnode.RealNode, release: str
) -> None:
    # CostJobs first, while the manager runs: their CronJobs and Secrets go with them.
    # Subscriptions keep their finalizer until their billing settles (the hour closes),
    # which is longer than this test waits, so they are left to the ledger.
    node.kubectl("delete", "costjobs", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    _chart.helm(node, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")

    def empty() -> bool:
        left = pods(node, NAMESPACE)
        return not left

    _chart.wait_for("every pod of the release gone", empty, 180, node)
    for kind in ("deployments", "statefulsets", "cronjobs", "jobs", "services", "configmaps"):
        found = _chart.get(
            node, kind, "-n", NAMESPACE, "-l", f"app.kubernetes.io/instance={RELEASE}"
        ) or {"items": []}
        assert not found["items"], f"{kind} left: {[i['metadata']['name'] for i in found['items']]}"
    for kind in ("clusterroles", "clusterrolebindings", "validatingwebhookconfigurations"):
        found = _chart.get(node, kind, "-l", f"app.kubernetes.io/instance={RELEASE}")
        assert found is not None and not found["items"], kind

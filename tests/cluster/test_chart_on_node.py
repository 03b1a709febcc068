"""The chart with its bundled dependencies on a real node, used as a platform team uses it.

`helm install` of the repository's chart with `mdoDependencies.enabled=true` (PostgreSQL, the
OpenCost stand-in replaying the real captures, Prometheus) and the starter CostJob, every
workload Available, the examples applied with both CostJobs scheduled every minute, then:
admission through the webhook Service, CronJobs fired by the real CronJob controller running
the image's job modes, the chart's CostJob resources and sharding in the pod that runs,
costs on the Subscriptions equal to the ledger and to the gateway's answer through its
Service, garbage collection of a deleted CostJob's CronJob and Secret, an upgrade that rolls
the manager without losing a charge row, and the documented uninstall that strands nothing.
The tests run in file order and share one release.

There is no cert-manager here: `certManager.enabled=false`, and the release gets what such a
cluster's admin provides (the serving Secret and the caBundle; `release.webhook_certificate`).
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from finops_devenv import realnode, release
from tests.cluster import _chart
from tests.cluster._chart import NAMESPACE, RELEASE, TENANT

STARTER_CRONJOB = f"{RELEASE}-daily-scraping-job-cronjob"
STARTER_RESOURCES = {
    "requests": {"cpu": "100m", "memory": "96Mi"},
    "limits": {"cpu": "1", "memory": "320Mi"},
}
PG_SETTINGS = {"shared_buffers": "64MB"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("chart")


@pytest.fixture(scope="module")
def values(images: dict[str, realnode.Image]) -> dict[str, Any]:
    return release.merge(
        release.image_values(images),
        {
            "certManager": {"enabled": False},
            # A setting unlike the server's default, to see it reach the server.
            "mdoDependencies": {"enabled": True, "postgres": {"settings": PG_SETTINGS}},
            "costJob": {
                "enabled": True,
                "interval": "1h",
                "resources": STARTER_RESOURCES,
                "sharding": {"namespacesPerShard": 2, "concurrency": 2},
            },
        },
    )


@pytest.fixture(scope="module")
def installed(
    node: realnode.RealNode, values: dict[str, Any], workdir: pathlib.Path
) -> Iterator[str]:
    release.install(node, values, workdir)
    yield RELEASE


def test_every_pod_of_the_release_runs_as_its_image_says(
    node: realnode.RealNode, installed: str
) -> None:
    running = [  # the workloads' pods; a CronJob's Job may have come and gone meanwhile
        p
        for p in _chart.pods(node, NAMESPACE)
        if not any(o["kind"] == "Job" for o in p["metadata"].get("ownerReferences") or [])
    ]
    names = sorted(p["metadata"]["name"].rsplit("-", 2)[0] for p in running)
    assert len(running) == 5, names  # manager, gateway, PostgreSQL, OpenCost, Prometheus
    for pod in running:
        assert pod["status"]["phase"] == "Running", json.dumps(pod["status"])[:2000]
        for status in pod["status"]["containerStatuses"]:
            assert status["ready"], f"{pod['metadata']['name']}/{status['name']} not ready"
            # Every image runs as a non-root user.
            uid = node.kubectl(
                "exec", "-n", NAMESPACE, pod["metadata"]["name"], "-c", status["name"], "--",
                "python3", "-c", "import os; print(os.getuid())",
            ).stdout.strip()  # fmt: skip
            assert uid not in ("", "0"), f"{pod['metadata']['name']}/{status['name']} is root"
    (manager,) = _chart.pods(node, NAMESPACE, "control-plane=controller-manager")
    container = manager["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # The image's numeric user, the one runAsNonRoot can verify.
    uid = node.kubectl(
        "exec", "-n", NAMESPACE, manager["metadata"]["name"], "--", "python3", "-c",
        "import os; print(os.getuid())",
    ).stdout.strip()  # fmt: skip
    assert uid == "65532"


def test_the_bundled_postgres_runs_with_the_settings_given(
    node: realnode.RealNode, installed: str
) -> None:
    for name, value in PG_SETTINGS.items():
        assert _chart.psql(node, f"SHOW {name}") == value, name


def test_the_examples_apply_and_a_bad_offering_is_refused_by_the_webhook_service(
    node: realnode.RealNode, installed: str
) -> None:
    node.apply(release.examples("1m"))
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
        subs = _chart.tenant_subscriptions(node).values()
        return len(subs) == 3 and all((s.get("status") or {}).get("activatedAt") for s in subs)

    release.wait_for(node, "the example Subscriptions activated", all_active, 120)


def completed_jobs(node: realnode.RealNode, cronjob: str) -> list[dict[str, Any]]:
    return [
        j
        for j in release.items(node, "jobs", "-n", NAMESPACE)
        if any(o.get("name") == cronjob for o in j["metadata"].get("ownerReferences") or [])
        and (j.get("status") or {}).get("succeeded")
    ]


@pytest.mark.parametrize("cronjob", [_chart.ALLOCATION_CRONJOB, _chart.CHARGE_CRONJOB])
def test_each_costjob_cronjob_fires_and_its_pod_runs_the_job_mode_to_completion(
    node: realnode.RealNode, installed: str, cronjob: str
) -> None:
    cj = release.get(node, "cronjob", "-n", NAMESPACE, cronjob)
    assert cj is not None, f"no CronJob {cronjob}"
    assert cj["spec"]["schedule"] == "* * * * *"
    release.wait_for(
        node,
        f"a Job of CronJob {cronjob} completed",
        lambda: bool(completed_jobs(node, cronjob)),
        200,
        every=2,
    )
    job = completed_jobs(node, cronjob)[0]
    scheduled = job["metadata"]["annotations"][release.SCHEDULED_ANNOTATION]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "fieldRef" in env["SCHEDULED_TIMESTAMP"]["valueFrom"]
    (pod,) = _chart.pods(node, NAMESPACE, f"job-name={job['metadata']['name']}")
    assert pod["status"]["phase"] == "Succeeded"
    logs = node.kubectl("logs", "-n", NAMESPACE, pod["metadata"]["name"]).stdout
    # The pod pinned its hour from the timestamp the CronJob controller set.
    hour = dt.datetime.fromisoformat(scheduled.replace("Z", "+00:00"))
    if cronjob == _chart.ALLOCATION_CRONJOB:
        assert f"up to {hour.strftime('%Y-%m-%dT%H:00:00Z')}" in logs, logs[-3000:]
    costjob = cronjob.removesuffix("-cronjob")
    status = release.get(node, "costjob", "-n", NAMESPACE, costjob)["status"]
    assert status.get("lastStatus") or status.get("conditions"), status


def test_the_starter_costjob_runs_with_the_charts_resources_and_sharding(
    node: realnode.RealNode, installed: str
) -> None:
    cj = release.get(node, "cronjob", "-n", NAMESPACE, STARTER_CRONJOB)
    assert cj is not None, "costJob.enabled rendered no starter CostJob"
    logs = release.run_job(node, NAMESPACE, STARTER_CRONJOB, "starter-by-hand")
    (pod,) = _chart.pods(node, NAMESPACE, "job-name=starter-by-hand")
    (loader,) = pod["spec"]["containers"]
    assert loader["resources"] == STARTER_RESOURCES
    # The six captured namespaces in shards of two, two at a time.
    assert "3 shard(s) of at most 2 namespaces, 2 at a time" in logs, logs[-3000:]


def test_costs_appear_on_the_subscriptions_and_equal_the_ledger(
    node: realnode.RealNode, installed: str
) -> None:
    subs = _chart.tenant_subscriptions(node)
    # apps-observability meters prometheus-system, whose captured volume is there all hour.
    metered = next(u for u, s in subs.items() if s["metadata"]["name"] == "apps-observability")

    def agree() -> bool:
        anchor = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
        settled = _chart.month_settled(node, anchor)
        now = _chart.tenant_subscriptions(node)
        return usage_charged(node, metered) > 0 and all(
            _chart.month_current(sub) == settled.get(uid, 0) for uid, sub in now.items()
        )

    release.wait_for(node, "status.costs equal to the ledger, usage charged", agree, 240, every=5)


def test_the_charge_job_pods_judge_a_budget_and_warn_once(
    node: realnode.RealNode, installed: str
) -> None:
    # The platform fee's future ticks alone put this month's forecast over one dollar.
    tiny = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Budget",
        "metadata": {"name": "tiny", "namespace": TENANT},
        "spec": {
            "amount": "1",
            "currency": "USD",
            "period": "Monthly",
            "thresholds": [{"percent": 100, "basis": "Forecast"}],
        },
    }
    node.apply([tiny])

    def judged() -> bool:
        status = (release.get(node, "budget", "tiny", "-n", TENANT) or {}).get("status") or {}
        return status.get("state") in ("ForecastExceeded", "Exceeded")

    release.wait_for(node, "the Budget judged by a charge run", judged, 150, every=3)
    seen = {j["metadata"]["name"] for j in completed_jobs(node, _chart.CHARGE_CRONJOB)}
    release.wait_for(
        node,
        "a later charge run, which judges the Budget again",
        lambda: bool(
            {j["metadata"]["name"] for j in completed_jobs(node, _chart.CHARGE_CRONJOB)} - seen
        ),
        150,
        every=3,
    )
    crossed = [
        e
        for e in release.items(node, "events", "-n", TENANT)
        if e["reason"] == "ForecastThresholdCrossed" and e["involvedObject"]["name"] == "tiny"
    ]
    # The crossing is announced once, however many runs see it.
    assert len(crossed) == 1 and crossed[0].get("count", 1) == 1, crossed


def usage_charged(node: realnode.RealNode, uid: str) -> int:
    return int(
        _chart.psql(
            node,
            "SELECT coalesce(sum(amount_micros), 0) FROM subscription_charges"
            f" WHERE subscription_uid = '{uid}' AND source <> 'subscription'",
        )
    )


def test_the_gateway_answers_through_its_service_with_the_ledger_sums(
    node: realnode.RealNode, installed: str
) -> None:
    svc = release.get(node, "service", "-n", NAMESPACE, f"{RELEASE}-finops-gateway-service")
    assert svc is not None
    url = f"http://{svc['spec']['clusterIP']}:8080/api/v1/namespaces/{TENANT}/costs"
    node.kubectl("create", "serviceaccount", "reader", "-n", TENANT)
    node.kubectl(
        "create", "rolebinding", "reader-view", "-n", TENANT, "--clusterrole=view",
        f"--serviceaccount={TENANT}:reader",
    )  # fmt: skip
    token = node.kubectl("create", "token", "reader", "-n", TENANT).stdout.strip()
    now = dt.datetime.now(dt.UTC)
    window = {
        "from": (now - dt.timedelta(days=2)).strftime("%Y-%m-%dT00:00:00Z"),
        "to": (now + dt.timedelta(days=1)).strftime("%Y-%m-%dT00:00:00Z"),
    }
    uids = set(_chart.tenant_subscriptions(node))
    ledger: dict[str, int] = {}
    for (uid, _hour, _source), amount in _chart.charge_rows(node).items():
        if uid in uids:
            ledger[uid] = ledger.get(uid, 0) + amount
    resp = httpx.get(url, params=window, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert resp.status_code == 200, resp.text
    answered: dict[str, int] = {}
    for item in resp.json()["items"]:
        uid = item["subscriptionUid"]
        answered[uid] = answered.get(uid, 0) + int(item["totalMicros"])
    assert {u: v for u, v in answered.items() if v} == {u: v for u, v in ledger.items() if v}
    assert sum(ledger.values()) > 0
    assert httpx.get(url, params=window, timeout=30).status_code == 401


def test_deleting_a_costjob_garbage_collects_its_cronjob_and_secret(
    node: realnode.RealNode, installed: str
) -> None:
    spare = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": "spare", "namespace": NAMESPACE},
        "spec": {"type": "ResourceCostCollection", "interval": "24h"},
    }
    node.apply([spare])
    release.wait_for(
        node,
        "the spare CronJob",
        lambda: release.get(node, "cronjob", "-n", NAMESPACE, "spare-cronjob") is not None,
        60,
    )
    owned = [
        s["metadata"]["name"]
        for s in release.items(node, "secrets", "-n", NAMESPACE)
        if any(
            o.get("kind") == "CostJob" and o.get("name") == "spare"
            for o in s["metadata"].get("ownerReferences") or []
        )
    ]
    assert owned, "the spare CostJob has no Secret"
    node.kubectl("delete", "costjob", "spare", "-n", NAMESPACE, "--wait=true")

    def gone() -> bool:
        return release.get(node, "cronjob", "-n", NAMESPACE, "spare-cronjob") is None and all(
            release.get(node, "secret", "-n", NAMESPACE, name) is None for name in owned
        )

    release.wait_for(node, "CronJob and Secret of the deleted CostJob collected", gone, 60)


def test_an_upgrade_rolls_the_manager_and_loses_no_charge_row(
    node: realnode.RealNode, installed: str, values: dict[str, Any], workdir: pathlib.Path
) -> None:
    before = _chart.charge_rows(node)
    assert before
    manager_pods = "control-plane=controller-manager"
    old = {p["metadata"]["name"] for p in _chart.pods(node, NAMESPACE, manager_pods)}
    changed = release.merge(
        values, {"controllerManager": {"manager": {"env": {"finopsWorkers": "2"}}}}
    )
    release.helm(
        node, "upgrade", RELEASE, str(release.CHART), "-n", NAMESPACE,
        "-f", release.values_file(changed, workdir),
    )  # fmt: skip

    def rolled() -> bool:
        now = _chart.pods(node, NAMESPACE, "control-plane=controller-manager")
        return (
            len(now) == 1
            and now[0]["metadata"]["name"] not in old
            and all(c["ready"] for c in now[0]["status"].get("containerStatuses") or [])
        )

    release.wait_for(node, "the manager rolled to the new values", rolled, 180)
    (manager,) = _chart.pods(node, NAMESPACE, "control-plane=controller-manager")
    assert {"name": "FINOPS_WORKERS", "value": "2"} in manager["spec"]["containers"][0]["env"]
    after = _chart.charge_rows(node)
    assert set(before) <= set(after), sorted(set(before) - set(after))
    # Hours before the one in progress are settled: not a micro of them moved.
    current = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H")
    settled = {k: v for k, v in before.items() if k[1] < current}
    assert settled == {k: after[k] for k in settled}


def test_the_documented_uninstall_strands_nothing(node: realnode.RealNode, installed: str) -> None:
    # 1. Subscriptions: each winds down until a charge run settles its last billable hour.
    node.kubectl("delete", "subscriptions", "--all", "-n", TENANT, "--wait=false")

    def waiting() -> bool:
        subs = _chart.tenant_subscriptions(node).values()
        return all(
            _chart.condition(s, "Deleting").get("reason") == "WaitingForCollectionJob"
            and s["status"].get("deactivatedAt")
            for s in subs
        )

    release.wait_for(node, "Subscriptions waiting for the collection job", waiting, 120)
    # A Subscription's last billable hour holds its fee's final boundary: app-hosting's daily
    # fee closes at the next midnight. The runs that release them all are the ones the
    # CronJobs make a little after it.
    ends = [
        dt.datetime.fromisoformat(s["status"]["deactivatedAt"].replace("Z", "+00:00"))
        for s in _chart.tenant_subscriptions(node).values()
    ]
    later = (max(ends) + dt.timedelta(days=1)).replace(hour=2, minute=5, second=0)
    release.run_job(node, NAMESPACE, _chart.ALLOCATION_CRONJOB, "later-allocations", later)
    release.run_job(node, NAMESPACE, _chart.CHARGE_CRONJOB, "later-charges", later)
    release.wait_for(
        node, "every Subscription released", lambda: not _chart.tenant_subscriptions(node), 120
    )
    # 2. Offerings; the webhook allows it now. 3. CostJobs (and their CronJobs), PriceBooks,
    # the provider.
    node.kubectl("delete", "offerings", "--all", "-n", NAMESPACE)
    node.kubectl("delete", "costjobs,pricebooks", "--all", "-n", NAMESPACE, "--wait=true")
    node.kubectl("delete", "budgets", "--all", "-n", TENANT)  # our extension, no finalizer
    node.kubectl("delete", "finopsprovider", "default", "--ignore-not-found")
    release.wait_for(
        node,
        "every generated CronJob collected",
        lambda: not release.items(node, "cronjobs", "-n", NAMESPACE),
        60,
    )
    # 4. The release.
    release.helm(node, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    release.wait_for(
        node, "every pod of the release gone", lambda: not _chart.pods(node, NAMESPACE), 180
    )
    label = f"app.kubernetes.io/instance={RELEASE}"
    for kind in ("deployments", "statefulsets", "cronjobs", "jobs", "services", "configmaps"):
        left = release.items(node, kind, "-n", NAMESPACE, "-l", label)
        assert not left, f"{kind} left: {[i['metadata']['name'] for i in left]}"
    for kind in ("clusterroles", "clusterrolebindings", "validatingwebhookconfigurations"):
        found = release.get(node, kind, "-l", label)
        assert found is not None and not found["items"], kind
    # 5. The CRDs; nothing holds a finalizer, so they go at once.
    crds = [
        c["metadata"]["name"]
        for c in release.items(node, "crds")
        if c["spec"]["group"] == "finops.stakater.com"
    ]
    assert len(crds) == len(list((release.CHART / "crds").glob("*.yaml")))
    node.kubectl("delete", "crds", *crds, "--timeout=60s")
    assert not [c for c in release.items(node, "crds") if "finops" in c["metadata"]["name"]]

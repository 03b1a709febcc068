"""CostJob reconciler on a real API server: the owned CronJob and DSN Secret.

The API server validates what we write (cron syntax, pod template), so a wrong schedule or
a malformed template fails here even though no CronJob ever fires.
"""

from __future__ import annotations

import base64
import functools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.kube.test_controller_support import (
    FINOPS,
    ControllerProcess,
    create,
    events_for,
    get,
    merge_patch,
    running_controller,
    wait_for,
)

from finops.api import rules
from finops.provisioning import costjobs
from finops_devenv import controlplane

DSN = "postgresql://finops:secret@db.invalid:5432/finops"


@pytest.fixture
def controller(kube: controlplane.ControlPlane, kube_namespace: str) -> Iterator[ControllerProcess]:
    env = {"IMAGE_PULL_SECRETS": '[{"name": "regcred"}]', "POSTGRES_CONNECTION_STRING": DSN}
    with running_controller(kube, kube_namespace, env=env) as proc:
        yield proc


def costjob_body(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def cronjob(kube: controlplane.ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    return get(kube, f"/apis/batch/v1/namespaces/{ns}/cronjobs/{name}-cronjob")


def container(cj: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    return result


def env(cj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(cj)["env"]}


def test_cronjob_and_secret_have_the_documented_shape(
    kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
) -> None:
    ns = kube_namespace
    owner = create(
        kube,
        f"{FINOPS}/namespaces/{ns}/costjobs",
        costjob_body(
            "alloc",
            type="ResourceCostCollection",
            interval="1h",
            statusUpdateTimeout="2m",
            resources={"requests": {"cpu": "200m", "memory": "256Mi"}},
        ),
    )
    cj = wait_for(lambda: cronjob(kube, ns, "alloc"), what="CronJob")
    assert cj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "finops-operator"
    ref = cj["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "CostJob",
        "alloc",
        owner["metadata"]["uid"],
        True,
    )
    assert cj["spec"]["schedule"] == "0 * * * *"
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "finops-operator-job"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["securityContext"]["runAsNonRoot"] is True
    c = container(cj)
    assert (c["name"], c["image"], c["args"]) == (
        "loader",
        "ghcr.io/example/finops-operator:test",
        ["--mode=cronjob"],
    )
    assert c["resources"] == {"requests": {"cpu": "200m", "memory": "256Mi"}}  # no limits
    e = env(cj)
    assert e["STATUS_UPDATE_TIMEOUT"]["value"] == "2m"
    assert e["DATABASE_INIT_TIMEOUT"]["value"] == "2m"  # the CRD default, copied as set
    assert e["HOURS_LOOKBACK"]["value"] == "5"
    assert e["OPENCOST_CONNECTION_STRING"]["value"] == "http://opencost.invalid:9003"
    assert e["SCHEDULED_TIMESTAMP"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/cronjob-scheduled-timestamp']"
    )
    assert e["POSTGRES_CONNECTION_STRING"]["valueFrom"]["secretKeyRef"] == {
        "name": "alloc-costjob-secret",
        "key": "POSTGRES_CONNECTION_STRING",
    }
    secret = get(kube, f"/api/v1/namespaces/{ns}/secrets/alloc-costjob-secret")
    assert secret is not None
    assert base64.b64decode(secret["data"]["POSTGRES_CONNECTION_STRING"]).decode() == DSN
    assert secret["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert "CronJobCreated" in [ev["reason"] for ev in events_for(kube, ns, "alloc")]


def test_every_accepted_interval_becomes_its_schedule(
    kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
) -> None:
    ns = kube_namespace
    spelled = [f"{s // 3600}h" if s % 3600 == 0 else f"{s // 60}m" for s in rules.INTERVAL_SECONDS]
    for i, interval in enumerate(spelled):
        create(kube, f"{FINOPS}/namespaces/{ns}/costjobs", costjob_body(f"j{i}", interval=interval))
    for i, interval in enumerate(spelled):
        name = f"j{i}"
        wait_for(functools.partial(cronjob, kube, ns, name), what=f"CronJob for {interval}")
        cj = cronjob(kube, ns, name)
        assert cj is not None
        assert cj["spec"]["schedule"] == costjobs.schedule_for(interval), interval
    # Charge collection runs the other mode; the default interval is daily.
    create(
        kube,
        f"{FINOPS}/namespaces/{ns}/costjobs",
        costjob_body("charges", type="SubscriptionChargeCollection"),
    )
    cj = wait_for(lambda: cronjob(kube, ns, "charges"), what="charges CronJob")
    assert container(cj)["args"] == ["--mode=collectionjob"]
    assert cj["spec"]["schedule"] == "0 0 * * *"


def test_interval_change_and_hand_edits_are_reconciled(
    kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
) -> None:
    ns = kube_namespace
    create(kube, f"{FINOPS}/namespaces/{ns}/costjobs", costjob_body("edit", interval="1h"))
    wait_for(lambda: cronjob(kube, ns, "edit"), what="CronJob")
    merge_patch(kube, f"{FINOPS}/namespaces/{ns}/costjobs/edit", {"spec": {"interval": "6h"}})
    wait_for(
        lambda: (cj := cronjob(kube, ns, "edit")) and cj["spec"]["schedule"] == "0 */6 * * *",
        what="new schedule",
    )
    assert "CronJobUpdated" in [ev["reason"] for ev in events_for(kube, ns, "edit")]

    # Hand edits to the CronJob: schedule, an extra variable, a label — all reverted.
    cj = cronjob(kube, ns, "edit")
    assert cj is not None
    pod_spec = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    pod_spec["containers"][0]["env"].append({"name": "HAND", "value": "edit"})
    cj["spec"]["schedule"] = "*/7 * * * *"
    cj["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone"
    with kube.http() as client:
        resp = client.put(f"/apis/batch/v1/namespaces/{ns}/cronjobs/edit-cronjob", json=cj)
        assert resp.status_code == 200, resp.text

    def reverted() -> bool:
        now = cronjob(kube, ns, "edit")
        return bool(
            now
            and now["spec"]["schedule"] == "0 */6 * * *"
            and "HAND" not in env(now)
            and now["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "finops-operator"
        )

    wait_for(reverted, what="hand edit reverted")

    # A hand-edited DSN Secret is put back too.
    merge_patch(
        kube,
        f"/api/v1/namespaces/{ns}/secrets/edit-costjob-secret",
        {"data": {"POSTGRES_CONNECTION_STRING": base64.b64encode(b"postgresql://evil").decode()}},
    )

    def secret_restored() -> bool:
        s = get(kube, f"/api/v1/namespaces/{ns}/secrets/edit-costjob-secret") or {}
        return base64.b64decode(s["data"]["POSTGRES_CONNECTION_STRING"]).decode() == DSN

    wait_for(secret_restored, what="secret restored")


def test_a_costjob_outside_the_allowed_namespaces_is_refused_and_reported(
    kube: controlplane.ControlPlane, kube_namespace: str, controller: ControllerProcess
) -> None:
    other = f"t-{uuid.uuid4().hex[:10]}"
    kube.create_namespace(other)
    create(kube, f"{FINOPS}/namespaces/{other}/costjobs", costjob_body("elsewhere", interval="1h"))

    def refused() -> list[dict[str, Any]]:
        return [
            e for e in events_for(kube, other, "elsewhere") if e["reason"] == "NamespaceNotAllowed"
        ]

    event = wait_for(refused, what="refusal event")[0]
    assert event["type"] == "Warning"
    assert other in event["message"] and "COSTJOB_ALLOWED_NAMESPACES" in event["message"]
    assert cronjob(kube, other, "elsewhere") is None
    assert get(kube, f"/api/v1/namespaces/{other}/secrets/elsewhere-costjob-secret") is None

    def scheduled_condition() -> dict[str, Any] | None:
        obj = get(kube, f"{FINOPS}/namespaces/{other}/costjobs/elsewhere") or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Scheduled"), None)

    cond = wait_for(scheduled_condition, what="Scheduled condition")
    assert cond["status"] == "False"
    assert cond["reason"] == "NamespaceNotAllowed"
    assert other in cond["message"]

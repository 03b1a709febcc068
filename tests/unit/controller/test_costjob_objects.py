"""What a CostJob becomes: the CronJob and the DSN Secret, built from the embedded template."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest

from finops.controller import config
from finops.provisioning import costjobs

SETTINGS = config.ControllerSettings(
    postgres_dsn="postgresql://u:p@db:5432/finops",
    opencost_url="http://opencost:9003/",
    opencost_deployment_name="oc",
    opencost_namespace="finops",
    pod_namespace="finops",
    operator_image="img:1",
    costjob_allowed_namespaces=frozenset({"finops"}),
)


def cj(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "alloc", "namespace": "finops", "uid": "u-1", "generation": 1},
        "spec": {"type": "ResourceCostCollection", "interval": "1h", **(spec or {})},
    }


def env_of(cronjob: dict[str, Any]) -> dict[str, dict[str, Any]]:
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container["env"]}


def test_cronjob_shape() -> None:
    obj = costjobs.desired_cronjob(cj(), SETTINGS)
    assert obj["metadata"]["name"] == "alloc-cronjob"
    assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "finops-operator"
    ref = obj["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("CostJob", "u-1", True)
    assert obj["spec"]["concurrencyPolicy"] == "Forbid"
    assert obj["spec"]["schedule"] == "0 * * * *"
    pod = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "finops-operator-job"
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert (container["name"], container["image"], container["args"]) == (
        "loader",
        "img:1",
        ["--mode=cronjob"],
    )
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_charge_collection_runs_collectionjob_mode() -> None:
    obj = costjobs.desired_cronjob(cj({"type": "SubscriptionChargeCollection"}), SETTINGS)
    pod = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"] == ["--mode=collectionjob"]


def test_env_merges_over_template_and_wires_the_secret() -> None:
    env = env_of(costjobs.desired_cronjob(cj({"databaseInitTimeout": "4m"}), SETTINGS))
    assert env["HOURS_LOOKBACK"]["value"] == "5"
    assert (
        "cronjob-scheduled-timestamp"
        in env["SCHEDULED_TIMESTAMP"]["valueFrom"]["fieldRef"]["fieldPath"]
    )
    assert env["POSTGRES_CONNECTION_STRING"]["valueFrom"]["secretKeyRef"] == {
        "name": "alloc-costjob-secret",
        "key": "POSTGRES_CONNECTION_STRING",
    }
    assert env["OPENCOST_CONNECTION_STRING"]["value"] == "http://opencost:9003"
    assert env["DATABASE_INIT_TIMEOUT"]["value"] == "4m"
    assert "STATUS_UPDATE_TIMEOUT" not in env  # only when set
    assert (env["COSTJOB_NAME"]["value"], env["COSTJOB_NAMESPACE"]["value"]) == ("alloc", "finops")


def test_merge_env_replaces_whole_entries_in_place() -> None:
    merged = costjobs.merge_env(
        [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"x": 1}}],
        [{"name": "B", "value": "2"}, {"name": "C", "value": "3"}],
    )
    assert merged == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
        {"name": "C", "value": "3"},
    ]


def test_resources_replace_the_whole_block() -> None:
    obj = costjobs.desired_cronjob(cj({"resources": {"requests": {"cpu": "200m"}}}), SETTINGS)
    container = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "200m"}}
    default = costjobs.desired_cronjob(cj(), SETTINGS)
    assert default["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0][
        "resources"
    ] == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"},
    }


def test_pull_secrets_from_json_and_malformed_json_fails() -> None:
    s = dataclasses.replace(SETTINGS, image_pull_secrets='[{"name": "regcred"}]')
    pod = costjobs.desired_cronjob(cj(), s)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    bad = dataclasses.replace(SETTINGS, image_pull_secrets="[{name:")
    with pytest.raises(costjobs.ConfigurationError, match="IMAGE_PULL_SECRETS"):
        costjobs.desired_cronjob(cj(), bad)


def test_secret_holds_the_dsn() -> None:
    secret = costjobs.desired_secret(cj(), SETTINGS)
    assert secret["metadata"]["name"] == "alloc-costjob-secret"
    raw = base64.b64decode(secret["data"]["POSTGRES_CONNECTION_STRING"]).decode()
    assert raw == SETTINGS.postgres_dsn


def test_refusal_names_the_namespace_and_the_setting() -> None:
    cond = costjobs.scheduled_condition(False, "team-a", SETTINGS)
    assert (cond.status, cond.reason) == ("False", "NamespaceNotAllowed")
    assert "team-a" in cond.message and "COSTJOB_ALLOWED_NAMESPACES" in cond.message


def test_the_loader_pulls_as_the_manager_says_or_as_kubernetes_defaults() -> None:
    def container(settings: config.ControllerSettings) -> dict[str, Any]:
        pod = costjobs.desired_cronjob(cj(), settings)["spec"]["jobTemplate"]["spec"]["template"]
        return dict(pod["spec"]["containers"][0])

    assert "imagePullPolicy" not in container(SETTINGS)
    never = dataclasses.replace(SETTINGS, operator_image_pull_policy="Never")
    assert container(never)["imagePullPolicy"] == "Never"


def test_charge_jobs_get_the_billing_period_settings_and_allocation_jobs_do_not() -> None:
    billing = (("FINOPS_BILLING_TIME_ZONE", "Europe/Berlin"), ("FINOPS_PERIOD_GRACE_HOURS", "6"))
    s = dataclasses.replace(SETTINGS, billing_env=billing)
    charges = env_of(costjobs.desired_cronjob(cj({"type": "SubscriptionChargeCollection"}), s))
    assert {n: charges[n]["value"] for n, _ in billing} == dict(billing)
    allocations = env_of(costjobs.desired_cronjob(cj(), s))
    assert not {n for n, _ in billing} & set(allocations)
    unset = env_of(costjobs.desired_cronjob(cj({"type": "SubscriptionChargeCollection"}), SETTINGS))
    assert "FINOPS_BILLING_TIME_ZONE" not in unset

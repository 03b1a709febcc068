"""CostJob decisions: the CronJob and DSN Secret a CostJob owns, and why it is (not) scheduled.

Pure functions of the CostJob body and the manager's settings: the reconciler
(`finops.controller.costjob`) reads the CostJob, calls these and writes what they return. The
pod template is embedded here; the reconciler's variables are merged over it by name. Job pods
run as their own least-privilege ServiceAccount. A CostJob's `spec.interval` maps to a cron
schedule through the same table as the CRD's CEL rule (`finops.api.rules`), which admits
exactly the intervals a cron schedule can honour; anything else is refused loudly rather than
falling back to daily.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Required, TypedDict

from finops.api import bodies, conditions, environment, models, reasons, rules, timeouts
from finops.api.reasons import ConditionType

Json = dict[str, object]
"""A Kubernetes object (or part of one) this module builds: JSON, written as is."""


class EnvVar(TypedDict, total=False):
    """A container's `env` entry (core/v1 EnvVar)."""

    name: Required[str]
    value: str
    valueFrom: Json


class OwnedMeta(TypedDict, total=False):
    """The metadata of an object a CostJob owns."""

    name: Required[str]
    namespace: Required[str]
    labels: Required[dict[str, str]]
    ownerReferences: Required[list[Json]]
    resourceVersion: str


class Manifest(TypedDict, total=False):
    """A CronJob or Secret a CostJob owns, as it is written."""

    apiVersion: Required[str]
    kind: Required[str]
    type: str
    metadata: Required[OwnedMeta]
    spec: Json
    data: dict[str, str]


class PodSettings(Protocol):
    """What the generated objects take from the manager's settings."""

    @property
    def operator_image(self) -> str: ...
    @property
    def operator_image_pull_policy(self) -> str: ...
    @property
    def image_pull_secrets(self) -> str: ...
    @property
    def job_service_account(self) -> str: ...
    @property
    def opencost_url(self) -> str: ...
    @property
    def postgres_dsn(self) -> str: ...
    @property
    def billing_env(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def costjob_allowed_namespaces(self) -> frozenset[str]: ...


KIND = "CostJob"


CONTAINER = "loader"


MODES = {"ResourceCostCollection": "cronjob", "SubscriptionChargeCollection": "collectionjob"}


COSTJOB_LABEL = "finops.stakater.com/costjob"


MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"


MANAGED_BY = "finops-operator"


TIMEOUTS: tuple[tuple[str, str], ...] = tuple((t.spec_field, t.env_var) for t in timeouts.TABLE)


SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"


TEMPLATE_ENV: tuple[EnvVar, ...] = (
    {"name": environment.Env.CLUSTER_ID, "value": "default"},
    {"name": environment.Env.HOURS_LOOKBACK, "value": "5"},
    {"name": environment.Env.OPENCOST_AGGREGATE, "value": "namespace,pod,container"},
    {"name": environment.Env.OPENCOST_STEP, "value": "1h"},
    {"name": environment.Env.OPENCOST_RESOLUTION, "value": "1m"},
    {
        "name": environment.Env.SCHEDULED_TIMESTAMP,
        "valueFrom": {
            "fieldRef": {
                "apiVersion": "v1",
                "fieldPath": f"metadata.annotations['{SCHEDULED_TIMESTAMP_ANNOTATION}']",
            }
        },
    },
)


TEMPLATE_RESOURCES: Json = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"cpu": "500m", "memory": "256Mi"},
}


CONTAINER_SECURITY_CONTEXT: Json = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
}


POD_SECURITY_CONTEXT: Json = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


class ConfigurationError(ValueError):
    """The manager's configuration cannot produce a CronJob (e.g. malformed IMAGE_PULL_SECRETS)."""


def cronjob_name(costjob_name: str) -> str:
    return f"{costjob_name}-cronjob"


def secret_name(costjob_name: str) -> str:
    return f"{costjob_name}-costjob-secret"


def owner_reference(costjob: bodies.CostJobBody) -> Json:
    """Controller owner reference: deleting the CostJob garbage-collects what it owns."""
    meta = costjob["metadata"]
    return {
        "apiVersion": models.API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def labels(costjob: bodies.CostJobBody) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/name": "finops-operator",
        "app.kubernetes.io/component": "costjob",
        COSTJOB_LABEL: str(costjob["metadata"]["name"]),
    }


def merge_env(template: Sequence[EnvVar], overrides: Sequence[EnvVar]) -> list[EnvVar]:
    """Overlay by name: an override replaces the template entry whole, in its place;
    names only the template has survive; new names follow in override order."""
    by_name = {e["name"]: e for e in overrides}
    merged = [copy.deepcopy(by_name.pop(e["name"], e)) for e in template]
    merged.extend(copy.deepcopy(e) for e in overrides if e["name"] in by_name)
    return merged


def reconciler_env(costjob: bodies.CostJobBody, settings: PodSettings) -> list[EnvVar]:
    """The variables the reconciler names for one CostJob."""
    meta = costjob["metadata"]
    spec = costjob.get("spec") or {}
    env: list[EnvVar] = [
        {"name": environment.Env.COSTJOB_NAME, "value": str(meta["name"])},
        {"name": environment.Env.COSTJOB_NAMESPACE, "value": str(meta["namespace"])},
        {
            "name": environment.Env.POSTGRES_CONNECTION_STRING,
            "valueFrom": {
                "secretKeyRef": {
                    "name": secret_name(meta["name"]),
                    "key": environment.Env.POSTGRES_CONNECTION_STRING,
                }
            },
        },
        {
            "name": environment.Env.OPENCOST_CONNECTION_STRING,
            "value": settings.opencost_url.rstrip("/"),
        },
        {"name": environment.Env.OPERATOR_IMAGE, "value": settings.operator_image},
    ]
    for field, variable in TIMEOUTS:
        value = spec.get(field)
        if value:
            env.append({"name": variable, "value": str(value)})
    if MODES.get(str(spec.get("type") or "")) == "collectionjob":
        env.extend({"name": name, "value": value} for name, value in settings.billing_env)
    return env


def pull_secrets(raw: str) -> list[dict[str, str]]:
    """`IMAGE_PULL_SECRETS` as a JSON array of `{"name": ...}`; malformed JSON is an error."""
    if not raw.strip():
        return []
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"IMAGE_PULL_SECRETS is not valid JSON: {exc.msg}") from exc
    if not isinstance(parsed, list) or not all(
        isinstance(item, dict) and isinstance(item.get("name"), str) for item in parsed
    ):
        raise ConfigurationError('IMAGE_PULL_SECRETS must be a JSON array of {"name": ...}')
    return [{"name": item["name"]} for item in parsed]


def desired_cronjob(costjob: bodies.CostJobBody, settings: PodSettings) -> Manifest:
    """The whole CronJob this CostJob should own."""
    meta = costjob["metadata"]
    spec = costjob.get("spec") or {}
    job_type = spec.get("type") or "ResourceCostCollection"
    mode = MODES.get(job_type)
    if mode is None:
        raise ConfigurationError(f"spec.type {job_type!r} is not a CostJob type")
    schedule = schedule_for(str(spec.get("interval") or "24h"))
    container: Json = {
        "name": CONTAINER,
        "image": settings.operator_image,
        "args": [f"--mode={mode}"],
        "env": merge_env(TEMPLATE_ENV, reconciler_env(costjob, settings)),
        "resources": copy.deepcopy(spec.get("resources") or TEMPLATE_RESOURCES),
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
    }
    if settings.operator_image_pull_policy:
        container["imagePullPolicy"] = settings.operator_image_pull_policy
    pod_spec: Json = {
        "serviceAccountName": settings.job_service_account,
        "automountServiceAccountToken": True,
        "restartPolicy": "OnFailure",
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        "containers": [container],
    }
    secrets = pull_secrets(settings.image_pull_secrets)
    if secrets:
        pod_spec["imagePullSecrets"] = secrets
    lbls = labels(costjob)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": cronjob_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": lbls,
            "ownerReferences": [owner_reference(costjob)],
        },
        "spec": {
            "schedule": schedule,
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {
                "metadata": {"labels": dict(lbls)},
                "spec": {"template": {"metadata": {"labels": dict(lbls)}, "spec": pod_spec}},
            },
        },
    }


def desired_secret(costjob: bodies.CostJobBody, settings: PodSettings) -> Manifest:
    """The DSN Secret the job pod reads through `secretKeyRef`."""
    meta = costjob["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": labels(costjob),
            "ownerReferences": [owner_reference(costjob)],
        },
        "data": {
            environment.Env.POSTGRES_CONNECTION_STRING: base64.b64encode(
                settings.postgres_dsn.encode()
            ).decode()
        },
    }


def scheduled_condition(
    allowed: bool, namespace: str, settings: PodSettings
) -> conditions.DecidedCondition:
    """Why the CostJob is, or is not, scheduled."""
    if allowed:
        return conditions.DecidedCondition(
            ConditionType.SCHEDULED,
            "True",
            reasons.CostJobReason.CRON_JOB_READY,
            "The CronJob and its DSN Secret are in place",
        )
    allowed_list = ", ".join(sorted(settings.costjob_allowed_namespaces)) or "none"
    return conditions.DecidedCondition(
        ConditionType.SCHEDULED,
        "False",
        reasons.CostJobReason.NAMESPACE_NOT_ALLOWED,
        f"Namespace {namespace!r} may not hold the database Secret (COSTJOB_ALLOWED_NAMESPACES: "
        f"{allowed_list}); no CronJob is scheduled. Create the CostJob in an allowed namespace.",
    )


def already_refused(costjob: bodies.CostJobBody) -> bool:
    """The status already records this generation's refusal, so its Event was recorded (by
    this replica or one that led before it, e.g. before an API server outage)."""
    status = costjob.get("status") or {}
    cond: Mapping[str, object] = (
        conditions.find(status.get("conditions"), ConditionType.SCHEDULED) or {}
    )
    return (
        cond.get("status") == "False"
        and cond.get("reason") == "NamespaceNotAllowed"
        and cond.get("observedGeneration") == (costjob.get("metadata") or {}).get("generation")
    )


def owned_by(obj: Mapping[str, Any], costjob: bodies.CostJobBody) -> bool:
    uid = costjob["metadata"]["uid"]
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def cronjob_differs(existing: Mapping[str, Any], candidate: Mapping[str, Any]) -> bool:
    """Compare what we manage: spec, our labels, owner references."""
    e_meta = existing.get("metadata") or {}
    c_meta = candidate.get("metadata") or {}
    return (
        existing.get("spec") != candidate.get("spec")
        or (e_meta.get("labels") or {}) != (c_meta.get("labels") or {})
        or (e_meta.get("ownerReferences") or []) != (c_meta.get("ownerReferences") or [])
    )


class UnschedulableIntervalError(ValueError):
    """An interval no cron schedule can express (only reachable if admission was bypassed)."""


def schedule_for(interval: str) -> str:
    """The cron schedule for an accepted interval; raises for anything else."""
    schedule = rules.interval_schedule(interval)
    if schedule is None:
        raise UnschedulableIntervalError(f"spec.interval {interval!r}: {rules.INTERVAL_MESSAGE}")
    return schedule

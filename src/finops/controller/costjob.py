"""CostJob reconciler: one owned CronJob and one owned DSN Secret per CostJob.

Checklist per CostJob:
1. observe the CostJob (a fresh GET; gone means nothing to do — owner GC cleans up);
2. decide (pure): may this namespace hold the DSN Secret? the desired Secret and CronJob;
3. write: refused -> remove what we own there, report why (condition + Warning Event);
   allowed -> Secret create-or-patch, CronJob create or replace when it differs from the
   desired object (compared after a dry-run so server defaults are not a difference, and
   hand edits are reverted), Events on create/update.

The pod template is embedded here; the reconciler's variables are merged over it by name.
Job pods run as their own least-privilege ServiceAccount (DESIGN §2.7).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Mapping
from typing import Any

import lightkube

from finops.api import conditions, reasons, timeouts
from finops.controller import config, costjob_schedule
from finops.kube import client as kube_client
from finops.kube import events, resources, status

log = logging.getLogger(__name__)

CONTROLLER = "costjob-controller"
KIND = "CostJob"
CONTAINER = "loader"
DSN_KEY = "POSTGRES_CONNECTION_STRING"
SCHEDULED = reasons.ConditionType.SCHEDULED
MODES = {"ResourceCostCollection": "cronjob", "SubscriptionChargeCollection": "collectionjob"}
COSTJOB_LABEL = "finops.stakater.com/costjob"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "finops-operator"

# Timeout fields copied onto the pod when set (databaseViewsRefreshTimeout does nothing).
TIMEOUTS: tuple[tuple[str, str], ...] = tuple((t.spec_field, t.env_var) for t in timeouts.TABLE)

SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"

# The embedded pod template: what a generated pod gets when the reconciler names nothing.
TEMPLATE_ENV: tuple[dict[str, Any], ...] = (
    {"name": "CLUSTER_ID", "value": "default"},
    {"name": "HOURS_LOOKBACK", "value": "5"},
    {"name": "OPENCOST_AGGREGATE", "value": "namespace,pod,container"},
    {"name": "OPENCOST_STEP", "value": "1h"},
    {"name": "OPENCOST_RESOLUTION", "value": "1m"},
    {
        "name": "SCHEDULED_TIMESTAMP",
        "valueFrom": {
            "fieldRef": {
                "apiVersion": "v1",
                "fieldPath": f"metadata.annotations['{SCHEDULED_TIMESTAMP_ANNOTATION}']",
            }
        },
    },
)
TEMPLATE_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"cpu": "500m", "memory": "256Mi"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
}
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


class ConfigurationError(ValueError):
    """The manager's configuration cannot produce a CronJob (e.g. malformed IMAGE_PULL_SECRETS)."""


def cronjob_name(costjob_name: str) -> str:
    return f"{costjob_name}-cronjob"


def secret_name(costjob_name: str) -> str:
    return f"{costjob_name}-costjob-secret"


def owner_reference(costjob: Mapping[str, Any]) -> dict[str, Any]:
    """Controller owner reference: deleting the CostJob garbage-collects what it owns."""
    meta = costjob["metadata"]
    return {
        "apiVersion": resources.API_VERSION,
        "kind": KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def labels(costjob: Mapping[str, Any]) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/name": "finops-operator",
        "app.kubernetes.io/component": "costjob",
        COSTJOB_LABEL: str(costjob["metadata"]["name"]),
    }


def merge_env(
    template: list[dict[str, Any]] | tuple[dict[str, Any], ...], overrides: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Overlay by name: an override replaces the template entry whole, in its place;
    names only the template has survive; new names follow in override order."""
    by_name = {e["name"]: e for e in overrides}
    merged = [copy.deepcopy(by_name.pop(e["name"], e)) for e in template]
    merged.extend(copy.deepcopy(e) for e in overrides if e["name"] in by_name)
    return merged


def reconciler_env(costjob: Mapping[str, Any], settings: config.Settings) -> list[dict[str, Any]]:
    """The variables the reconciler names for one CostJob."""
    meta = costjob["metadata"]
    spec = costjob.get("spec") or {}
    env: list[dict[str, Any]] = [
        {"name": "COSTJOB_NAME", "value": str(meta["name"])},
        {"name": "COSTJOB_NAMESPACE", "value": str(meta["namespace"])},
        {
            "name": DSN_KEY,
            "valueFrom": {"secretKeyRef": {"name": secret_name(meta["name"]), "key": DSN_KEY}},
        },
        {"name": "OPENCOST_CONNECTION_STRING", "value": settings.opencost_url.rstrip("/")},
        {"name": "OPERATOR_IMAGE", "value": settings.operator_image},
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


def desired_cronjob(costjob: Mapping[str, Any], settings: config.Settings) -> dict[str, Any]:
    """The whole CronJob this CostJob should own."""
    meta = costjob["metadata"]
    spec = costjob.get("spec") or {}
    job_type = spec.get("type") or "ResourceCostCollection"
    mode = MODES.get(job_type)
    if mode is None:
        raise ConfigurationError(f"spec.type {job_type!r} is not a CostJob type")
    schedule = costjob_schedule.schedule_for(str(spec.get("interval") or "24h"))
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.operator_image,
        "args": [f"--mode={mode}"],
        "env": merge_env(TEMPLATE_ENV, reconciler_env(costjob, settings)),
        "resources": copy.deepcopy(spec.get("resources") or TEMPLATE_RESOURCES),
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
    }
    if settings.operator_image_pull_policy:
        container["imagePullPolicy"] = settings.operator_image_pull_policy
    pod_spec: dict[str, Any] = {
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


def desired_secret(costjob: Mapping[str, Any], settings: config.Settings) -> dict[str, Any]:
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
        "data": {DSN_KEY: base64.b64encode(settings.postgres_dsn.encode()).decode()},
    }


def scheduled_condition(
    allowed: bool, namespace: str, settings: config.Settings
) -> conditions.Condition:
    """Why the CostJob is, or is not, scheduled."""
    if allowed:
        return conditions.Condition(
            SCHEDULED,
            "True",
            reasons.CostJobReason.CRON_JOB_READY,
            "The CronJob and its DSN Secret are in place",
        )
    allowed_list = ", ".join(sorted(settings.costjob_allowed_namespaces)) or "none"
    return conditions.Condition(
        SCHEDULED,
        "False",
        reasons.CostJobReason.NAMESPACE_NOT_ALLOWED,
        f"Namespace {namespace!r} may not hold the database Secret (COSTJOB_ALLOWED_NAMESPACES: "
        f"{allowed_list}); no CronJob is scheduled. Create the CostJob in an allowed namespace.",
    )


def already_refused(costjob: Mapping[str, Any]) -> bool:
    """The status already records this generation's refusal, so its Event was recorded (by
    this replica or one that led before it, e.g. before an API server outage)."""
    status = costjob.get("status") or {}
    cond = conditions.find(status.get("conditions"), SCHEDULED) or {}
    return (
        cond.get("status") == "False"
        and cond.get("reason") == "NamespaceNotAllowed"
        and cond.get("observedGeneration") == (costjob.get("metadata") or {}).get("generation")
    )


def owned_by(obj: Mapping[str, Any], costjob: Mapping[str, Any]) -> bool:
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


@dataclasses.dataclass
class Reconciler:
    """Reconciles one CostJob per key (namespace, name)."""

    client: lightkube.AsyncClient
    settings: config.Settings
    controller: str = CONTROLLER
    _refused: set[str] = dataclasses.field(default_factory=set)
    """UIDs refused by this process: the Warning Event is recorded once, not every resync
    (nor again by a replica that takes over: see `already_refused`)."""

    async def reconcile(self, key: tuple[str, str, str]) -> float | None:
        _, namespace, name = key
        costjob = await kube_client.get_or_none(self.client, resources.CostJob, name, namespace)
        if costjob is None or costjob["metadata"].get("deletionTimestamp"):
            return None
        allowed = self.settings.costjob_namespace_allowed(namespace)
        if not allowed:
            await self._refuse(costjob)
        else:
            self._refused.discard(str(costjob["metadata"]["uid"]))
            await self._ensure_secret(costjob)
            await self._ensure_cronjob(costjob)
        await self._write_condition(costjob, scheduled_condition(allowed, namespace, self.settings))
        return None

    async def _refuse(self, costjob: dict[str, Any]) -> None:
        ns, name = costjob["metadata"]["namespace"], costjob["metadata"]["name"]
        removed = False
        for res, obj_name in (
            (kube_client.CronJob, cronjob_name(name)),
            (kube_client.Secret, secret_name(name)),
        ):
            existing = await kube_client.get_or_none(self.client, res, obj_name, ns)
            if existing is not None and owned_by(existing, costjob):
                removed |= await kube_client.delete(self.client, res, obj_name, ns)
        uid = str(costjob["metadata"]["uid"])
        if removed or (uid not in self._refused and not already_refused(costjob)):
            self._refused.add(uid)
            cond = scheduled_condition(False, ns, self.settings)
            await events.record(self.client, costjob, events.WARNING, cond.reason, cond.message)
            log.warning("costjob refused", extra={"costjob": f"{ns}/{name}", "reason": cond.reason})

    async def _ensure_secret(self, costjob: dict[str, Any]) -> None:
        desired = desired_secret(costjob, self.settings)
        meta = desired["metadata"]
        existing = await kube_client.get_or_none(
            self.client, kube_client.Secret, meta["name"], meta["namespace"]
        )
        if existing is None:
            await kube_client.create(self.client, kube_client.Secret, desired)
            return
        e_meta = existing.get("metadata") or {}
        if (
            existing.get("data") == desired["data"]
            and e_meta.get("labels") == meta["labels"]
            and e_meta.get("ownerReferences") == meta["ownerReferences"]
        ):
            return
        body = copy.deepcopy(desired)
        body["metadata"]["resourceVersion"] = e_meta["resourceVersion"]
        await kube_client.replace(self.client, kube_client.Secret, body)

    async def _ensure_cronjob(self, costjob: dict[str, Any]) -> None:
        desired = desired_cronjob(costjob, self.settings)
        meta = desired["metadata"]
        existing = await kube_client.get_or_none(
            self.client, kube_client.CronJob, meta["name"], meta["namespace"]
        )
        if existing is None:
            await kube_client.create(self.client, kube_client.CronJob, desired)
            await events.record(
                self.client,
                costjob,
                events.NORMAL,
                reasons.EventReason.CRON_JOB_CREATED,
                f"Created CronJob {meta['name']} with schedule {desired['spec']['schedule']!r}",
            )
            return
        body = copy.deepcopy(desired)
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        # Server defaults are not a difference: compare against what a PUT would store.
        candidate = await kube_client.replace(self.client, kube_client.CronJob, body, dry_run=True)
        if not cronjob_differs(existing, candidate):
            return
        await kube_client.replace(self.client, kube_client.CronJob, body)
        await events.record(
            self.client,
            costjob,
            events.NORMAL,
            reasons.EventReason.CRON_JOB_UPDATED,
            f"Updated CronJob {meta['name']} (schedule {desired['spec']['schedule']!r})",
        )

    async def _write_condition(self, costjob: dict[str, Any], cond: conditions.Condition) -> None:
        meta = costjob["metadata"]
        await status.apply(
            self.client,
            resources.CostJob,
            meta["name"],
            [status.set_condition(cond, dt.datetime.now(dt.UTC))],
            namespace=meta["namespace"],
            observed=costjob,
        )

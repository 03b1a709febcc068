"""CostJob reconciler: one owned CronJob and one owned DSN Secret per CostJob.

Checklist per CostJob:
1. observe the CostJob (a fresh GET; gone means nothing to do — owner GC cleans up);
2. decide (pure, `finops.provisioning.costjobs`): may this namespace hold the DSN Secret? the
   desired Secret and CronJob;
3. write: refused -> remove what we own there, report why (condition + Warning Event);
   allowed -> Secret create-or-patch, CronJob create or replace when it differs from the
   desired object (compared after a dry-run so server defaults are not a difference, and
   hand edits are reverted), Events on create/update.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import logging

import lightkube
from lightkube.resources import batch_v1, core_v1

from finops.api import bodies, conditions, reasons
from finops.controller import config
from finops.kube import client as kube_client
from finops.kube import events, resources, status
from finops.provisioning import costjobs

log = logging.getLogger(__name__)

CONTROLLER = "costjob-controller"

# Timeout fields copied onto the pod when set (databaseViewsRefreshTimeout does nothing).


# The embedded pod template: what a generated pod gets when the reconciler names nothing.


@dataclasses.dataclass
class CostJobReconciler:
    """Reconciles one CostJob per key (namespace, name)."""

    client: lightkube.AsyncClient
    settings: config.ControllerSettings
    controller: str = CONTROLLER
    _refused: set[str] = dataclasses.field(default_factory=set)
    """UIDs refused by this process: the Warning Event is recorded once, not every resync
    (nor again by a replica that takes over: see `already_refused`)."""

    async def reconcile(self, key: tuple[str, str, str]) -> float | None:
        _, namespace, name = key
        found = await kube_client.get_or_none(self.client, resources.CostJob, name, namespace)
        if found is None:
            return None
        costjob = bodies.as_costjob(found)
        if (costjob.get("metadata") or {}).get("deletionTimestamp"):
            return None
        allowed = self.settings.costjob_namespace_allowed(namespace)
        if not allowed:
            await self._refuse(costjob)
        else:
            self._refused.discard(str(costjob["metadata"]["uid"]))
            await self._ensure_secret(costjob)
            await self._ensure_cronjob(costjob)
        cond = costjobs.scheduled_condition(allowed, namespace, self.settings)
        await self._write_condition(costjob, cond)
        return None

    async def _refuse(self, costjob: bodies.CostJobBody) -> None:
        ns, name = costjob["metadata"]["namespace"], costjob["metadata"]["name"]
        removed = False
        for res, obj_name in (
            (batch_v1.CronJob, costjobs.cronjob_name(name)),
            (core_v1.Secret, costjobs.secret_name(name)),
        ):
            existing = await kube_client.get_or_none(self.client, res, obj_name, ns)
            if existing is not None and costjobs.owned_by(existing, costjob):
                removed |= await kube_client.delete(self.client, res, obj_name, ns)
        uid = str(costjob["metadata"]["uid"])
        if removed or (uid not in self._refused and not costjobs.already_refused(costjob)):
            self._refused.add(uid)
            cond = costjobs.scheduled_condition(False, ns, self.settings)
            await events.record(self.client, costjob, events.WARNING, cond.reason, cond.message)
            log.warning("costjob refused", extra={"costjob": f"{ns}/{name}", "reason": cond.reason})

    async def _ensure_secret(self, costjob: bodies.CostJobBody) -> None:
        desired = costjobs.desired_secret(costjob, self.settings)
        meta = desired["metadata"]
        existing = await kube_client.get_or_none(
            self.client, core_v1.Secret, meta["name"], meta["namespace"]
        )
        if existing is None:
            await kube_client.create(self.client, core_v1.Secret, desired)
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
        await kube_client.replace(self.client, core_v1.Secret, body)

    async def _ensure_cronjob(self, costjob: bodies.CostJobBody) -> None:
        desired = costjobs.desired_cronjob(costjob, self.settings)
        meta = desired["metadata"]
        schedule = desired.get("spec", {}).get("schedule")
        existing = await kube_client.get_or_none(
            self.client, batch_v1.CronJob, meta["name"], meta["namespace"]
        )
        if existing is None:
            await kube_client.create(self.client, batch_v1.CronJob, desired)
            await events.record(
                self.client,
                costjob,
                events.NORMAL,
                reasons.EventReason.CRON_JOB_CREATED,
                f"Created CronJob {meta['name']} with schedule {schedule!r}",
            )
            return
        body = copy.deepcopy(desired)
        body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
        # Server defaults are not a difference: compare against what a PUT would store.
        candidate = await kube_client.replace(self.client, batch_v1.CronJob, body, dry_run=True)
        if not costjobs.cronjob_differs(existing, candidate):
            return
        await kube_client.replace(self.client, batch_v1.CronJob, body)
        await events.record(
            self.client,
            costjob,
            events.NORMAL,
            reasons.EventReason.CRON_JOB_UPDATED,
            f"Updated CronJob {meta['name']} (schedule {schedule!r})",
        )

    async def _write_condition(
        self, costjob: bodies.CostJobBody, cond: conditions.DecidedCondition
    ) -> None:
        meta = costjob["metadata"]
        await status.apply(
            self.client,
            resources.CostJob,
            meta["name"],
            [status.set_condition(cond, dt.datetime.now(dt.UTC))],
            namespace=meta["namespace"],
            observed=costjob,
        )

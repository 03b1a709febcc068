"""FinOpsProvider reconciler: configure MTO's OpenCost from the singleton provider.

Checklist:
1. observe the provider (and, in MTO mode, the OpenCost custom resources);
2. decide (pure, `finops.provisioning.providers`): which branch applies and the patch for
   OpenCost;
3. write: in MTO mode patch the OpenCost CR only when the diff is not empty and restart
   OpenCost after a real change; in bring-your-own mode touch nothing (the PriceBook path
   owns OpenCost there). Status every pass (DESIGN §2.1): observedGeneration and a Ready
   condition whose reason says what happened; `lastSyncTime` moves only when the pass
   succeeded (Ready=True), so it always says when the provider was last in effect.
The secret's value is the name of a Secret and is still never logged.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import lightkube

from finops.api import bodies, conditions, reasons
from finops.controller import config, opencost_restart
from finops.kube import client as kube_client
from finops.kube import events, resources, status
from finops.provisioning import providers

log = logging.getLogger(__name__)

CONTROLLER = "finopsprovider-controller"


@dataclasses.dataclass
class ProviderReconciler:
    """Reconciles the FinOpsProvider named by the key."""

    client: lightkube.AsyncClient
    settings: config.ControllerSettings
    controller: str = CONTROLLER

    async def reconcile(self, key: tuple[str, str, str]) -> float | None:
        name = key[2]
        found = await kube_client.get_or_none(self.client, resources.FinOpsProvider, name)
        if found is None:
            return None
        provider = bodies.as_finops_provider(found)
        branch = providers.decide(provider.get("spec"))
        cond = providers.without_opencost(branch, mto_enabled=self.settings.mto_enabled)
        if branch is None:
            log.warning("No valid provider option configured", extra={"provider": name})
        if cond is None:
            assert branch is not None  # without_opencost decides every pass without a branch
            try:
                cond = await self._apply(provider, branch)
            except lightkube.ApiError as exc:
                await self._write_status(provider, providers.patch_failed(exc))
                raise
        await self._write_status(provider, cond)
        return None

    async def _apply(
        self, provider: bodies.FinOpsProviderBody, branch: providers.Branch
    ) -> conditions.DecidedCondition:
        ns = self.settings.opencost_namespace
        found = [
            kube_client.to_dict(o) async for o in self.client.list(resources.OpenCost, namespace=ns)
        ]
        if not found:
            return providers.no_opencost(ns)
        changed: list[str] = []
        for opencost in found:
            current = opencost.get("spec") or {}
            desired = providers.desired_opencost_spec(current, branch)
            if desired == current:
                continue
            meta = opencost["metadata"]
            await kube_client.merge_patch(
                self.client,
                resources.OpenCost,
                meta["name"],
                {"metadata": {"resourceVersion": meta["resourceVersion"]}, "spec": desired},
                namespace=ns,
            )
            changed.append(meta["name"])
            log.info(
                "patched OpenCost resource",
                extra={"opencost": f"{ns}/{meta['name']}", "branch": branch.name},
            )
        if not changed:
            return providers.applied(branch, [])
        if await opencost_restart.restart(self.client, self.settings, "finopsprovider"):
            await events.record(
                self.client,
                provider,
                events.NORMAL,
                reasons.EventReason.OPENCOST_RESTARTED,
                f"Applied the {branch.name} provider to OpenCost {', '.join(changed)}; "
                "restarted OpenCost",
            )
        return providers.applied(branch, changed)

    async def _write_status(
        self, provider: bodies.FinOpsProviderBody, cond: conditions.DecidedCondition
    ) -> None:
        now = dt.datetime.now(dt.UTC)
        await status.apply(
            self.client,
            resources.FinOpsProvider,
            provider["metadata"]["name"],
            [status.set_condition(cond, now), synced(now, succeeded=cond.status == "True")],
            observed=provider,
        )


def synced(now: dt.datetime, *, succeeded: bool) -> status.Change:
    """`observedGeneration` is the generation just handled; `lastSyncTime` moves to now only
    when the pass succeeded (a failed pass leaves the last successful sync's time)."""

    def change(provider: Mapping[str, Any]) -> Mapping[str, Any]:
        out = status.status_of(provider)
        if succeeded:
            out["lastSyncTime"] = conditions.rfc3339(now)
        generation = (provider.get("metadata") or {}).get("generation")
        if generation is not None:
            out["observedGeneration"] = generation
        return out

    return change

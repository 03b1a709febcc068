"""FinOpsProvider reconciler: configure MTO's OpenCost from the singleton provider.

Checklist:
1. observe the provider (and, in MTO mode, the OpenCost custom resources);
2. decide (pure, `decide`): which branch applies — a cloud block counts only with a
   non-empty `cloudIntegrationSecret`; `onpremoptions` always enables custom pricing; on a
   cloud block only `pricingModelSource: Pricebook` does — and the patch for OpenCost;
3. write: in MTO mode patch the OpenCost CR only when the diff is not empty and restart
   OpenCost after a real change; in bring-your-own mode touch nothing (the PriceBook path
   owns OpenCost there). Status every pass (DESIGN §2.1): observedGeneration and a Ready
   condition whose reason says what happened; `lastSyncTime` moves only when the pass
   succeeded (Ready=True), so it always says when the provider was last in effect.
The secret's value is the name of a Secret and is still never logged.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import lightkube

from finops.api import conditions, reasons
from finops.controller import config, opencost_restart
from finops.kube import client as kube_client
from finops.kube import events, resources, status

log = logging.getLogger(__name__)

CONTROLLER = "finopsprovider-controller"
READY = reasons.ConditionType.READY
CLOUD_BLOCKS = (("awsoptions", "aws"), ("gcpoptions", "gcp"), ("azureoptions", "azure"))

APPLIED = reasons.ProviderReason.PROVIDER_APPLIED
BYO = reasons.ProviderReason.BRING_YOUR_OWN_OPENCOST
NO_VALID_OPTION = reasons.ProviderReason.NO_VALID_PROVIDER_OPTION
PATCH_FAILED = reasons.ProviderReason.OPENCOST_PATCH_FAILED


@dataclasses.dataclass(frozen=True, slots=True)
class Branch:
    """The provider branch that applies, and what it sets on OpenCost."""

    name: str
    cloud_integration_secret: str | None
    custom_pricing: bool


def decide(spec: Mapping[str, Any] | None) -> Branch | None:
    """The branch that applies, or None when no option is valid."""
    spec = spec or {}
    for block, name in CLOUD_BLOCKS:
        options = spec.get(block)
        if isinstance(options, Mapping) and options.get("cloudIntegrationSecret"):
            return Branch(
                name,
                str(options["cloudIntegrationSecret"]),
                options.get("pricingModelSource") == "Pricebook",
            )
    if isinstance(spec.get("onpremoptions"), Mapping):
        return Branch("onprem", None, True)
    return None


def desired_opencost_spec(current: Mapping[str, Any] | None, branch: Branch) -> dict[str, Any]:
    """`current` with the branch's settings applied under `spec.opencost`."""
    spec = copy.deepcopy(dict(current or {}))
    opencost = spec.setdefault("opencost", {})
    if branch.cloud_integration_secret is not None:
        opencost["cloudIntegrationSecret"] = branch.cloud_integration_secret
        opencost.setdefault("cloudCost", {})["enabled"] = True
    if branch.custom_pricing:
        opencost.setdefault("customPricing", {})["enabled"] = True
    return spec


def ready_condition(reason: str, message: str) -> conditions.Condition:
    status = "True" if reason in (APPLIED, BYO) else "False"
    return conditions.Condition(READY, status, reason, message)


@dataclasses.dataclass
class Reconciler:
    """Reconciles the FinOpsProvider named by the key."""

    client: lightkube.AsyncClient
    settings: config.Settings
    controller: str = CONTROLLER

    async def reconcile(self, key: tuple[str, str, str]) -> float | None:
        name = key[2]
        provider = await kube_client.get_or_none(self.client, resources.FinOpsProvider, name)
        if provider is None:
            return None
        branch = decide(provider.get("spec"))
        if branch is None:
            log.warning("No valid provider option configured", extra={"provider": name})
            cond = ready_condition(
                NO_VALID_OPTION,
                "No valid provider option configured: a cloud block needs a non-empty "
                "cloudIntegrationSecret; OpenCost was not changed",
            )
        elif not self.settings.mto_enabled:
            cond = ready_condition(
                BYO,
                f'Valid {branch.name} provider; MTO_ENABLED is not "true", so OpenCost is '
                "bring-your-own and is configured only through the PriceBook pricing ConfigMap",
            )
        else:
            try:
                cond = await self._apply(provider, branch)
            except lightkube.ApiError as exc:
                await self._write_status(
                    provider,
                    ready_condition(PATCH_FAILED, f"Patching the OpenCost resource failed: {exc}"),
                )
                raise
        await self._write_status(provider, cond)
        return None

    async def _apply(self, provider: dict[str, Any], branch: Branch) -> conditions.Condition:
        ns = self.settings.opencost_namespace
        found = [
            kube_client.to_dict(o) async for o in self.client.list(resources.OpenCost, namespace=ns)
        ]
        if not found:
            return ready_condition(
                PATCH_FAILED, f"No OpenCost resource found in namespace {ns!r} to configure"
            )
        changed: list[str] = []
        for opencost in found:
            current = opencost.get("spec") or {}
            desired = desired_opencost_spec(current, branch)
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
            return ready_condition(
                APPLIED, f"{branch.name} provider already applied to the OpenCost resource"
            )
        if await opencost_restart.restart(self.client, self.settings, "finopsprovider"):
            await events.record(
                self.client,
                provider,
                events.NORMAL,
                reasons.EventReason.OPENCOST_RESTARTED,
                f"Applied the {branch.name} provider to OpenCost {', '.join(changed)}; "
                "restarted OpenCost",
            )
        return ready_condition(
            APPLIED, f"{branch.name} provider applied to OpenCost {', '.join(changed)}"
        )

    async def _write_status(self, provider: dict[str, Any], cond: conditions.Condition) -> None:
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

"""FinOpsProvider decisions: which provider branch applies and what it sets on OpenCost.

A cloud block counts only with a non-empty `cloudIntegrationSecret`; `onpremoptions` always
enables custom pricing; on a cloud block only `pricingModelSource: Pricebook` does. In
bring-your-own mode (MTO off) nothing is patched: the PriceBook path owns OpenCost there. The
Ready condition's reason says what happened. The secret's value is the name of a Secret and is
never put into a message.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from finops.api import bodies, conditions, reasons


@dataclasses.dataclass(frozen=True, slots=True)
class Branch:
    """The provider branch that applies, and what it sets on OpenCost."""

    name: str
    cloud_integration_secret: str | None
    custom_pricing: bool


def decide(spec: bodies.FinOpsProviderSpecBody | None) -> Branch | None:
    """The branch that applies, or None when no option is valid (the first cloud block with
    a secret wins: aws, gcp, azure)."""
    if spec is None:
        return None
    clouds: tuple[tuple[str, bodies.CloudOptionsBody | None], ...] = (
        ("aws", spec.get("awsoptions")),
        ("gcp", spec.get("gcpoptions")),
        ("azure", spec.get("azureoptions")),
    )
    for name, options in clouds:
        if isinstance(options, Mapping) and options.get("cloudIntegrationSecret"):
            return Branch(
                name,
                str(options.get("cloudIntegrationSecret")),
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


def ready_condition(reason: str, message: str) -> conditions.DecidedCondition:
    status = (
        "True"
        if reason
        in (reasons.ProviderReason.PROVIDER_APPLIED, reasons.ProviderReason.BRING_YOUR_OWN_OPENCOST)
        else "False"
    )
    return conditions.DecidedCondition(reasons.ConditionType.READY, status, reason, message)


def without_opencost(
    branch: Branch | None, *, mto_enabled: bool
) -> conditions.DecidedCondition | None:
    """The Ready condition of a pass that touches no OpenCost resource: no valid option, or
    bring-your-own mode; None when the branch is to be applied to MTO's OpenCost."""
    if branch is None:
        return ready_condition(
            reasons.ProviderReason.NO_VALID_PROVIDER_OPTION,
            "No valid provider option configured: a cloud block needs a non-empty "
            "cloudIntegrationSecret; OpenCost was not changed",
        )
    if not mto_enabled:
        return ready_condition(
            reasons.ProviderReason.BRING_YOUR_OWN_OPENCOST,
            f'Valid {branch.name} provider; MTO_ENABLED is not "true", so OpenCost is '
            "bring-your-own and is configured only through the PriceBook pricing ConfigMap",
        )
    return None


def no_opencost(namespace: str) -> conditions.DecidedCondition:
    return ready_condition(
        reasons.ProviderReason.OPENCOST_PATCH_FAILED,
        f"No OpenCost resource found in namespace {namespace!r} to configure",
    )


def patch_failed(error: Exception) -> conditions.DecidedCondition:
    return ready_condition(
        reasons.ProviderReason.OPENCOST_PATCH_FAILED,
        f"Patching the OpenCost resource failed: {error}",
    )


def applied(branch: Branch, changed: Sequence[str]) -> conditions.DecidedCondition:
    """Ready after the branch was applied to the named OpenCost resources (none changed)."""
    if not changed:
        return ready_condition(
            reasons.ProviderReason.PROVIDER_APPLIED,
            f"{branch.name} provider already applied to the OpenCost resource",
        )
    return ready_condition(
        reasons.ProviderReason.PROVIDER_APPLIED,
        f"{branch.name} provider applied to OpenCost {', '.join(changed)}",
    )

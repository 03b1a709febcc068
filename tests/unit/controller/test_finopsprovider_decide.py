"""Which provider branch applies and what it sets on MTO's OpenCost."""

from __future__ import annotations

from finops.provisioning import providers


def test_cloud_block_without_secret_matches_no_branch() -> None:
    assert providers.decide({"awsoptions": {"pricingModelSource": "Pricebook"}}) is None
    assert providers.decide({"gcpoptions": {"cloudIntegrationSecret": ""}}) is None


def test_onprem_always_enables_custom_pricing() -> None:
    branch = providers.decide({"onpremoptions": {}})
    assert branch == providers.Branch("onprem", None, True)


def test_only_pricebook_source_enables_custom_pricing_on_a_cloud_block() -> None:
    on = providers.decide(
        {"azureoptions": {"cloudIntegrationSecret": "s", "pricingModelSource": "Pricebook"}}
    )
    off = providers.decide(
        {"azureoptions": {"cloudIntegrationSecret": "s", "pricingModelSource": "pricebook"}}
    )
    assert on is not None and on.custom_pricing
    assert off is not None and not off.custom_pricing


def test_desired_spec_sets_secret_and_cloud_cost_and_keeps_the_rest() -> None:
    branch = providers.Branch("aws", "aws-secret", False)
    current = {"opencost": {"customPricing": {"enabled": False}, "other": 1}, "x": 2}
    desired = providers.desired_opencost_spec(current, branch)
    assert desired == {
        "opencost": {
            "customPricing": {"enabled": False},
            "other": 1,
            "cloudIntegrationSecret": "aws-secret",
            "cloudCost": {"enabled": True},
        },
        "x": 2,
    }
    assert providers.desired_opencost_spec(desired, branch) == desired

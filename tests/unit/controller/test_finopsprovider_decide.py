"""Which provider branch applies and what it sets on MTO's OpenCost."""

from __future__ import annotations

from finops.controller import finopsprovider


def test_cloud_block_without_secret_matches_no_branch() -> None:
    assert finopsprovider.decide({"awsoptions": {"pricingModelSource": "Pricebook"}}) is None
    assert finopsprovider.decide({"gcpoptions": {"cloudIntegrationSecret": ""}}) is None


def test_onprem_always_enables_custom_pricing() -> None:
    branch = finopsprovider.decide({"onpremoptions": {}})
    assert branch == finopsprovider.Branch("onprem", None, True)


def test_only_pricebook_source_enables_custom_pricing_on_a_cloud_block() -> None:
    on = finopsprovider.decide(
        {"azureoptions": {"cloudIntegrationSecret": "s", "pricingModelSource": "Pricebook"}}
    )
    off = finopsprovider.decide(
        {"azureoptions": {"cloudIntegrationSecret": "s", "pricingModelSource": "pricebook"}}
    )
    assert on is not None and on.custom_pricing
    assert off is not None and not off.custom_pricing


def test_desired_spec_sets_secret_and_cloud_cost_and_keeps_the_rest() -> None:
    branch = finopsprovider.Branch("aws", "aws-secret", False)
    current = {"opencost": {"customPricing": {"enabled": False}, "other": 1}, "x": 2}
    desired = finopsprovider.desired_opencost_spec(current, branch)
    assert desired == {
        "opencost": {
            "customPricing": {"enabled": False},
            "other": 1,
            "cloudIntegrationSecret": "aws-secret",
            "cloudCost": {"enabled": True},
        },
        "x": 2,
    }
    assert finopsprovider.desired_opencost_spec(desired, branch) == desired

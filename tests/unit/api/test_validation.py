"""The offline validator reproduces the API server's verdict on the contract corpus."""

from __future__ import annotations

import copy

import pytest
from tests.contract_corpus import corpus

from finops.api import models, validation

VALID = corpus.cases("valid")
INVALID = corpus.cases("invalid")


def _problems(case: corpus.Case) -> list[str]:
    if case.is_update:
        return validation.validate_update(case.created, case.final)
    return validation.validate_object(case.final)


def test_the_corpus_is_big_enough() -> None:
    assert len(VALID) >= 10
    assert len(INVALID) >= 40
    assert all(case.expected for case in INVALID)
    assert not any(case.expected for case in VALID)


@pytest.mark.parametrize("case", VALID, ids=lambda c: c.name)
def test_valid_manifests_have_no_problems(case: corpus.Case) -> None:
    if case.is_update:
        assert validation.validate_object(case.created) == []
    assert _problems(case) == []


@pytest.mark.parametrize("case", VALID, ids=lambda c: c.name)
def test_valid_manifests_parse_into_the_models(case: corpus.Case) -> None:
    parsed = models.BY_KIND[str(case.final.get("kind"))].model_validate(case.final)
    assert parsed.kind == case.final["kind"]
    assert parsed.model_dump(by_alias=True, exclude_none=True)["metadata"]["name"]


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.name)
def test_invalid_manifests_report_exactly_the_expected_problems(case: corpus.Case) -> None:
    if case.is_update:
        assert validation.validate_object(case.created) == [], "the original must be valid"
    assert sorted(_problems(case)) == sorted(case.expected)


# The rejection messages as the docs print them (reference/webhooks.md, concepts/*).
DOCUMENTED = {
    "finopsprovider-not-default.yaml": "FinOpsProvider must be named 'default' (singleton).",
    "finopsprovider-empty-spec.yaml": "At least one provider option (awsoptions, gcpoptions, "
    "azureoptions, onpremoptions) must be set",
    "finopsprovider-two-options.yaml": "Exactly one provider option (awsoptions, gcpoptions, "
    "azureoptions, onpremoptions) must be set",
    "offering-update-price.yaml": "offering spec is immutable",
    "offering-margins-both.yaml": "absoluteMicros and factorMilli are mutually exclusive — "
    "set only one",
    "offering-absolute-negative.yaml": "absoluteMicros must be >= 0",
    "offering-factor-negative.yaml": "factorMilli must be >= 0",
    "offering-period-integer-activated-at.yaml": "period must be a Go duration (e.g. '1h') for "
    "ActivatedAt alignment, or a plain integer for boundary alignments",
    "subscription-update-offering-ref-name.yaml": "offeringRef is immutable; create a new "
    "Subscription instead",
    "subscription-update-add-parent.yaml": "parent is immutable; create a new Subscription instead",
    "subscription-update-remove-parent.yaml": "parent is immutable; create a new Subscription "
    "instead",
    "subscription-usage-source-empty.yaml": "at least one of resourceType, name, or namespace "
    "must be set",
    "pricebook-currency-lowercase.yaml": "should match '^[A-Z]{3}$'",
    "pricebook-rate-negative.yaml": r"should match '^([0-9]+(\.[0-9]+)?)?$'",
}


@pytest.mark.parametrize(("file", "message"), sorted(DOCUMENTED.items()))
def test_each_documented_message_is_what_the_corpus_expects(file: str, message: str) -> None:
    case = corpus.load(corpus.ROOT / "invalid" / file)
    assert any(line.endswith(message) for line in case.expected), case.expected


class TestWhatTheApiServerDoesBeforeValidating:
    def test_status_is_ignored_because_the_status_subresource_owns_it(self) -> None:
        book = copy.deepcopy(corpus.load(corpus.ROOT / "valid" / "pricebook-quick-start.yaml"))
        obj = dict(book.final, status={"active": "not-a-boolean"})
        assert validation.validate_object(obj) == []

    def test_unknown_fields_are_pruned_and_defaults_applied(self) -> None:
        obj = {
            "apiVersion": models.API_VERSION,
            "kind": "CostJob",
            "metadata": {"name": "x"},
            "spec": {"typo": 1, "sharding": {}},
        }
        stored = validation.prepare(obj)
        assert "typo" not in stored["spec"]
        assert stored["spec"]["type"] == "ResourceCostCollection"
        assert stored["spec"]["interval"] == "24h"
        assert stored["spec"]["sharding"] == {"namespacesPerShard": 25, "concurrency": 4}

    def test_a_subscription_lifecycle_block_defaults_on_parent_deactivate(self) -> None:
        obj = corpus.load(corpus.ROOT / "valid" / "subscription-target-only.yaml").final
        assert validation.prepare(obj)["spec"]["lifecycle"]["onParentDeactivate"] == "Deactivate"


class TestObjectsThisApiDoesNotDefine:
    def test_a_foreign_kind_is_reported_not_crashed_on(self) -> None:
        problems = validation.validate_object({"apiVersion": models.API_VERSION, "kind": "Bill"})
        assert problems and problems[0].startswith('kind: Unsupported value: "Bill"')

    def test_other_groups_are_not_ours(self) -> None:
        assert not validation.is_ours({"apiVersion": "apps/v1", "kind": "Deployment"})
        assert validation.is_ours({"apiVersion": models.API_VERSION, "kind": "CostJob"})

    def test_a_missing_name_is_refused_like_the_api_server_does(self) -> None:
        obj = {"apiVersion": models.API_VERSION, "kind": "CostJob", "metadata": {}, "spec": {}}
        assert validation.validate_object(obj) == [
            "metadata.name: Required value: name or generateName is required"
        ]

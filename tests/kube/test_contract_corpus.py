"""The contract corpus against a real kube-apiserver, and `finops validate` against both.

Messages are compared whole: each refusal's `details.causes[]` becomes
`<field>: <message>` (the field path, then kube-apiserver's error body), which is
exactly the line the offline validator produces and the corpus `# expect:` lists.
Order is not compared, since the API server groups schema errors before CEL ones.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import pytest
from tests.contract_corpus import corpus
from tests.kube import _contract as api

from finops.api import validation
from finops_devenv import controlplane

CASES = corpus.cases()
# The `finops` console script installed next to this interpreter.
FINOPS = pathlib.Path(sys.executable).parent / "finops"


def _server_problems(client: Any, case: corpus.Case, namespace: str) -> dict[str, list[str]]:
    """Run the case through the API server, dry run and for real; problems by mode."""
    first = api.placed(case.created, namespace)
    results: dict[str, list[str]] = {}
    try:
        if case.is_update:
            created = api.create(client, first)
            assert created.status_code == 201, created.text
            stored = created.json()
            final = api.placed(case.final, namespace)
            for dry in (True, False):
                resp = api.replace(client, stored, final, dry_run=dry)
                key = "dry-run update" if dry else "update"
                results[key] = [] if resp.status_code == 200 else api.causes(resp)
                if resp.status_code not in (200, 422):
                    pytest.fail(f"{key}: {resp.status_code} {resp.text}")
        else:
            for dry in (True, False):
                resp = api.create(client, first, dry_run=dry)
                key = "dry-run create" if dry else "create"
                results[key] = [] if resp.status_code == 201 else api.causes(resp)
                if resp.status_code not in (201, 422):
                    pytest.fail(f"{key}: {resp.status_code} {resp.text}")
    finally:
        api.delete_if_cluster_scoped(client, first)
    return results


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_api_server_gives_the_corpus_verdict_and_so_does_the_offline_validator(
    kube: controlplane.ControlPlane, kube_namespace: str, case: corpus.Case
) -> None:
    with kube.http() as client:
        results = _server_problems(client, case, kube_namespace)
    if case.is_update:
        offline = validation.validate_update(case.created, case.final)
    else:
        offline = validation.validate_object(case.final)
    for mode, problems in results.items():
        assert sorted(problems) == sorted(case.expected), mode
        assert sorted(problems) == sorted(offline), mode


@pytest.mark.parametrize("case", corpus.cases("valid"), ids=lambda c: c.name)
def test_stored_objects_are_pruned_and_defaulted_as_the_offline_validator_predicts(
    kube: controlplane.ControlPlane, kube_namespace: str, case: corpus.Case
) -> None:
    obj = api.placed(case.created, kube_namespace)
    with kube.http() as client:
        try:
            resp = api.create(client, obj)
            assert resp.status_code == 201, resp.text
            stored = resp.json()
        finally:
            api.delete_if_cluster_scoped(client, obj)
    assert stored.get("spec") == validation.prepare(obj).get("spec")


def _stored(kube: controlplane.ControlPlane, namespace: str, file: str) -> dict[str, Any]:
    case = corpus.load(corpus.ROOT / "valid" / file)
    with kube.http() as client:
        resp = api.create(client, api.placed(case.created, namespace))
    assert resp.status_code == 201, resp.text
    body: dict[str, Any] = resp.json()
    return body


def test_costjob_type_interval_and_timeouts_default_as_documented(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    spec = _stored(kube, kube_namespace, "costjob-defaults.yaml")["spec"]
    assert spec == {
        "type": "ResourceCostCollection",
        "interval": "24h",
        "databaseInitTimeout": "2m",
        "kubernetesOperationTimeout": "1m",
        "openCostFetchTimeout": "2m",
        "databaseInsertTimeout": "3m",
        "statusUpdateTimeout": "1m",
        "httpClientTimeout": "90s",
    }


def test_sharding_defaults_fill_an_empty_sharding_block(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    obj = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "CostJob",
        "metadata": {"name": "sharded", "namespace": kube_namespace},
        "spec": {"sharding": {}},
    }
    with kube.http() as client:
        resp = api.create(client, obj)
    assert resp.status_code == 201, resp.text
    assert resp.json()["spec"]["sharding"] == {"namespacesPerShard": 25, "concurrency": 4}


def test_subscription_on_parent_deactivate_defaults_when_lifecycle_is_present(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    spec = _stored(kube, kube_namespace, "subscription-target-only.yaml")["spec"]
    assert spec["lifecycle"]["onParentDeactivate"] == "Deactivate"
    minimal = _stored(kube, kube_namespace, "subscription-minimal.yaml")["spec"]
    assert "lifecycle" not in minimal


def test_finops_validate_agrees_with_the_api_server_on_every_created_manifest(
    kube: controlplane.ControlPlane, kube_namespace: str
) -> None:
    """Whole corpus, CLI output vs API server refusals (updates need two objects: see above)."""
    creates = [c for c in CASES if not c.is_update]
    expected_lines: list[str] = []
    with kube.http() as client:
        for case in creates:
            obj = api.placed(case.final, kube_namespace)
            try:
                resp = api.create(client, obj, dry_run=True)
            finally:
                api.delete_if_cluster_scoped(client, obj)
            problems = [] if resp.status_code == 201 else api.causes(resp)
            label = f"{case.final['kind']}/{case.final['metadata']['name']}"
            expected_lines.extend(f"{case.path}: {label}: {p}" for p in problems)
    run = subprocess.run(
        [str(FINOPS), "validate", *(str(c.path) for c in creates)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert sorted(run.stdout.splitlines()) == sorted(expected_lines)
    assert run.returncode == (1 if expected_lines else 0)

"""The committed CRDs are exactly what the model generates, and carry what the issue asks."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import yaml

from finops.api import crds, models, rules

DEPLOY = pathlib.Path(__file__).resolve().parents[3] / "deploy" / "crds"


def _committed(kind: type[models._Object]) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / crds.file_name(kind)).read_text())
    return loaded


def test_committed_crds_match_the_model() -> None:
    stale = crds.stale_files(DEPLOY)
    assert stale == [], f"regenerate with: python -m finops.api.crds --write deploy/crds ({stale})"


def test_the_check_command_fails_on_a_stale_file(tmp_path: pathlib.Path) -> None:
    assert crds.main(["--write", str(tmp_path)]) == 0
    assert crds.main(["--check", str(tmp_path)]) == 0
    (tmp_path / crds.file_name(models.CostJob)).write_text("# edited by hand\n")
    assert crds.main(["--check", str(tmp_path)]) == 1


def test_deploy_holds_exactly_the_five_crds() -> None:
    assert sorted(p.name for p in DEPLOY.glob("*.yaml")) == sorted(crds.rendered())


@pytest.mark.parametrize("kind", models.KINDS, ids=lambda k: k.kind_name)
def test_every_kind_has_a_status_subresource_and_an_age_column(kind: type[models._Object]) -> None:
    (version,) = _committed(kind)["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    assert version["additionalPrinterColumns"][-1]["name"] == "Age"


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (models.PriceBook, ["Active", "Ready", "Currency"]),
        (models.Offering, ["Ready"]),
        (models.Subscription, ["Ready", "Offering", "Activated"]),
        (models.CostJob, ["Type", "Interval", "Last Status"]),
        (models.FinOpsProvider, ["Ready"]),
        (models.Budget, ["Period", "Amount", "Currency", "Spent", "Forecast", "State"]),
    ],
)
def test_printer_columns_are_those_the_issue_lists(
    kind: type[models._Object], columns: list[str]
) -> None:
    (version,) = _committed(kind)["spec"]["versions"]
    assert [c["name"] for c in version["additionalPrinterColumns"][:-1]] == columns


def test_operator_selected_status_fields_are_selectable() -> None:
    (sub,) = _committed(models.Subscription)["spec"]["versions"]
    assert {f["jsonPath"] for f in sub["selectableFields"]} == {
        ".status.ready",
        ".status.compatibilityRoot",
    }
    (off,) = _committed(models.Offering)["spec"]["versions"]
    assert off["selectableFields"] == [{"jsonPath": ".status.ready"}]


def test_finopsprovider_is_cluster_scoped_and_the_rest_namespaced() -> None:
    scopes = {k.kind_name: _committed(k)["spec"]["scope"] for k in models.KINDS}
    assert scopes.pop("FinOpsProvider") == "Cluster"
    assert set(scopes.values()) == {"Namespaced"}


# Short names of built-in kinds and of OLM, which shares "Subscription" with us.
TAKEN_SHORT_NAMES = {
    "cm", "cs", "csr", "cj", "crd", "crds", "deploy", "ds", "ep", "ev", "hpa", "ing", "limits",
    "netpol", "no", "ns", "pc", "pdb", "po", "psp", "pv", "pvc", "quota", "rc", "rs", "sa",
    "sc", "sts", "svc", "sub", "subs", "csv", "ip", "og", "catsrc",
}  # fmt: skip


def test_short_names_collide_with_nothing_common() -> None:
    for kind in models.KINDS:
        names = _committed(kind)["spec"]["names"].get("shortNames", [])
        assert not set(names) & TAKEN_SHORT_NAMES, kind.kind_name


def _node(schema: dict[str, Any], path: str) -> dict[str, Any]:
    for part in path.split(".") if path else []:
        name, _, rest = part.partition("[")
        schema = schema["properties"][name]
        if rest:
            schema = schema["items"]
    return schema


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: f"{r.kind}:{r.path}:{r.message[:30]}")
def test_every_rule_sits_in_its_crd_at_its_path(rule: rules.Rule) -> None:
    kind = models.BY_KIND[rule.kind]
    (version,) = _committed(kind)["spec"]["versions"]
    node = _node(version["schema"]["openAPIV3Schema"], rule.path)
    assert {"rule": rule.rule, "message": rule.message} in node["x-kubernetes-validations"]


@pytest.mark.parametrize(
    ("kind", "path", "default"),
    [
        (models.CostJob, "spec.type", "ResourceCostCollection"),
        (models.CostJob, "spec.interval", "24h"),
        (models.CostJob, "spec.databaseInitTimeout", "2m"),
        (models.CostJob, "spec.kubernetesOperationTimeout", "1m"),
        (models.CostJob, "spec.openCostFetchTimeout", "2m"),
        (models.CostJob, "spec.databaseInsertTimeout", "3m"),
        (models.CostJob, "spec.statusUpdateTimeout", "1m"),
        (models.CostJob, "spec.httpClientTimeout", "90s"),
        (models.CostJob, "spec.sharding.namespacesPerShard", 25),
        (models.CostJob, "spec.sharding.concurrency", 4),
        (models.Subscription, "spec.lifecycle.onParentDeactivate", "Deactivate"),
        (models.Offering, "spec.lifecycle.onParentDeactivate", "Deactivate"),
        (models.Budget, "spec.period", "Monthly"),
        (models.Budget, "spec.thresholds[*].basis", "Actual"),
    ],
)
def test_documented_defaults_are_in_the_schema(
    kind: type[models._Object], path: str, default: object
) -> None:
    (version,) = _committed(kind)["spec"]["versions"]
    assert _node(version["schema"]["openAPIV3Schema"], path)["default"] == default


def test_database_views_refresh_timeout_has_no_default() -> None:
    (version,) = _committed(models.CostJob)["spec"]["versions"]
    node = _node(version["schema"]["openAPIV3Schema"], "spec.databaseViewsRefreshTimeout")
    assert "default" not in node


def test_a_bounded_list_is_bounded_by_max_items() -> None:
    (version,) = _committed(models.Budget)["spec"]["versions"]
    node = _node(version["schema"]["openAPIV3Schema"], "spec.thresholds")
    assert node["maxItems"] == models.MAX_BUDGET_THRESHOLDS and "maxLength" not in node

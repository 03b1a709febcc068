"""`finops validate`: one line per problem, exit 1 on any, 0 when all is well."""

from __future__ import annotations

import pathlib

import pytest
from tests.contract_corpus import corpus

from finops import cli


def _run(capsys: pytest.CaptureFixture[str], *paths: pathlib.Path | str) -> tuple[int, list[str]]:
    status = cli.main(["validate", *map(str, paths)])
    return status, capsys.readouterr().out.splitlines()


def test_valid_corpus_directory_passes_silently(capsys: pytest.CaptureFixture[str]) -> None:
    single = [c.path for c in corpus.cases("valid") if not c.is_update]
    status, lines = _run(capsys, *single)
    assert (status, lines) == (0, [])


def test_an_invalid_file_prints_file_kind_name_and_the_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = corpus.load(corpus.ROOT / "invalid" / "pricebook-currency-lowercase.yaml")
    status, lines = _run(capsys, case.path)
    assert status == 1
    assert lines == [f"{case.path}: PriceBook/lower: {case.expected[0]}"]


def test_every_problem_gets_its_own_line(capsys: pytest.CaptureFixture[str]) -> None:
    case = corpus.load(corpus.ROOT / "invalid" / "finopsprovider-wrong-name-and-empty.yaml")
    status, lines = _run(capsys, case.path)
    assert status == 1
    assert lines == [f"{case.path}: FinOpsProvider/cluster: {m}" for m in case.expected]


def test_a_directory_is_searched_and_other_api_groups_are_skipped(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "mixed.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n---\n"
        "apiVersion: finops.stakater.com/v1alpha1\nkind: CostJob\n"
        "metadata: {name: hourly}\nspec: {interval: 7m}\n"
    )
    (tmp_path / "notes.txt").write_text("not a manifest")
    status, lines = _run(capsys, tmp_path)
    assert status == 1
    assert len(lines) == 1
    assert lines[0].startswith(f"{tmp_path / 'nested' / 'mixed.yaml'}: CostJob/hourly: ")
    assert "spec.interval: Invalid value" in lines[0]


def test_a_list_object_is_validated_item_by_item(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "list.yaml"
    path.write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: finops.stakater.com/v1alpha1\n  kind: CostJob\n"
        "  metadata: {name: ok}\n  spec: {interval: 1h}\n"
        "- apiVersion: finops.stakater.com/v1alpha1\n  kind: CostJob\n"
        "  metadata: {name: bad}\n  spec: {type: Daily}\n"
    )
    status, lines = _run(capsys, path)
    assert status == 1
    assert lines[0].startswith(f"{path}: CostJob/bad: spec.type: Unsupported value")


def test_unparseable_yaml_is_a_problem(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: [unclosed\n")
    status, lines = _run(capsys, path)
    assert status == 1
    assert lines[0].startswith(f"{path}: ")


def test_budgets_are_known_and_the_examples_pass(capsys: pytest.CaptureFixture[str]) -> None:
    examples = corpus.ROOT.parents[1] / "examples"
    assert _run(capsys, examples) == (0, [])
    case = corpus.load(corpus.ROOT / "invalid" / "budget-threshold-repeated.yaml")
    status, lines = _run(capsys, case.path)
    assert status == 1
    assert lines == [f"{case.path}: Budget/bad: {case.expected[0]}"]

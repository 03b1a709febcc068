"""The package's shape is enforced: no long functions, and import contracts that fail when a
forbidden import is added."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINT_IMPORTS = pathlib.Path(sys.executable).with_name("lint-imports")
MAX_FUNCTION_LINES = 60


def long_functions(root: pathlib.Path) -> list[str]:
    """`path:line name (N lines)` for every function longer than the limit, decorators
    included."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > MAX_FUNCTION_LINES:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_in_the_package_is_longer_than_sixty_lines() -> None:
    assert long_functions(ROOT / "src" / "finops") == []


def test_the_length_check_sees_a_long_function(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (package / "long.py").write_text(f"def too_long() -> None:\n{body}\n")
    assert long_functions(package) == ["pkg/long.py:1 too_long (61 lines)"]


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A copy of `src/finops` and the contracts, linted in place of the installed package."""
    root = tmp_path_factory.mktemp("layers")
    shutil.copytree(
        ROOT / "src" / "finops",
        root / "src" / "finops",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def lint(root: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def with_import(
    root: pathlib.Path, into: pathlib.Path, module: str, statement: str
) -> pathlib.Path:
    """A copy of `root` in `into` whose `module` (a path under src/finops) gains `statement`."""
    changed = into / "copy"
    shutil.copytree(root, changed)
    path = changed / "src" / "finops" / module
    path.write_text(path.read_text() + f"\n{statement}  # injected by the test\n")
    return changed


def test_the_package_as_it_is_keeps_every_contract(source_copy: pathlib.Path) -> None:
    done = lint(source_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        ("jobs/charges.py", "import psycopg", "Only the store talks to PostgreSQL"),
        ("gateway/app.py", "import psycopg_pool", "Only the store talks to PostgreSQL"),
        ("kube/client.py", "import psycopg", "Only the store talks to PostgreSQL"),
        ("opencost/client.py", "import psycopg", "Only the store talks to PostgreSQL"),
        ("cli/validate.py", "import psycopg", "Only the store talks to PostgreSQL"),
        ("kube/status.py", "from finops.store import pool", "The edges do not import each other"),
        ("billing/money.py", "from finops.hierarchy import refs", "Layers: processes > edges"),
        ("api/models.py", "from finops.billing import money", "Layers: processes > edges"),
        ("store/pool.py", "from finops.jobs import charges", "Layers: processes > edges"),
        ("jobs/charges.py", "from finops_devenv import tls", "does not import the development"),
        ("cli/export.py", "import finops_devenv", "does not import the development"),
        ("pricing/resolve.py", "import httpx", "The pure core does no I/O"),
    ],
)
def test_a_forbidden_import_breaks_the_build(
    source_copy: pathlib.Path, tmp_path: pathlib.Path, module: str, statement: str, contract: str
) -> None:
    done = lint(with_import(source_copy, tmp_path, module, statement))
    assert done.returncode != 0
    broken = done.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, done.stdout


ANY_BODY = re.compile(r"(dict|Mapping)\[str, Any\]")
ANY_BODY_LINES = 117
"""Lines of `src/` spelling `dict[str, Any]` or `Mapping[str, Any]` today: JSON that is truly
open (CEL activations, OpenCost's and Kubernetes' foreign objects, query parameters). A body of
our kinds is a `finops.api.bodies` TypedDict; a decision returns a dataclass. Lower this number
when a line goes; never raise it."""


def any_body_lines(root: pathlib.Path) -> list[str]:
    return [
        f"{path.relative_to(root.parent)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ANY_BODY.search(line)
    ]


def test_untyped_bodies_do_not_spread() -> None:
    found = any_body_lines(ROOT / "src")
    assert len(found) <= ANY_BODY_LINES, "\n".join(found)


def test_the_count_sees_both_spellings(tmp_path: pathlib.Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "a: dict[str, Any] = {}\nb: Mapping[str, Any] = {}\nc: Mapping[str, object] = {}\n"
    )
    assert any_body_lines(tmp_path / "pkg") == ["pkg/m.py:1", "pkg/m.py:2"]


def test_the_benchmarks_page_stays_a_page() -> None:
    """One table and, per benchmark, its method and baseline; the history lives in git."""
    page = (ROOT / "benchmarks" / "README.md").read_text().splitlines()
    assert len(page) <= 250
    assert "## Latest figures" in page

"""The product declares exactly what it imports: a dependency that arrives only through another
one breaks when that one changes, and a declared one nobody imports is weight in the image."""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Declared without an import, and why.
NOT_IMPORTED = {
    "tzdata": "the IANA zones `zoneinfo` reads on a system without its own tz database",
}


def normalized(requirement: str) -> str:
    """`psycopg[binary]>=3.2,<4` -> `psycopg` (PEP 503 names)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def imported_distributions(package: pathlib.Path) -> dict[str, set[str]]:
    """Distribution name -> the modules of `package` that import it (standard library and the
    package itself left out)."""
    top_levels: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top_levels.setdefault(name.split(".")[0], set()).add(
                    str(path.relative_to(package.parent))
                )
    own = {package.name, "__future__", *sys.stdlib_module_names}
    providers = importlib.metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for top, where in top_levels.items():
        if top in own:
            continue
        # A top-level name two distributions share (lightkube and lightkube-models) is the
        # one whose name it is.
        candidates = [normalized(d) for d in providers.get(top, [top])]
        name = normalized(top) if normalized(top) in candidates else candidates[0]
        found.setdefault(name, set()).update(where)
    return found


def test_every_import_of_the_product_is_a_declared_dependency() -> None:
    declared = {normalized(r) for r in PYPROJECT["project"]["dependencies"]}
    optional = {
        normalized(r)
        for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items()
        if extra != "dev"
        for r in requirements
    }
    imported = imported_distributions(ROOT / "src" / "finops")
    undeclared = {d: sorted(w) for d, w in imported.items() if d not in declared | optional}
    assert undeclared == {}


def test_every_declared_dependency_is_imported_or_says_why_not() -> None:
    declared = {normalized(r) for r in PYPROJECT["project"]["dependencies"]}
    imported = set(imported_distributions(ROOT / "src" / "finops"))
    assert declared - imported == set(NOT_IMPORTED)


def test_the_check_sees_an_undeclared_import(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("import os\nimport yaml\nfrom pkg import other\n")
    assert imported_distributions(package) == {"pyyaml": {"pkg/mod.py"}}


def test_the_development_tools_declare_what_they_import() -> None:
    tools = tomllib.loads((ROOT / "tools" / "devenv" / "pyproject.toml").read_text())
    declared = {normalized(r) for r in tools["project"]["dependencies"]}
    imported = imported_distributions(ROOT / "tools" / "devenv" / "finops_devenv")
    assert set(imported) == declared

"""`docs/architecture.md` matches the code: every package it names exists, and every package of
`src/finops` is named in its table of packages."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
SRC = ROOT / "src"


def packages(src: pathlib.Path) -> set[str]:
    """`finops.x` for every subpackage and top-level module of the product."""
    top = src / "finops"
    found = {f"finops.{p.name}" for p in top.iterdir() if (p / "__init__.py").is_file()}
    found |= {f"finops.{p.stem}" for p in top.glob("*.py") if not p.stem.startswith("__")}
    return found


def table_packages(page: str) -> set[str]:
    """The first column of the Packages table."""
    section = page.split("## Packages", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(finops\.[a-z_]+)` \|", section, re.M))


def _defines(module: pathlib.Path, name: str) -> bool:
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def missing_names(page: str, src: pathlib.Path) -> list[str]:
    """Every `finops.…` the page spells that is neither a module nor a name defined in one."""
    missing = []
    for dotted in sorted(set(re.findall(r"`(finops\.[A-Za-z_.]+)", page))):
        parts = dotted.rstrip(".").split(".")
        path = src
        for i, part in enumerate(parts):
            if (path / part).is_dir():
                path = path / part
                continue
            if (path / f"{part}.py").is_file():
                module = path / f"{part}.py"
                rest = parts[i + 1 :]
                if rest and not _defines(module, rest[0]):
                    missing.append(dotted)
                break
            if not (path / "__init__.py").is_file() or not _defines(path / "__init__.py", part):
                missing.append(dotted)
            break
    return missing


def test_every_package_of_the_product_is_in_the_table() -> None:
    assert packages(SRC) == table_packages(PAGE.read_text())


def test_every_package_and_module_the_page_names_exists() -> None:
    assert missing_names(PAGE.read_text(), SRC) == []


def test_the_checks_see_a_package_the_page_forgets_and_one_it_invents(
    tmp_path: pathlib.Path,
) -> None:
    top = tmp_path / "finops"
    (top / "kept").mkdir(parents=True)
    (top / "kept" / "__init__.py").write_text("")
    (top / "kept" / "mod.py").write_text("def there() -> None: ...\n")
    (top / "forgotten").mkdir()
    (top / "forgotten" / "__init__.py").write_text("")
    page = "## Packages\n\n| `finops.kept` | x |\n| `finops.invented` | y |\n"
    assert packages(tmp_path) == {"finops.kept", "finops.forgotten"}
    assert table_packages(page) == {"finops.kept", "finops.invented"}
    words = "`finops.kept.mod.there` `finops.kept.mod.gone` `finops.invented`"
    assert missing_names(words, tmp_path) == ["finops.invented", "finops.kept.mod.gone"]

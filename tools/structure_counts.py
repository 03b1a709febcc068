"""Count what makes the package hard to read, so a clean-up can say how far it got.

    .venv/bin/python tools/structure_counts.py [--list] [REPO]

Counts, for the product package under `src/finops` of REPO (default: this checkout):
- `lines`: lines of Python in the package (`*.py`, blank lines and comments included);
- `test_only`: top-level functions and classes that no product code reaches (reachability from
  module-level code, decorated handlers and the console scripts, following the names each
  definition's body uses) but that tests or benchmarks use; `dead`: those nothing uses;
- `any_lines`: lines containing `dict[str, Any]` or `Mapping[str, Any]`;
- `aliases`: module-level assignments whose value is only another name (`A = b.C`, `A = C`),
  which give one thing a second name;
- `shared_type_names`: class names defined in more than one module of the package.

Names are resolved through each module's imports (`from finops.x import y`, `import a.b as c`),
so `y.f` is the definition `f` of `finops.x.y`. Text only: nothing of the package is run.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys
import tomllib
from collections import defaultdict
from collections.abc import Iterator

ANY = re.compile(r"(dict|Mapping)\[str, Any\]")
Def = tuple[str, str]  # (module, name)


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(tree: ast.Module, module: str) -> dict[str, str]:
    """Local name -> dotted target (a module, or `module.name` for a from-import)."""
    found: dict[str, str] = {}
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found[alias.asname] = alias.name
                else:
                    found[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            for alias in node.names:
                found[alias.asname or alias.name] = f"{base}.{alias.name}"
    return found


def dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def bound_names(stmt: ast.stmt) -> set[str]:
    """Names a function binds locally (parameters, assignments), which shadow module names."""
    bound: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return bound
    return set()


def references(
    nodes: list[ast.stmt], module: str, local: dict[str, str], defs: set[Def]
) -> Iterator[Def]:
    """Every definition the statements name, resolved through the module's imports."""
    own = {name for mod, name in defs if mod == module}
    for stmt in nodes:
        bound = bound_names(stmt)
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id in bound:
                continue
            if not isinstance(node, ast.Name | ast.Attribute):
                continue
            text = dotted(node)
            if text is None:
                continue
            head, _, rest = text.partition(".")
            if head in own and isinstance(node, ast.Name):
                yield (module, head)
                continue
            target = local.get(head)
            if target is None:
                continue
            parts = (f"{target}.{rest}" if rest else target).split(".")
            for i in range(len(parts) - 1, 0, -1):
                if (".".join(parts[:i]), parts[i]) in defs:
                    yield (".".join(parts[:i]), parts[i])
                    break


def string_references(text: str, defs: set[Def]) -> Iterator[Def]:
    """`finops.x.y:name` and `finops.x.y.name` spelled in strings (entry points, `-m`)."""
    for match in re.finditer(r"finops(?:\.\w+)+(?::\w+)?", text):
        spelled = match.group(0).replace(":", ".")
        owner, _, name = spelled.rpartition(".")
        if (owner, name) in defs:
            yield (owner, name)
        if (spelled, "main") in defs:
            yield (spelled, "main")


def count(repo: pathlib.Path) -> dict[str, list[str]]:
    src = repo / "src"
    package = src / "finops"
    trees: dict[str, ast.Module] = {}
    lines = 0
    any_lines: list[str] = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        lines += len(text.splitlines())
        any_lines += [
            f"{path.relative_to(repo)}:{n}"
            for n, line in enumerate(text.splitlines(), 1)
            if ANY.search(line)
        ]
        trees[module_name(src, path)] = ast.parse(text)

    defs: set[Def] = set()
    bodies: dict[Def, ast.stmt] = {}
    classes: dict[str, list[str]] = defaultdict(list)
    aliases: list[str] = []
    for module, tree in trees.items():
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defs.add((module, stmt.name))
                bodies[(module, stmt.name)] = stmt
                if isinstance(stmt, ast.ClassDef):
                    classes[stmt.name].append(module)
            elif isinstance(stmt, ast.Assign | ast.AnnAssign):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                value = stmt.value
                if (
                    len(targets) == 1
                    and isinstance(targets[0], ast.Name)
                    and not targets[0].id.startswith("__")
                    and value is not None
                    and isinstance(value, ast.Name | ast.Attribute)
                    and dotted(value) is not None
                ):
                    aliases.append(f"{module}.{targets[0].id} = {dotted(value)}")

    locals_ = {module: imports(tree, module) for module, tree in trees.items()}
    roots: set[Def] = set()
    edges: dict[Def, set[Def]] = defaultdict(set)
    for module, tree in trees.items():
        top = []
        for stmt in tree.body:
            key = (module, getattr(stmt, "name", ""))
            if key in bodies:
                body = bodies[key]
                decorated = getattr(body, "decorator_list", [])
                if decorated and not isinstance(body, ast.ClassDef):
                    roots.add(key)
                edges[key] |= set(references([body], module, locals_[module], defs))
            else:
                top.append(stmt)
        roots |= set(references(top, module, locals_[module], defs))
        # A module run with `-m` from product code: its `main` (docstrings name other things).
        roots |= {d for d in string_references(ast.unparse(tree), defs) if d[1] == "main"}
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text())
    for target in pyproject["project"].get("scripts", {}).values():
        roots |= set(string_references(target, defs))
    roots |= (
        set(string_references((repo / "Dockerfile").read_text(), defs))
        if (repo / "Dockerfile").exists()
        else set()
    )

    reached = set()
    todo = list(roots)
    while todo:
        key = todo.pop()
        if key in reached:
            continue
        reached.add(key)
        todo.extend(edges[key])

    used_outside: set[Def] = set()
    for folder in ("tests", "benchmarks", "tools"):
        for path in sorted((repo / folder).rglob("*.py")) if (repo / folder).exists() else []:
            if path.is_relative_to(package):
                continue
            tree = ast.parse(path.read_text())
            name = ".".join(path.relative_to(repo).with_suffix("").parts)
            used_outside |= set(references(tree.body, name, imports(tree, name), defs))
            used_outside |= set(string_references(path.read_text(), defs))
    # A method's class reached counts for the class only; a class used only by tests is listed.
    unreached = sorted(defs - reached)
    test_only = [f"{m}.{n}" for m, n in unreached if (m, n) in used_outside]
    dead = [f"{m}.{n}" for m, n in unreached if (m, n) not in used_outside]
    shared = sorted(f"{name}: {', '.join(mods)}" for name, mods in classes.items() if len(mods) > 1)
    return {
        "lines": [str(lines)],
        "test_only": test_only,
        "dead": dead,
        "any_lines": any_lines,
        "aliases": aliases,
        "shared_type_names": shared,
    }


def main(argv: list[str]) -> int:
    listing = "--list" in argv
    rest = [a for a in argv if a != "--list"]
    repo = pathlib.Path(rest[0] if rest else pathlib.Path(__file__).resolve().parents[1])
    for key, items in count(repo).items():
        if key == "lines":
            print(f"{key}: {items[0]}")
            continue
        print(f"{key}: {len(items)}")
        if listing:
            for item in items:
                print(f"  {item}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

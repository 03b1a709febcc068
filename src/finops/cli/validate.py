"""`finops validate FILE|DIR...`: check manifests offline with the API server's own rules.

Prints one line per problem, `FILE: KIND/NAME: MESSAGE`, with the message text
kube-apiserver gives for the same object; exits 1 when anything is invalid and
0 otherwise. Directories are searched for `*.yaml`, `*.yml` and `*.json`.
Objects of other API groups (a Deployment next to a CostJob) are skipped.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import yaml

from finops.api import validation

_SUFFIXES = (".yaml", ".yml", ".json")


def register(sub: Any) -> None:
    """Add the `validate` sub-command."""
    p: argparse.ArgumentParser = sub.add_parser(
        "validate",
        help="check FinOps manifests offline (same schema and CEL rules as the API server)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="FILE|DIR", help="manifest files or directories")
    p.set_defaults(run=run)


def manifest_files(paths: Sequence[str]) -> Iterator[pathlib.Path]:
    """The files named, and the manifest files under the directories named, sorted."""
    for raw in paths:
        path = pathlib.Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
        else:
            yield path


def _label(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return f"{obj.get('kind', '?')}/{name or '?'}"


def check_file(path: pathlib.Path) -> list[str]:
    """Problem lines for one file (unreadable files and YAML errors are problems too)."""
    try:
        text = path.read_text(encoding="utf-8")
        # JSON is read as JSON: YAML is not quite a superset (escapes, some characters).
        documents = [json.loads(text)] if path.suffix == ".json" else list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        return [f"{path}: {type(exc).__name__}: {exc}".replace("\n", " ")]
    lines = []
    for doc in documents:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            lines.append(f"{path}: ?/?: <nil>: Invalid value: not an object")
            continue
        items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else None
        for obj in items if isinstance(items, list) else [doc]:
            if not isinstance(obj, dict) or not validation.is_ours(obj):
                continue
            lines.extend(f"{path}: {_label(obj)}: {m}" for m in validation.validate_object(obj))
    return lines


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Validate every manifest named; print the problems; 1 if any, else 0."""
    stream = out if out is not None else sys.stdout
    problems = 0
    for path in manifest_files(args.paths):
        for line in check_file(path):
            print(line, file=stream)
            problems += 1
    return 1 if problems else 0

"""Loader for the contract corpus: manifests the API must accept or refuse.

Layout: `valid/*.yaml` and `invalid/*.yaml`. A file holds one object to create,
or two documents for an update case (the first is created, then replaced by the
second). Each invalid file lists every problem the API server reports, one per
leading `# expect: <path>: <type>: <detail>` comment line, in kube-apiserver's
field-error format (`field: message` of each cause the API server returns).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parent
_EXPECT = "# expect: "


@dataclasses.dataclass(frozen=True)
class Case:
    path: pathlib.Path
    valid: bool
    documents: tuple[dict[str, Any], ...]
    expected: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{'valid' if self.valid else 'invalid'}/{self.path.name}"

    @property
    def is_update(self) -> bool:
        return len(self.documents) == 2

    @property
    def created(self) -> dict[str, Any]:
        return self.documents[0]

    @property
    def final(self) -> dict[str, Any]:
        return self.documents[-1]


def load(path: pathlib.Path) -> Case:
    text = path.read_text(encoding="utf-8")
    documents = tuple(d for d in yaml.safe_load_all(text) if d is not None)
    expected = tuple(line[len(_EXPECT) :] for line in text.splitlines() if line.startswith(_EXPECT))
    return Case(path, path.parent.name == "valid", documents, expected)


def cases(folder: str | None = None) -> list[Case]:
    folders = [folder] if folder else ["valid", "invalid"]
    return [load(p) for f in folders for p in sorted((ROOT / f).glob("*.yaml"))]

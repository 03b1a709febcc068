"""Generate the CustomResourceDefinitions (the five kinds and Budget) from the models and the
rule table.

`python -m finops.api.crds --write deploy/crds` rewrites the committed manifests;
`--check deploy/crds` exits 1 when they differ from what the model generates.
The generated structural schema is also what the offline validator evaluates.
"""

from __future__ import annotations

import argparse
import enum
import pathlib
import sys
import types
import typing
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from finops.api import models, rules

Schema = dict[str, Any]


@typing.runtime_checkable
class _HasPattern(typing.Protocol):
    pattern: str | None


def _unwrap(annotation: Any) -> tuple[Any, list[Any], bool]:
    """Strip Annotated and Optional: (bare type, metadata, was optional)."""
    metadata: list[Any] = []
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            args = typing.get_args(annotation)
            annotation = args[0]
            metadata.extend(args[1:])
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) < len(typing.get_args(annotation)):
                optional = True
            if len(members) == 1:
                annotation = members[0]
                continue
            annotation = typing.Union[tuple(members)]  # noqa: UP007 - rebuilding a runtime union
        return annotation, metadata, optional


def _constraints(metadata: Sequence[Any]) -> Schema:
    """OpenAPI keywords for pydantic/annotated-types constraints and OpenAPI markers."""
    out: Schema = {}
    for m in metadata:
        if isinstance(m, FieldInfo):
            out.update(_constraints(m.metadata))
            if isinstance(m.json_schema_extra, dict):
                out.update(m.json_schema_extra)
        elif isinstance(m, models.OpenAPI):
            out.update(dict(m.keywords))
        elif isinstance(m, annotated_types.Ge):
            out["minimum"] = m.ge
        elif isinstance(m, annotated_types.Le):
            out["maximum"] = m.le
        elif isinstance(m, annotated_types.MinLen):
            out["minLength"] = m.min_length
        elif isinstance(m, annotated_types.MaxLen):
            out["maxLength"] = m.max_length
        elif isinstance(m, _HasPattern) and m.pattern is not None:
            out["pattern"] = m.pattern
    return out


def _type_schema(annotation: Any, metadata: Sequence[Any] = ()) -> Schema:
    """The structural schema of one (possibly annotated/optional) type."""
    bare, inner_meta, _ = _unwrap(annotation)
    extra = _constraints([*metadata, *inner_meta])
    origin = typing.get_origin(bare)
    schema: Schema
    if origin is typing.Union:
        members = set(typing.get_args(bare))
        if members != {int, str}:
            raise TypeError(f"unsupported union {bare!r}")
        schema = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    elif origin is list:
        (item,) = typing.get_args(bare)
        schema = {"type": "array", "items": _type_schema(item)}
    elif origin is dict:
        _, value = typing.get_args(bare)
        schema = {"type": "object", "additionalProperties": _type_schema(value)}
    elif isinstance(bare, type) and issubclass(bare, enum.Enum):
        schema = {"type": "string", "enum": [e.value for e in bare]}
    elif isinstance(bare, type) and issubclass(bare, BaseModel):
        schema = object_schema(bare)
    elif bare is bool:
        schema = {"type": "boolean"}
    elif bare is int:
        schema = {"type": "integer", "format": "int64"}
    elif bare is str:
        schema = {"type": "string"}
    elif bare is datetime:
        schema = {"type": "string", "format": "date-time"}
    else:
        raise TypeError(f"no schema for {bare!r}")
    if schema.get("type") == "array" and "maxLength" in extra:
        # pydantic spells a list's bound like a string's; OpenAPI calls it maxItems.
        extra["maxItems"] = extra.pop("maxLength")
    schema.update(extra)
    return schema


def _default(info: FieldInfo) -> Any:
    if info.default is PydanticUndefined or info.default is None:
        return None
    value = info.default
    return value.value if isinstance(value, enum.Enum) else value


def object_schema(model: type[BaseModel]) -> Schema:
    """The schema of a model: its properties by wire name, required ones, defaults."""
    properties: Schema = {}
    required: list[str] = []
    for name, info in model.model_fields.items():
        wire = info.alias or name
        prop = _type_schema(info.annotation, info.metadata)
        if isinstance(info.json_schema_extra, dict):
            prop.update(info.json_schema_extra)
        default = _default(info)
        if default is not None:
            prop["default"] = default
        properties[wire] = prop
        if info.is_required():
            required.append(wire)
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _attach_rules(root: Schema, kind: str) -> None:
    """Put each rule of the kind onto the schema node its path names."""
    for rule in rules.for_kind(kind):
        node = root
        for part in rule.path.split(".") if rule.path else []:
            name, _, rest = part.partition("[")
            node = node["properties"][name]
            if rest:
                node = node["items"]
        entry = {"rule": rule.rule, "message": rule.message}
        node.setdefault("x-kubernetes-validations", []).append(entry)


def root_schema(kind: type[models._Object]) -> Schema:
    """The openAPIV3Schema of a kind, rules attached."""
    hints = typing.get_type_hints(kind, include_extras=True)
    spec_schema = _type_schema(hints["spec"])
    status_schema = _type_schema(hints["status"])
    root: Schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    _attach_rules(root, kind.kind_name)
    return root


def _column(name: str, json_path: str, type_: str, **extra: Any) -> Schema:
    return {"name": name, "jsonPath": json_path, "type": type_, **extra}


_AGE = _column("Age", ".metadata.creationTimestamp", "date")

PRINTER_COLUMNS: dict[str, list[Schema]] = {
    "FinOpsProvider": [
        _column("Ready", '.status.conditions[?(@.type=="Ready")].status', "string"),
        _AGE,
    ],
    "PriceBook": [
        _column("Active", ".status.active", "boolean"),
        _column("Ready", ".status.ready", "string"),
        _column("Currency", ".spec.currency", "string"),
        _AGE,
    ],
    "CostJob": [
        _column("Type", ".spec.type", "string"),
        _column("Interval", ".spec.interval", "string"),
        _column("Last Status", ".status.lastExecutionStatus", "string"),
        _AGE,
    ],
    "Offering": [_column("Ready", ".status.ready", "string"), _AGE],
    "Subscription": [
        _column("Ready", ".status.ready", "string"),
        _column("Offering", ".spec.offeringRef.name", "string"),
        _column("Activated", ".status.activatedAt", "date"),
        _AGE,
    ],
    "Budget": [
        _column("Period", ".spec.period", "string"),
        _column("Amount", ".spec.amount", "string"),
        _column("Currency", ".spec.currency", "string"),
        _column("Spent", ".status.spent", "string"),
        _column("Forecast", ".status.forecast", "string"),
        _column("State", ".status.state", "string"),
        _AGE,
    ],
}

# Field selectors the operator (and its webhooks) list with.
SELECTABLE_FIELDS: dict[str, list[str]] = {
    "PriceBook": [".status.ready"],
    "Offering": [".status.ready"],
    "Subscription": [".status.ready", ".status.compatibilityRoot"],
}


def crd(kind: type[models._Object]) -> Schema:
    """The whole CustomResourceDefinition of one kind."""
    name = kind.kind_name
    names: Schema = {
        "kind": name,
        "listKind": f"{name}List",
        "plural": kind.plural,
        "singular": name.lower(),
        "categories": ["finops"],
    }
    if kind.short_names:
        names["shortNames"] = list(kind.short_names)
    version: Schema = {
        "name": models.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root_schema(kind)},
        "subresources": {"status": {}},
        "additionalPrinterColumns": PRINTER_COLUMNS[name],
    }
    if name in SELECTABLE_FIELDS:
        version["selectableFields"] = [{"jsonPath": p} for p in SELECTABLE_FIELDS[name]]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.plural}.{models.GROUP}"},
        "spec": {
            "group": models.GROUP,
            "names": names,
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": [version],
        },
    }


_HEADER = "# Generated by `python -m finops.api.crds --write deploy/crds`; do not edit.\n"


def file_name(kind: type[models._Object]) -> str:
    return f"{models.GROUP}_{kind.plural}.yaml"


def render(kind: type[models._Object]) -> str:
    """The YAML text committed for one kind."""
    body = yaml.safe_dump(crd(kind), sort_keys=True, allow_unicode=True, width=100)
    return _HEADER + "---\n" + body


def rendered() -> dict[str, str]:
    """File name -> YAML text, for every kind."""
    return {file_name(k): render(k) for k in models.KINDS}


def schema_by_kind() -> dict[str, Schema]:
    """Kind name -> its openAPIV3Schema (what the offline validator evaluates)."""
    return {k.kind_name: root_schema(k) for k in models.KINDS}


def stale_files(directory: pathlib.Path) -> list[str]:
    """Names of files in `directory` that are missing or differ from the model."""
    stale = []
    for name, text in rendered().items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(name)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m finops.api.crds", description=__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=pathlib.Path, metavar="DIR", help="write the CRDs here")
    group.add_argument("--check", type=pathlib.Path, metavar="DIR", help="fail if DIR is stale")
    args = parser.parse_args(argv)
    if args.write is not None:
        args.write.mkdir(parents=True, exist_ok=True)
        for name, text in rendered().items():
            (args.write / name).write_text(text, encoding="utf-8")
        return 0
    stale = stale_files(args.check)
    for name in stale:
        print(f"{args.check / name}: stale; run python -m finops.api.crds --write {args.check}")
    return 1 if stale else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

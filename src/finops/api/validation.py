"""Offline validation: what kube-apiserver would say about an object, without a cluster.

The checks are the ones the API server runs for our CRDs, in its order: drop
`status` (the status subresource owns it) and nulls, prune unknown fields,
apply schema defaults, validate against the generated structural schema
(`finops.api.crds`), then evaluate the CEL rules of `finops.api.rules` with
cel-python. Messages are formatted the way kube-apiserver formats a field error,
`<path>: <type>: <detail>`, so they can be compared with the API server's causes.

Known differences: an unknown field is pruned silently here as it is by the
server's default field validation; CEL cost limits and list-type invariants of
lists we do not use are not modelled.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator
from typing import Any

import celpy
from celpy import adapter, evaluation

from finops.api import crds, models

Schema = dict[str, Any]
Path = tuple[str | int, ...]

BLOCKED_CEL_MESSAGE = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


# ---------------------------------------------------------------- field errors


def path_string(path: Path) -> str:
    """`spec.usageSources[0].name`, or `<nil>` for the root, as field.Path prints it."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "<nil>"


def _go_value(value: Any) -> str:
    """A bad value as field.Error prints it: strings quoted, scalars bare, the rest as JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _invalid(path: Path, value: Any, detail: str) -> str:
    return f"{path_string(path)}: Invalid value: {_go_value(value)}: {detail}"


def _required(path: Path, detail: str = "") -> str:
    return f"{path_string(path)}: Required value" + (f": {detail}" if detail else "")


def _unsupported(path: Path, value: Any, allowed: list[Any]) -> str:
    shown = ", ".join(json.dumps(a) for a in allowed)
    return f"{path_string(path)}: Unsupported value: {_go_value(value)}: supported values: {shown}"


# ---------------------------------------------------------------- schema access


@functools.cache
def _schemas() -> dict[str, Schema]:
    return crds.schema_by_kind()


def schema_for(kind: str) -> Schema | None:
    """The openAPIV3Schema the CRD of `kind` carries, or None for a kind we do not define."""
    return _schemas().get(kind)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


# ---------------------------------------------------------------- prune, default


def _normalise(schema: Schema, value: Any, root: bool = False) -> Any:
    """Drop null fields and unknown fields, then apply defaults, as the API server does on
    write (null list items stay, for the type check to refuse)."""
    if isinstance(value, dict) and schema.get("type") == "object":
        props: Schema = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        for key, child in value.items():
            if child is None:
                continue
            if key in props:
                out[key] = _normalise(props[key], child)
            elif isinstance(extra, dict):
                out[key] = _normalise(extra, child)
            elif root or (not props and "additionalProperties" not in schema):
                out[key] = child  # metadata and other opaque objects are kept whole
        for key, child_schema in props.items():
            if key not in out and "default" in child_schema:
                out[key] = _normalise(child_schema, copy.deepcopy(child_schema["default"]))
        return out
    if isinstance(value, list) and "items" in schema:
        # A null item is kept: the API server refuses it by type, it does not prune it.
        return [None if v is None else _normalise(schema["items"], v) for v in value]
    return value


# ---------------------------------------------------------------- structural schema


def _schema_errors(schema: Schema, value: Any, path: Path, errors: list[tuple[str, str]]) -> None:
    """Append (error type, message) pairs for OpenAPI schema violations under `path`."""
    where = path_string(path)
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, int | str) or isinstance(value, bool):
            detail = (
                f"{where} in body must be of type integer,string: {json.dumps(_json_type(value))}"
            )
            errors.append(("type", _invalid(path, value, detail)))
            return
    elif "type" in schema:
        expected = schema["type"]
        actual = _json_type(value)
        ok = actual == expected or (expected == "number" and actual == "integer")
        if not ok:
            detail = f"{where} in body must be of type {expected}: {json.dumps(actual)}"
            errors.append(("type", _invalid(path, actual, detail)))
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(("enum", _unsupported(path, value, schema["enum"])))
    if isinstance(value, str):
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            detail = f"{where} in body should match '{schema['pattern']}'"
            errors.append(("value", _invalid(path, value, detail)))
        if "minLength" in schema and len(value) < schema["minLength"]:
            detail = f"{where} in body should be at least {schema['minLength']} chars long"
            errors.append(("value", _invalid(path, value, detail)))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(
                ("too-long", f"{where}: Too long: may not be more than {schema['maxLength']} bytes")
            )
        if schema.get("format") == "date-time" and not _is_date_time(value):
            detail = f"{where} in body must be of type date-time: {json.dumps(value)}"
            errors.append(("value", _invalid(path, value, detail)))
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            detail = f"{where} in body should be greater than or equal to {schema['minimum']}"
            errors.append(("value", _invalid(path, value, detail)))
        if "maximum" in schema and value > schema["maximum"]:
            detail = f"{where} in body should be less than or equal to {schema['maximum']}"
            errors.append(("value", _invalid(path, value, detail)))
    if isinstance(value, dict):
        props: Schema = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append(("required", _required((*path, key))))
        for key, child in value.items():
            if key in props:
                _schema_errors(props[key], child, (*path, key), errors)
            elif isinstance(schema.get("additionalProperties"), dict):
                _schema_errors(schema["additionalProperties"], child, (*path, key), errors)
    if isinstance(value, list) and "items" in schema:
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            detail = f"must have at most {schema['maxItems']} items"
            errors.append(("too-many", f"{where}: Too many: {len(value)}: {detail}"))
        for index, item in enumerate(value):
            _schema_errors(schema["items"], item, (*path, index), errors)
        errors.extend(("list", e) for e in _list_map_errors(schema, value, path))


def _list_map_errors(schema: Schema, value: list[Any], path: Path) -> Iterator[str]:
    """Duplicate keys in an `x-kubernetes-list-type: map` list."""
    if schema.get("x-kubernetes-list-type") != "map":
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: set[str] = set()
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            continue
        key = json.dumps([item.get(k) for k in keys])
        if key in seen:
            shown = ",".join(f'"{k}"={json.dumps(item.get(k))}' for k in keys)
            where = path_string((*path, index))
            yield f"{where}: Duplicate value: map[string]interface {{}}{{{shown}}}"
        seen.add(key)


_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _is_date_time(value: str) -> bool:
    return _DATE_TIME.match(value) is not None


# ---------------------------------------------------------------- CEL


@functools.cache
def _program(expression: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expression))


def _cel_value(value: Any) -> Any:
    return adapter.json_to_cel(value)


def _evaluate(expression: str, self_value: Any, old_value: Any | None) -> tuple[bool, str | None]:
    """(passed, evaluation error) for one rule; an error counts as a failure."""
    activation: dict[str, Any] = {"self": _cel_value(self_value)}
    if old_value is not None:
        activation["oldSelf"] = _cel_value(old_value)
    try:
        result = _program(expression).evaluate(activation)
    except evaluation.CELEvalError as exc:
        return False, str(exc.args[0] if exc.args else exc)
    if isinstance(result, evaluation.CELEvalError):
        return False, str(result.args[0] if result.args else result)
    return bool(result), None


def _rule_failure(path: Path, value: Any, message: str) -> str:
    """A failed rule as kube-apiserver 1.35 prints it: scalars show their value, objects do not."""
    if isinstance(value, dict | list):
        return f"{path_string(path)}: Invalid value: {message}"
    return _invalid(path, value, message)


def _has_rules(schema: Schema) -> bool:
    """Whether any node of the schema carries a CEL rule (the API server has a CEL validator)."""
    if schema.get("x-kubernetes-validations"):
        return True
    children = list(schema.get("properties", {}).values())
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            children.append(schema[key])
    return any(_has_rules(child) for child in children)


def _rules_at(schema: Schema) -> list[Schema]:
    return list(schema.get("x-kubernetes-validations", []))


def _cel_errors(schema: Schema, value: Any, old: Any | None, path: Path, errors: list[str]) -> None:
    """Evaluate the rules on this node, then on its children (old values correlated by key)."""
    for entry in _rules_at(schema):
        transition = "oldSelf" in entry["rule"]
        if transition and old is None:
            continue
        passed, problem = _evaluate(entry["rule"], value, old if transition else None)
        if not passed:
            message = entry["message"]
            if problem is not None:
                message = f"{problem} evaluating rule: {message}"
            errors.append(_rule_failure(path, value, message))
    if isinstance(value, dict):
        props: Schema = schema.get("properties", {})
        for key, child in value.items():
            child_schema = props.get(key)
            if child_schema is None and isinstance(schema.get("additionalProperties"), dict):
                child_schema = schema["additionalProperties"]
            if child_schema is None:
                continue
            old_child = old.get(key) if isinstance(old, dict) else None
            _cel_errors(child_schema, child, old_child, (*path, key), errors)
    elif isinstance(value, list) and "items" in schema:
        # Our lists are atomic: items have no old counterpart, so transition rules skip them.
        for index, item in enumerate(value):
            _cel_errors(schema["items"], item, None, (*path, index), errors)


# ---------------------------------------------------------------- metadata


def _metadata_errors(obj: dict[str, Any]) -> list[str]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [_required(("metadata", "name"), "name or generateName is required")]
    name = meta.get("name")
    if not name:
        if meta.get("generateName"):
            return []
        return [_required(("metadata", "name"), "name or generateName is required")]
    if not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        return [_invalid(("metadata", "name"), name, _DNS1123_SUBDOMAIN_MESSAGE)]
    return []


# ---------------------------------------------------------------- public API


def kind_errors(obj: dict[str, Any]) -> list[str]:
    """Problems with apiVersion/kind themselves (an object this API does not define)."""
    if obj.get("apiVersion") != models.API_VERSION:
        return [_unsupported(("apiVersion",), obj.get("apiVersion"), [models.API_VERSION])]
    if obj.get("kind") not in models.BY_KIND:
        return [_unsupported(("kind",), obj.get("kind"), list(models.BY_KIND))]
    return []


def prepare(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server would store it: no status, pruned, defaulted."""
    schema = schema_for(str(obj.get("kind")))
    if schema is None:
        return dict(obj)
    body = {k: v for k, v in obj.items() if k != "status"}
    result: dict[str, Any] = _normalise(schema, body, root=True)
    return result


_BLOCKING = frozenset({"type", "enum", "required", "too-long", "too-many"})


def _validate(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    problems = kind_errors(new)
    if problems:
        return problems
    schema = schema_for(str(new["kind"]))
    assert schema is not None
    prepared = prepare(new)
    old_prepared = prepare(old) if old is not None else None
    problems = _metadata_errors(prepared)
    typed: list[tuple[str, str]] = []
    _schema_errors(schema, prepared, (), typed)
    problems.extend(message for _, message in typed)
    if not _has_rules(schema):
        return problems
    if any(kind in _BLOCKING for kind, _ in typed):
        # kube-apiserver skips CEL when a value is missing, of the wrong type, not in its
        # enum, too long or too many: the rules' cost estimates would not hold.
        problems.append(_invalid((), None, BLOCKED_CEL_MESSAGE))
        return problems
    cel: list[str] = []
    _cel_errors(schema, prepared, old_prepared, (), cel)
    problems.extend(cel)
    return problems


def validate_object(obj: dict[str, Any]) -> list[str]:
    """Problems kube-apiserver would report when creating `obj`; empty when it is valid."""
    return _validate(None, obj)


def validate_update(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Problems kube-apiserver would report when updating `old` to `new` (transition rules too)."""
    return _validate(old, new)


def is_ours(obj: dict[str, Any]) -> bool:
    """Whether an object belongs to this API group (other manifests are not ours to judge)."""
    api_version = obj.get("apiVersion")
    return isinstance(api_version, str) and api_version.split("/")[0] == models.GROUP


# Keep the rule table importable from here for callers that list what is checked.

"""A Subscription body read once into the fields the decisions use.

The Subscription reconciler (`finops.hierarchy`) and the charge run (`finops.collection`) read
the same parts of a Subscription: who it is, what it binds, whether it is activated,
deactivated or being deleted. `SubscriptionView.parse` is the one place that digs them out of
the raw body, so both read a missing or odd field the same way.

Parsing never raises: a timestamp that is present but not RFC 3339 with a timezone leaves its
parsed time None and is listed in `problems`, while `activated`/`deactivated` still say the
field was written. The gates only ask whether the field is set; the charge run, which needs
the instant, refuses a Subscription with problems.

The controller's watch caches hold their objects as `Frozen` bodies, which nobody modifies:
their view is parsed once and kept, since the decisions and the wake-up rules read the same
cached Subscription dozens of times per change.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any, NamedTuple, cast

from finops.api import bodies


class Key(NamedTuple):
    """An object's namespace and name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def ref_key(ref: object) -> Key | None:
    """The key a `{name, namespace}` reference names, or None when it is absent or empty."""
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    return Key(str(ref.get("namespace") or ""), str(ref["name"]))


class TimestampError(ValueError):
    """A status timestamp that is not RFC 3339 with a timezone."""


def parse_time(value: object) -> dt.datetime | None:
    """An RFC 3339 status timestamp as aware UTC; None when absent (TimestampError if bad)."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        parsed = value
    elif not isinstance(value, str):
        raise TimestampError(f"timestamp must be a string, got {value!r}")
    else:
        try:
            parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise TimestampError(f"timestamp {value!r} is not RFC 3339") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise TimestampError(f"timestamp {value!r} has no timezone")
    return parsed.astimezone(dt.UTC)


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _time(status: Mapping[str, Any], field: str, problems: list[str]) -> dt.datetime | None:
    try:
        return parse_time(status.get(field))
    except TimestampError as exc:
        problems.append(str(exc))
        return None


class Frozen(dict[str, Any]):
    """An object body that is never modified once built (a watch cache's copy), so what is
    parsed from it can be kept on it. Compares, copies and serialises as a plain dict."""

    __slots__ = ("parsed",)
    parsed: SubscriptionView

    def __copy__(self) -> dict[str, Any]:
        return dict(self)  # a copy may be modified: a plain dict, nothing kept

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionView:
    """What the reconciler and the charge run read of one Subscription body."""

    key: Key
    uid: str
    generation: int | None
    resource_version: str
    labels: Mapping[str, str]
    finalizers: tuple[str, ...]
    deleting: bool
    """`metadata.deletionTimestamp` is set."""
    spec: bodies.SubscriptionSpecBody
    status: bodies.SubscriptionStatusBody
    offering_namespace: str
    offering_name: str
    parent: Key | None
    """`spec.parent.subscriptionRef`, None when absent or without a name."""
    compatibility_root: str | None
    activated: bool
    """`status.activatedAt` is written (whether or not it parses)."""
    deactivated: bool
    activated_at: dt.datetime | None
    deactivated_at: dt.datetime | None
    problems: tuple[str, ...] = ()
    """Why a written timestamp could not be parsed, activation first."""

    @property
    def offering(self) -> Key | None:
        """`spec.offeringRef` as a key, None when absent or without a name."""
        if not self.offering_name:
            return None
        return Key(self.offering_namespace, self.offering_name)

    @property
    def active(self) -> bool:
        """Billing is open: activated and not deactivated."""
        return self.activated and not self.deactivated

    @property
    def ready(self) -> bool:
        return str(self.status.get("ready", "")) == "True"

    @classmethod
    def parse(cls, body: bodies.SubscriptionBody | Mapping[str, Any]) -> SubscriptionView:
        """Read a raw Subscription body (never raises on a missing or malformed field); a
        `Frozen` body is read once."""
        if type(body) is Frozen:
            try:
                return body.parsed
            except AttributeError:
                body.parsed = view = cls._parse(body)
                return view
        return cls._parse(body)

    @classmethod
    def _parse(cls, body: bodies.SubscriptionBody | Mapping[str, Any]) -> SubscriptionView:
        meta: Mapping[str, Any] = body.get("metadata") or {}
        spec = _mapping(body.get("spec"))
        status = _mapping(body.get("status"))
        offering = _mapping(spec.get("offeringRef"))
        parent = spec.get("parent") or {}
        generation = meta.get("generation")
        root = status.get("compatibilityRoot")
        problems: list[str] = []
        return cls(
            key=Key(str(meta.get("namespace") or ""), str(meta.get("name") or "")),
            uid=str(meta.get("uid") or ""),
            generation=generation if isinstance(generation, int) else None,
            resource_version=str(meta.get("resourceVersion") or ""),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            finalizers=tuple(str(f) for f in meta.get("finalizers") or ()),
            deleting=bool(meta.get("deletionTimestamp")),
            spec=cast(bodies.SubscriptionSpecBody, spec),
            status=cast(bodies.SubscriptionStatusBody, status),
            offering_namespace=str(offering.get("namespace") or ""),
            offering_name=str(offering.get("name") or ""),
            parent=ref_key(parent.get("subscriptionRef")) if isinstance(parent, Mapping) else None,
            compatibility_root=str(root) if root else None,
            activated=bool(status.get("activatedAt")),
            deactivated=bool(status.get("deactivatedAt")),
            activated_at=_time(status, "activatedAt", problems),
            deactivated_at=_time(status, "deactivatedAt", problems),
            problems=tuple(problems),
        )

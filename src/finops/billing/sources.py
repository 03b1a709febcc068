"""Which allocation rows a Subscription's `spec.usageSources` select.

Fields inside one entry narrow each other (AND); entries widen the selection (OR). A
`namespace` alone is the broad form. `resourceType: Pod` switches `name` to the pod name and
adds no filter of its own, so `resourceType: Pod` with only a namespace selects the whole
namespace. Any other `resourceType` must equal the row's controller kind (OpenCost writes it
lower-case, e.g. `deployment`), and `name` is then the controller name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from finops.api import bodies, models
from finops.billing import allocation


def _text(entry: Mapping[str, Any], key: str) -> str:
    value = entry.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"usageSources[].{key} must be a string, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class SourceFilter:
    """One `usageSources` entry; an empty string means the field is not set."""

    resource_type: str = ""
    name: str = ""
    namespace: str = ""

    @classmethod
    def from_dict(cls, entry: Mapping[str, Any]) -> SourceFilter:
        """Build from one raw entry of a Subscription's `spec.usageSources`."""
        return cls(_text(entry, "resourceType"), _text(entry, "name"), _text(entry, "namespace"))

    def is_empty(self) -> bool:
        """An entry with no field set; admission refuses it, and here it selects nothing
        rather than every row in the cluster."""
        return not (self.resource_type or self.name or self.namespace)

    def matches(self, row: allocation.AllocationRow) -> bool:
        """True when every field this entry sets agrees with the row."""
        if self.is_empty():
            return False
        if self.namespace and row.namespace != self.namespace:
            return False
        if self.resource_type == models.ResourceType.POD:
            return not self.name or row.pod == self.name
        if self.resource_type and row.controller_kind.lower() != self.resource_type.lower():
            return False
        return not self.name or row.controller_name == self.name


def from_subscription_spec(spec: bodies.SubscriptionSpecBody) -> tuple[SourceFilter, ...]:
    """The usage sources of a Subscription's `spec` (none when the field is absent)."""
    entries: Sequence[bodies.UsageSourceBody] = spec.get("usageSources") or ()
    return tuple(SourceFilter.from_dict(entry) for entry in entries)

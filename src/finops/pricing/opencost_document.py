"""Render the active PriceBook into OpenCost's custom pricing document (`default.json`).

OpenCost reads this document only at start-up, so callers compare the rendered content with
what is stored and restart OpenCost only when it changed. Values stay the strings the user
wrote (no float round trip); an unset rate is written as "0", never blank.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from finops.api import bodies

CONFIGMAP_NAME = "finops-operator-custom-pricing-configs"
DOCUMENT_KEY = "default.json"
RESTARTED_AT_ANNOTATION = "finops.stakater.com/restartedAt"

# OpenCost document key -> PriceBook rate field.
_FIELDS: tuple[tuple[str, str], ...] = (
    ("CPU", "cpuHour"),
    ("spotCPU", "spotCPUHour"),
    ("RAM", "ramGbHour"),
    ("spotRAM", "spotRAMGbHour"),
    ("GPU", "gpuHour"),
    ("storage", "pvGbHour"),
    ("zoneNetworkEgress", "networkGiB"),
    ("regionNetworkEgress", "networkGiB"),
    ("internetNetworkEgress", "networkGiB"),
)


def render(book_name: str, rates: bodies.PriceRatesBody | None) -> dict[str, str]:
    """The flat document for one book; also what `status.activePricing` mirrors."""
    given: Mapping[str, object] = rates or {}
    doc = {"provider": "custom", "description": f"Pricebook from: {book_name}"}
    for key, field in _FIELDS:
        value = given.get(field)
        doc[key] = str(value) if value not in (None, "") else "0"
    return doc


def serialize(doc: Mapping[str, str]) -> str:
    """Canonical JSON text (sorted keys) so equal documents compare equal as strings."""
    return json.dumps(dict(doc), sort_keys=True, indent=2) + "\n"

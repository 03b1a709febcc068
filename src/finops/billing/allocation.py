"""One OpenCost allocation row as the ledger stores it and the meters read it.

Shared by the OpenCost client (which produces rows), the ledger (which stores them) and the
usage meters (which price them), so it lives in the pure core. Quantities are exact `Decimal`
values parsed from the JSON text, never floats; OpenCost's `null` (NaN) becomes zero.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import msgspec

ZERO = Decimal(0)


@dataclasses.dataclass(frozen=True, slots=True)
class AllocationRow:
    """Usage of one allocation (e.g. namespace/pod/container) during one collected hour.

    `hour` is the start of the hour the row was collected for (aware UTC); `start`/`end` are
    the part of that hour OpenCost saw the workload running, and `minutes` its length.
    """

    cluster: str
    name: str
    namespace: str
    aggregation: str
    hour: dt.datetime
    start: dt.datetime
    end: dt.datetime
    minutes: Decimal = ZERO
    controller_kind: str = ""
    controller_name: str = ""
    pod: str = ""
    container: str = ""
    node: str = ""
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    cpu_core_request_average: Decimal = ZERO
    cpu_core_usage_average: Decimal = ZERO
    cpu_core_hours: Decimal = ZERO
    gpu_count: Decimal = ZERO
    gpu_hours: Decimal = ZERO
    gpu_usage_average: Decimal = ZERO
    ram_byte_request_average: Decimal = ZERO
    ram_byte_usage_average: Decimal = ZERO
    ram_byte_hours: Decimal = ZERO
    pv_byte_hours: Decimal = ZERO
    network_transfer_bytes: Decimal = ZERO
    network_receive_bytes: Decimal = ZERO


ROW_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(AllocationRow))
"""`AllocationRow` field names in declaration order: the order of row tuples and row lines."""

_LABELS_AT = ROW_FIELDS.index("labels")
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def row_line(values: Sequence[Any]) -> str:
    """One row (values in `ROW_FIELDS` order, labels a dict) as a line of PostgreSQL `COPY`
    text without its end of line: `str()` of each value, labels as JSON, escaped.

    Why here: the OpenCost fast path writes these lines straight from a body and the ledger
    `COPY`s them; both import this, neither the other. It is the text psycopg's text `COPY`
    sends for the same values.
    """
    out = list(values)
    out[_LABELS_AT] = msgspec.json.encode(out[_LABELS_AT]).decode()
    line = "\t".join(map(str, out))
    plain = "\\" not in line and "\n" not in line and "\r" not in line
    if plain and line.count("\t") == len(out) - 1:
        return line  # nothing to escape (the common case, checked once per row)
    return "\t".join(str(v).translate(_COPY_ESCAPES) for v in out)

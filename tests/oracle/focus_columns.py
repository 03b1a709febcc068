"""The FOCUS column table read literally: what a row must hold, checked column by column."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from decimal import Decimal

from finops.billing import focus


def problems(r: Mapping[str, focus.Value]) -> list[str]:
    """What in a row breaks the column table: missing columns, nulls, types, allowed values."""
    found = [f"{name}: missing" for name in focus.NAMES if name not in r]
    for column in focus.COLUMNS:
        value = r.get(column.name)
        if value is None:
            if not column.nullable and column.name in r:
                found.append(f"{column.name}: null, but the column does not allow nulls")
            continue
        expected: type | tuple[type, ...] = {
            focus.DataType.DECIMAL: Decimal,
            focus.DataType.STRING: str,
            focus.DataType.DATETIME: dt.datetime,
            focus.DataType.JSON: dict,
        }[column.data_type]
        if not isinstance(value, expected):
            found.append(f"{column.name}: {type(value).__name__}, not {column.data_type}")
        elif column.allowed and value not in column.allowed:
            found.append(f"{column.name}: {value!r} is not an allowed value")
    return found

"""FOCUS rows as a Parquet file (optional: needs the `parquet` extra, i.e. pyarrow).

Written in batches, so memory stays bounded by one batch. Costs and prices are decimal(38, 6),
quantities decimal(38, 12) (the ledger keeps twelve places), times UTC timestamps, Tags its
JSON text.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from finops.billing import focus

BATCH = 10_000
_QUANTITIES = {"ConsumedQuantity", "PricingQuantity"}


def _arrow_type(column: focus.Column) -> Any:
    if column.data_type is focus.DataType.DECIMAL:
        return pa.decimal128(38, 12 if column.name in _QUANTITIES else 6)
    if column.data_type is focus.DataType.DATETIME:
        return pa.timestamp("s", tz="UTC")
    return pa.string()


SCHEMA = pa.schema([pa.field(c.name, _arrow_type(c), nullable=c.nullable) for c in focus.COLUMNS])


def _batches(rows: Iterable[dict[str, focus.Value]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        tags = row["Tags"]
        batch.append({**row, "Tags": None if tags is None else focus.text(tags)})
        if len(batch) >= BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def write(rows: Iterable[dict[str, focus.Value]], path: str) -> int:
    """Write every row to `path`; the number of rows written."""
    count = 0
    with pq.ParquetWriter(path, SCHEMA) as writer:
        for batch in _batches(rows):
            writer.write_table(pa.Table.from_pylist(batch, schema=SCHEMA))
            count += len(batch)
        if count == 0:
            writer.write_table(SCHEMA.empty_table())
    return count

"""The FOCUS export's CSV made by PostgreSQL and streamed with `COPY … TO STDOUT`.

Why: building each row in Python cost about ten times what PostgreSQL takes to send it. The
columns that follow from few distinct keys (the Offering version, PriceBook and source of a
row; its Subscription version's Tags; the invoice of a namespace's period; the text of each
hour) are worked out here by the same pure functions the JSON export uses, and handed to the
statement as arrays; per row the database only formats numbers and joins strings. No temporary
table, so a read-only transaction will do. The bytes are exactly what `focus.csv_lines` writes
for the same rows: an empty string is sent as NULL (an empty cell, where `COPY` would quote
it), `COPY`'s quoting rule is `csv`'s minimal one otherwise, and each line ends in CRLF.
Corrections are few and come last, through `focus.row`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any, cast

import psycopg
from psycopg.abc import Buffer
from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from finops.api import bodies
from finops.billing import focus, periods, ticks
from finops.store import allocations
from finops.store import focus as focus_store

LINES = 128
"""How many lines go out at once (about 64 KiB)."""

_FEE = "s.source = 'subscription'"
_TIME = '\'YYYY-MM-DD"T"HH24:MI:SS"Z"\''
_PRICE = "s.unit_price_micros * 0.000001"
_FEE_PRICE = "coalesce(s.fee_price, s.unit_price_micros)"
_PRORATED = f"""(SELECT (q + CASE WHEN 2 * r > p OR (2 * r = p AND mod(q, 2) = 1) THEN 1 ELSE 0 END)
        * 0.000000000001
    FROM (SELECT div(n, p) AS q, n - div(n, p) * p AS r, p
          FROM (SELECT s.amount_micros * 1000000000000::numeric AS n,
                       {_FEE_PRICE}::numeric AS p) a) b)"""
_QUANTITY = f"""CASE WHEN NOT {_FEE} THEN s.quantity
    WHEN {_FEE_PRICE} = 0 OR s.amount_micros = trunc(s.quantity) * {_FEE_PRICE} THEN s.quantity
    ELSE {_PRORATED} END"""
_INNER = """
    SELECT c.hour, v.namespace, v.name, c.source, c.subscription_uid, c.amount_micros,
           c.currency, c.covers_start, c.covers_end, c.unit_price_micros, c.finalized,
           c.quantity, c.subscription_version_id AS version, c.offering_version_id AS offering,
           coalesce(c.pricebook_id, 0) AS book, h.charge_end, h.charge_start, h.period
    FROM subscription_charges c
    JOIN subscription_versions v ON v.id = c.subscription_version_id
    JOIN unnest(%(h_hour)s::timestamptz[], %(h_end)s::text[], %(h_start)s::text[],
                %(h_period)s::int[])
        AS h(hour, charge_end, charge_start, period) ON h.hour = c.hour
"""
_INNER_ORDER = " ORDER BY c.hour, v.namespace, v.name, c.source, c.subscription_uid"
_CHANGED = "('the ledger changed during the export, at ' || s.subscription_uid)::int::text"
"""Fails the statement: a row whose key was not in the key tables (only possible outside a
repeatable-read transaction) must stop the export rather than write a short line."""
_KEY = "s.offering::text || ' ' || s.book::text || ' ' || s.source"
_OUTER_ORDER = " ORDER BY s.hour, s.namespace, s.name, s.source, s.subscription_uid"
_TERMS = f"""
    SELECT s.*, coalesce((s.terms ->> 'listed')::numeric, {_PRICE}) AS listed,
           coalesce((s.terms ->> 'contracted')::numeric, {_PRICE}) AS contracted,
           (s.terms ->> 'fee_price')::bigint AS fee_price
    FROM (SELECT s.*, coalesce(%(k_terms)s::jsonb -> ({_KEY}), {_CHANGED}::jsonb) AS terms
          FROM ({{inner}}) s
          {_OUTER_ORDER} OFFSET 0) s
    {_OUTER_ORDER} OFFSET 0
"""


def _quoted(column: str) -> str:
    """A string cell as `csv.writer` writes it: quoted when it holds `,`, `"`, CR or LF."""
    return (
        f"CASE WHEN s.{column} ~ '[\",\\r\\n]' "
        f"THEN '\"' || replace(s.{column}, '\"', '\"\"') || '\"' ELSE s.{column} END"
    )


def _time(column: str, default: str) -> str:
    return f"coalesce(to_char(s.{column} AT TIME ZONE 'UTC', {_TIME}), s.{default})"


_CELLS = (
    "s.amount_micros * 0.000001",  # BilledCost
    "%(cluster_cells)s::text",  # BillingAccountId, BillingAccountName
    f"coalesce(nullif(s.currency, ''), '{focus.NO_CURRENCY}')",
    "(%(p_cells)s::text[])[s.period + 1]",  # BillingPeriodEnd, BillingPeriodStart
    "s.terms ->> 'charge'",  # ChargeCategory .. ChargeFrequency
    _time("covers_end", "charge_end"),
    _time("covers_start", "charge_start"),
    f"CASE WHEN {_FEE} THEN '' ELSE s.quantity::text END",  # ConsumedQuantity
    "s.terms ->> 'consumed_unit'",
    f"s.contracted * {_QUANTITY}",  # ContractedCost
    "s.contracted",
    "s.amount_micros * 0.000001",  # EffectiveCost
    f"coalesce((%(t_invoices)s::jsonb -> s.version::text) ->> s.period, {_CHANGED})",
    "%(provider_cell)s::text",  # InvoiceIssuerName
    f"s.listed * {_QUANTITY}",  # ListCost
    "s.listed",
    _QUANTITY,  # PricingQuantity
    "s.terms ->> 'unit'",
    "%(provider_cell)s::text",  # ProviderName
    "%(provider_cell)s::text",  # PublisherName
    _quoted("subscription_uid"),
    _quoted("name"),
    f"'Subscription,{focus.SERVICE_CATEGORY}'",
    "s.terms ->> 'sku'",  # ServiceName .. SkuPriceId
    f"coalesce(%(t_cells)s::jsonb ->> s.version::text, {_CHANGED})",  # SubAccountId .. Tags
    "s.source",
    "''",  # x_CorrectedInvoiceId
    "CASE WHEN s.finalized THEN 'true' ELSE 'false' END",
    "s.unit_price_micros * 0.000001",  # x_UnitPrice
)
"""The cells of a row, in `focus.NAMES` order; a key table's entry holds several cells.
Prices are never negative (margins stop at zero), so no product is a Decimal `-0`, and
PostgreSQL's product of numerics has the sum of the scales, as Decimal's has."""

QUOTE = b"\x1e"
"""`COPY` quotes a line only when it holds a CR, LF, this or the delimiter (a label's odd
characters); such a line is unquoted on the way through."""
_QUOTE_BYTE = QUOTE[0]
COPY_OPTIONS = "(FORMAT csv, DELIMITER E'\\x1f', QUOTE E'\\x1e')"


_KEYS = """
    SELECT DISTINCT c.subscription_version_id, c.offering_version_id,
           coalesce(c.pricebook_id, 0), c.source
    FROM subscription_charges c JOIN subscription_versions v ON v.id = c.subscription_version_id
"""
_VERSIONS = """
    SELECT id, namespace, namespace_labels, subscription_labels
    FROM subscription_versions WHERE id = ANY(%s::bigint[])
"""
_OFFERINGS = "SELECT id, namespace, name, uid, spec FROM offering_versions WHERE id = ANY(%s)"
_BOOKS = f"""
    SELECT id, book_namespace, book_name, rates_digest,
           {", ".join(allocations.RATE_COLUMNS.values())}
    FROM pricebooks WHERE id = ANY(%s::bigint[])
"""


def rows_statement(namespace: str | None) -> str:
    """The query the `COPY` runs: one text column, the row's CSV line without its CRLF
    (named parameters: those of `focus_store.export_query` and of `key_tables`). The rows
    are ordered narrow and their text made after, so the sort never moves the wide text."""
    one = focus_store.ONE_NAMESPACE if namespace is not None else ""
    inner = _INNER + focus_store.SETTLED + one + _INNER_ORDER
    terms = _TERMS.format(inner=inner)
    return f"SELECT concat_ws(',', {', '.join(_CELLS)}) FROM ({terms}) s {_OUTER_ORDER}"


class Window(focus_store.ExportWindow):
    """The statement's own parameters (the key tables' come from `key_tables`)."""

    provider: str


@dataclasses.dataclass
class CsvExport:
    """The FOCUS CSV of a window: `lines()` yields the header, then the rows in pieces of
    `LINES` at a time; `rows` counts the rows sent so far."""

    conn: psycopg.Connection[Any]
    cluster: str
    start: dt.datetime
    end: dt.datetime
    namespace: str | None = None
    include_unsettled: bool = False
    provider: str = focus.DEFAULT_PROVIDER
    rows: int = 0

    def lines(self) -> Iterator[bytes]:
        """Raises `LedgerReadError` for a database failure, before the first piece or midway."""
        try:
            yield from self._lines()
        except psycopg.Error as exc:
            raise focus_store.LedgerReadError(str(exc).strip() or type(exc).__name__) from None

    def _lines(self) -> Iterator[bytes]:
        idle = self.conn.info.transaction_status == TransactionStatus.IDLE
        if idle and not self.conn.autocommit:
            # One snapshot for the key tables, the rows and the corrections.
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        index = focus_store.period_index(self.conn, cluster=self.cluster)
        window = self._params()
        params = {**window, **key_tables(self.conn, window, index)}
        head = focus.csv_header().encode()
        statement = f"COPY ({rows_statement(self.namespace)}) TO STDOUT {COPY_OPTIONS}"
        with self.conn.cursor() as cur, cur.copy(statement, params) as copy:
            yield from self._pieces(copy, head)
        yield from self._corrections(index)

    def _pieces(self, copy: Iterable[Buffer], head: bytes) -> Iterator[bytes]:
        """`COPY`'s lines with CRLF ends, `LINES` at a time. Only a quoted line can hold a
        LF of its own, so the others are joined and their LFs made CRLF at once."""
        held: list[Buffer] = []
        for line in copy:
            if line[0] == _QUOTE_BYTE:
                yield head + self._joined(held) + _unquoted(line) + b"\r\n"
                head, held = b"", []
                self.rows += 1
                continue
            held.append(line)
            if len(held) >= LINES:
                yield head + self._joined(held)
                head, held = b"", []
        if head or held:
            yield head + self._joined(held)

    def _joined(self, held: list[Buffer]) -> bytes:
        self.rows += len(held)
        return b"".join(held).replace(b"\n", b"\r\n")

    def _params(self) -> Window:
        window = focus_store.export_window(
            self.cluster, self.start, self.end, self.namespace, self.include_unsettled
        )
        return Window(**window, provider=self.provider)

    def _corrections(self, index: periods.PeriodIndex) -> Iterator[bytes]:
        found = focus_store.corrections(
            self.conn,
            cluster=self.cluster,
            start=self.start,
            end=self.end,
            namespace=self.namespace,
        )
        rows = (focus.row(c, self.provider, index) for c in found)
        held: list[str] = []
        for line in itertools.islice(focus.csv_lines(rows), 1, None):
            held.append(line)
            if len(held) >= 1000:
                self.rows += len(held)
                yield "".join(held).encode()
                held = []
        self.rows += len(held)
        if held:
            yield "".join(held).encode()


def _unquoted(line: Buffer) -> bytes:
    """A line `COPY` quoted (it held a CR or LF): its text, without the trailing LF."""
    return bytes(line)[1:-2].replace(QUOTE + QUOTE, QUOTE)


def cell(value: str | None) -> str:
    """One CSV cell exactly as `focus.csv_lines` writes it (null and '' are empty)."""
    return focus.csv_line(["", value or "", ""])[1:-3]


def cells(*values: str | None) -> str:
    """Cells in a row, joined by commas."""
    return ",".join(cell(v) for v in values)


def key_tables(
    conn: psycopg.Connection[Any], params: Window, index: periods.PeriodIndex
) -> dict[str, object]:
    """The small tables the statement joins or looks up in, as named parameters: each hour's
    cells and period, each Subscription version's cells, each (Offering version, PriceBook,
    source)'s `focus.SkuColumns` and cells, each namespace's invoice per period, and the cells of
    the cluster and provider."""
    one = focus_store.ONE_NAMESPACE if params["namespace"] is not None else ""
    keys = conn.execute((_KEYS + focus_store.SETTLED + one).encode(), params).fetchall()
    versions = {int(r[0]): r[1:] for r in conn.execute(_VERSIONS, [sorted({k[0] for k in keys})])}
    hours = list(focus.window_hours(index, params["start"], params["end"]))
    billed = _distinct_periods(hours)
    tables = _hours(hours, billed)
    tables.update(_terms(conn, params["cluster"], {(k[1], k[2], k[3]) for k in keys}))
    tables["t_cells"] = Jsonb(
        {
            str(version): cells(
                str(ns),
                str(ns),
                focus.text(focus.merged_tags(focus_store.strings(nl), focus_store.strings(own))),
            )
            for version, (ns, nl, own) in versions.items()
        }
    )
    tables["p_cells"] = [cells(ticks.rfc3339(p.end), ticks.rfc3339(p.start)) for p in billed]
    invoices = {
        ns: [cell(periods.invoice_id(params["cluster"], ns, p.start, p.label)) for p in billed]
        for ns in {str(v[0]) for v in versions.values()}
    }
    tables["t_invoices"] = Jsonb(
        {str(version): invoices[str(ns)] for version, (ns, _, _) in versions.items()}
    )
    tables["cluster_cells"] = cells(params["cluster"], params["cluster"])
    tables["provider_cell"] = cell(params["provider"])
    return tables


def _distinct_periods(hours: list[tuple[dt.datetime, periods.Period]]) -> list[periods.Period]:
    """The billing periods the window's hours fall in, in order."""
    found: dict[dt.datetime, periods.Period] = {}
    for _, period in hours:
        found.setdefault(period.start, period)
    return list(found.values())


def _hours(
    hours: list[tuple[dt.datetime, periods.Period]], billed: list[periods.Period]
) -> dict[str, object]:
    """Each hour's text and the number of its period in `billed`."""
    numbers = {p.start: n for n, p in enumerate(billed)}
    return {
        "h_hour": [h for h, _ in hours],
        "h_end": [ticks.rfc3339(h + ticks.HOUR) for h, _ in hours],
        "h_start": [ticks.rfc3339(h) for h, _ in hours],
        "h_period": [numbers[p.start] for _, p in hours],
    }


def _terms(
    conn: psycopg.Connection[Any], cluster: str, keys: set[tuple[int, int, str]]
) -> dict[str, object]:
    offerings = {int(r[0]): r[1:] for r in conn.execute(_OFFERINGS, [sorted({k[0] for k in keys})])}
    books = {
        int(r[0]): focus_store.price_list(r[1], r[2], r[3], r[4:])
        for r in conn.execute(_BOOKS, [sorted({k[1] for k in keys})])
    }
    found = []
    for offering, book, source in sorted(keys):
        off_ns, name, uid, spec = offerings[offering]
        sample = focus.LedgerCharge(
            cluster=cluster,
            namespace="",
            subscription="",
            subscription_uid="",
            offering=str(name),
            hour=ticks.EPOCH,
            source=source,
            quantity=Decimal(0),
            unit_price_micros=0,
            amount_micros=0,
            currency="",
            finalized=True,
            labels={},
            offering_namespace=str(off_ns),
            offering_uid=str(uid),
            offering_spec=cast(bodies.OfferingSpecBody, spec or {}),
            price_list=books.get(book),
        )
        found.append((offering, book, source, sample, focus.sku_columns(sample)))
    return {
        "k_terms": Jsonb(
            {
                f"{offering} {book} {source}": {
                    "listed": _text(terms.list_price),
                    "contracted": _text(terms.contracted_price),
                    "fee_price": terms.fee_price_micros,
                    "unit": cell(terms.unit),
                    "consumed_unit": cell(None if sample.is_fee else terms.unit),
                    "charge": _charge_cells(sample),
                    "sku": _sku_cells(sample, terms),
                }
                for offering, book, source, sample, terms in found
            }
        )
    }


def _text(price: Decimal | None) -> str | None:
    return None if price is None else format(price, "f")


def _charge_cells(sample: focus.LedgerCharge) -> str:
    """ChargeCategory, ChargeClass, ChargeDescription, ChargeFrequency of a charge (not a
    correction) of this Offering and source."""
    fee = sample.is_fee
    return cells(
        "Purchase" if fee else "Usage",
        None,
        focus.description(sample, sample.hour),
        "Recurring" if fee else "Usage-Based",
    )


def _sku_cells(sample: focus.LedgerCharge, terms: focus.SkuColumns) -> str:
    """ServiceName, ServiceSubcategory, SkuId, SkuMeter, SkuPriceDetails, SkuPriceId."""
    return cells(
        sample.offering,
        focus.SERVICE_SUBCATEGORY,
        terms.sku_id,
        terms.meter,
        terms.sku_price_details,
        terms.sku_price_id,
    )

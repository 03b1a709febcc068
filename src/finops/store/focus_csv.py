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
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, cast

import psycopg
from psycopg.abc import Buffer

from finops.api import bodies
from finops.billing import focus, periods, ticks
from finops.store import allocations
from finops.store import focus as focus_store

PIECE = 1 << 16
"""About how many bytes go out at once."""

_FEE = "c.source = 'subscription'"
_TIME = '\'YYYY-MM-DD"T"HH24:MI:SS"Z"\''
_PRICE = "c.unit_price_micros * 0.000001"
_FEE_PRICE = "coalesce(k.fee_price, c.unit_price_micros)"
_PRORATED = f"""(SELECT (q + CASE WHEN 2 * r > p OR (2 * r = p AND mod(q, 2) = 1) THEN 1 ELSE 0 END)
        * 0.000000000001
    FROM (SELECT div(n, p) AS q, n - div(n, p) * p AS r, p
          FROM (SELECT c.amount_micros * 1000000000000::numeric AS n,
                       {_FEE_PRICE}::numeric AS p) a) b)"""
_QUANTITY = f"""CASE WHEN NOT {_FEE} THEN c.quantity
    WHEN {_FEE_PRICE} = 0 OR c.amount_micros = trunc(c.quantity) * {_FEE_PRICE} THEN c.quantity
    ELSE {_PRORATED} END"""


def _cost(price: str) -> str:
    """price × quantity, exact (PostgreSQL's scale is the sum of the scales, as Decimal's).
    Neither is ever negative (margins stop at zero), so there is no Decimal `-0` to match."""
    return f"x.{price} * x.quantity"


_COLUMNS = {
    "BilledCost": "c.amount_micros * 0.000001",
    "BillingAccountId": "nullif(c.cluster, '')",
    "BillingAccountName": "nullif(c.cluster, '')",
    "BillingCurrency": f"coalesce(nullif(c.currency, ''), '{focus.NO_CURRENCY}')",
    "BillingPeriodEnd": "h.period_end",
    "BillingPeriodStart": "h.period_start",
    "ChargeCategory": f"CASE WHEN {_FEE} THEN 'Purchase' ELSE 'Usage' END",
    "ChargeClass": "NULL",
    "ChargeDescription": f"CASE WHEN {_FEE} THEN 'Subscription fee' ELSE c.source || ' usage' END"
    " || ' of Offering ' || o.name",
    "ChargeFrequency": f"CASE WHEN {_FEE} THEN 'Recurring' ELSE 'Usage-Based' END",
    "ChargePeriodEnd": f"coalesce(to_char(c.covers_end AT TIME ZONE 'UTC', {_TIME}), h.charge_end)",
    "ChargePeriodStart": f"coalesce(to_char(c.covers_start AT TIME ZONE 'UTC', {_TIME}),"
    " h.charge_start)",
    "ConsumedQuantity": f"CASE WHEN {_FEE} THEN NULL ELSE c.quantity END",
    "ConsumedUnit": f"CASE WHEN {_FEE} THEN NULL ELSE k.unit END",
    "ContractedCost": _cost("contracted"),
    "ContractedUnitPrice": "x.contracted",
    "EffectiveCost": "c.amount_micros * 0.000001",
    "InvoiceId": "i.invoice_id",
    "InvoiceIssuerName": "%(provider)s::text",
    "ListCost": _cost("listed"),
    "ListUnitPrice": "x.listed",
    "PricingQuantity": "x.quantity",
    "PricingUnit": "k.unit",
    "ProviderName": "%(provider)s::text",
    "PublisherName": "%(provider)s::text",
    "ResourceId": "nullif(c.subscription_uid, '')",
    "ResourceName": "nullif(v.name, '')",
    "ResourceType": "'Subscription'",
    "ServiceCategory": f"'{focus.SERVICE_CATEGORY}'",
    "ServiceName": "nullif(o.name, '')",
    "ServiceSubcategory": f"'{focus.SERVICE_SUBCATEGORY}'",
    "SkuId": "k.sku_id",
    "SkuMeter": "k.meter",
    "SkuPriceDetails": "k.details",
    "SkuPriceId": "k.price_id",
    "SubAccountId": "nullif(v.namespace, '')",
    "SubAccountName": "nullif(v.namespace, '')",
    "Tags": "t.tags",
    "x_ChargeSource": "c.source",
    "x_CorrectedInvoiceId": "NULL",
    "x_Finalized": "CASE WHEN c.finalized THEN 'true' ELSE 'false' END",
    "x_UnitPrice": _PRICE,
}
assert tuple(_COLUMNS) == focus.NAMES

_TABLES = """
    JOIN unnest(%(h_hour)s::timestamptz[], %(h_start)s::text[], %(h_end)s::text[],
                %(h_period_start)s::text[], %(h_period_end)s::text[], %(h_period)s::int[])
        AS h(hour, charge_start, charge_end, period_start, period_end, period)
        ON h.hour = c.hour
    JOIN unnest(%(t_version)s::bigint[], %(t_tags)s::text[]) AS t(version, tags)
        ON t.version = c.subscription_version_id
    JOIN unnest(%(k_offering)s::bigint[], %(k_book)s::bigint[], %(k_source)s::text[],
                %(k_unit)s::text[], %(k_meter)s::text[], %(k_listed)s::numeric[],
                %(k_contracted)s::numeric[], %(k_fee_price)s::bigint[], %(k_sku_id)s::text[],
                %(k_price_id)s::text[], %(k_details)s::text[])
        AS k(offering, book, source, unit, meter, listed, contracted, fee_price, sku_id,
             price_id, details)
        ON k.offering = c.offering_version_id AND k.book = coalesce(c.pricebook_id, 0)
       AND k.source = c.source
    JOIN unnest(%(i_namespace)s::text[], %(i_period)s::int[], %(i_id)s::text[])
        AS i(namespace, period, invoice_id)
        ON i.namespace = v.namespace AND i.period = h.period
"""
_ROWS = f"""
    SELECT {", ".join(_COLUMNS.values())}
    FROM subscription_charges c
    JOIN subscription_versions v ON v.id = c.subscription_version_id
    JOIN offering_versions o ON o.id = c.offering_version_id
    {_TABLES}
    CROSS JOIN LATERAL (SELECT coalesce(k.listed, {_PRICE}) AS listed,
                               coalesce(k.contracted, {_PRICE}) AS contracted,
                               {_QUANTITY} AS quantity) x
"""
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
    """The `COPY` statement's query (named parameters: those of `focus_store.export_query`,
    the provider and the key tables `key_tables` makes)."""
    one = focus_store.ONE_NAMESPACE if namespace is not None else ""
    return _ROWS + focus_store.SETTLED + one + focus_store.ORDER


@dataclasses.dataclass
class CsvExport:
    """The FOCUS CSV of a window: `lines()` yields the header, then the rows in pieces of
    about `PIECE` bytes; `rows` counts the rows sent so far."""

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
        index = focus_store.period_index(self.conn, cluster=self.cluster)
        params = self._params()
        params.update(key_tables(self.conn, params, index))
        head, held, size = focus.csv_header().encode(), list[Buffer](), 0
        query = rows_statement(self.namespace)
        statement = f"COPY ({query}) TO STDOUT (FORMAT csv)"
        with self.conn.cursor() as cur, cur.copy(statement, params) as copy:
            for line in copy:
                held.append(line[:-1])
                size += len(line)
                if size >= PIECE:
                    self.rows += len(held)
                    yield head + b"\r\n".join(held) + b"\r\n"
                    head, held, size = b"", [], 0
        self.rows += len(held)
        yield head + b"\r\n".join(held) + (b"\r\n" if held else b"")
        yield from self._corrections(index)

    def _params(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "start": self.start,
            "end": self.end,
            "namespace": self.namespace,
            "unsettled": self.include_unsettled,
            "provider": self.provider or None,
        }

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


def key_tables(
    conn: psycopg.Connection[Any], params: dict[str, Any], index: periods.PeriodIndex
) -> dict[str, Any]:
    """The small tables the statement joins, as named array parameters: each hour's text and
    period, each Subscription version's Tags, each (Offering version, PriceBook, source)'s
    `focus.Terms`, each namespace's invoice per period."""
    one = focus_store.ONE_NAMESPACE if params["namespace"] is not None else ""
    keys = conn.execute((_KEYS + focus_store.SETTLED + one).encode(), params).fetchall()
    versions = {int(r[0]): r[1:] for r in conn.execute(_VERSIONS, [sorted({k[0] for k in keys})])}
    tables = _hours(index, params["start"], params["end"])
    tables.update(_terms(conn, params["cluster"], {(k[1], k[2], k[3]) for k in keys}))
    tables["t_version"] = list(versions)
    tables["t_tags"] = [
        focus.text(focus.merged_tags(focus_store.strings(ns), focus_store.strings(own)))
        for _, ns, own in versions.values()
    ]
    namespaces = sorted({str(v[0]) for v in versions.values()})
    invoices = [
        (ns, n, periods.invoice_id(params["cluster"], ns, p.start, p.label))
        for n, p in enumerate(_distinct_periods(index, params["start"], params["end"]))
        for ns in namespaces
    ]
    tables["i_namespace"] = [i[0] for i in invoices]
    tables["i_period"] = [i[1] for i in invoices]
    tables["i_id"] = [i[2] for i in invoices]
    return tables


def _distinct_periods(
    index: periods.PeriodIndex, start: dt.datetime, end: dt.datetime
) -> list[periods.Period]:
    found: dict[dt.datetime, periods.Period] = {}
    for _, period in focus.window_hours(index, start, end):
        found.setdefault(period.start, period)
    return list(found.values())


def _hours(index: periods.PeriodIndex, start: dt.datetime, end: dt.datetime) -> dict[str, Any]:
    numbers = {p.start: n for n, p in enumerate(_distinct_periods(index, start, end))}
    hours = list(focus.window_hours(index, start, end))
    return {
        "h_hour": [h for h, _ in hours],
        "h_start": [ticks.rfc3339(h) for h, _ in hours],
        "h_end": [ticks.rfc3339(h + ticks.HOUR) for h, _ in hours],
        "h_period_start": [ticks.rfc3339(p.start) for _, p in hours],
        "h_period_end": [ticks.rfc3339(p.end) for _, p in hours],
        "h_period": [numbers[p.start] for _, p in hours],
    }


def _terms(
    conn: psycopg.Connection[Any], cluster: str, keys: set[tuple[int, int, str]]
) -> dict[str, Any]:
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
        found.append((offering, book, source, focus.terms(sample)))
    return {
        "k_offering": [f[0] for f in found],
        "k_book": [f[1] for f in found],
        "k_source": [f[2] for f in found],
        "k_unit": [f[3].unit for f in found],
        "k_meter": [f[3].meter for f in found],
        "k_listed": [f[3].list_price for f in found],
        "k_contracted": [f[3].contracted_price for f in found],
        "k_fee_price": [f[3].fee_price_micros for f in found],
        "k_sku_id": [f[3].sku_id for f in found],
        "k_price_id": [f[3].sku_price_id for f in found],
        "k_details": [f[3].sku_price_details for f in found],
    }

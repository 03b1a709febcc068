"""The FOCUS export's CSV made by PostgreSQL and streamed with `COPY … TO STDOUT`.

Why: building each row in Python cost about ten times what PostgreSQL takes to send it. Most
of a row follows from few keys (its Subscription version, Offering version, PriceBook, source
and billing period), so each key's line is written here once, as a `format` template, by the
same pure functions the JSON export uses; per row the database only fills in the numbers and
times of that row. No temporary table, so a read-only transaction will do. The bytes are
exactly what `focus.csv_lines` writes for the same rows: `COPY`'s quoting rule is `csv`'s
minimal one, and each line ends in CRLF. Corrections are few and come last, through
`focus.row`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any, cast

import msgspec
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
_PRICE = "c.unit_price_micros * 0.000001"
_FEE_PRICE = "coalesce(s.fee_price, s.unit_price_micros)"
_PRORATED = f"""(SELECT (q + CASE WHEN 2 * r > p OR (2 * r = p AND mod(q, 2) = 1) THEN 1 ELSE 0 END)
        * 0.000000000001
    FROM (SELECT div(n, p) AS q, n - div(n, p) * p AS r, p
          FROM (SELECT s.amount_micros * 1000000000000::numeric AS n,
                       {_FEE_PRICE}::numeric AS p) a) b)"""
_QUANTITY = f"""CASE WHEN NOT {_FEE} THEN s.quantity
    WHEN {_FEE_PRICE} = 0 OR s.amount_micros = trunc(s.quantity) * {_FEE_PRICE} THEN s.quantity
    ELSE {_PRORATED} END"""
_CHANGED = "('the ledger changed during the export, at ' || c.subscription_uid)::int"
"""Fails the statement: a row whose key was not in the key tables (only possible outside a
repeatable-read transaction) must stop the export rather than be left out."""
_INNER = f"""
    SELECT c.hour, coalesce(k.rank, {_CHANGED}) AS rank, k.line, c.source, c.quantity,
           c.amount_micros, c.unit_price_micros, c.currency, c.finalized, c.covers_start,
           c.covers_end, k.fee_price, coalesce(k.listed, {_PRICE}) AS listed,
           coalesce(k.contracted, {_PRICE}) AS contracted, h.charge_end, h.charge_start
    FROM subscription_charges c {{versions}}
    JOIN unnest(%(h_hour)s::timestamptz[], %(h_end)s::text[], %(h_start)s::text[])
        AS h(hour, charge_end, charge_start) ON h.hour = c.hour
    LEFT JOIN unnest(%(k_version)s::bigint[], %(k_offering)s::bigint[], %(k_book)s::bigint[],
                     %(k_source)s::text[], %(k_uid)s::text[], %(k_rank)s::int[],
                     %(k_listed)s::text[]::numeric[], %(k_contracted)s::text[]::numeric[],
                     %(k_fee)s::bigint[]) WITH ORDINALITY
        AS k(version, offering, book, source, uid, rank, listed, contracted, fee_price, line)
        ON k.version = c.subscription_version_id AND k.offering = c.offering_version_id
       AND k.book = coalesce(c.pricebook_id, 0) AND k.source = c.source
       AND k.uid = c.subscription_uid
"""
_VERSIONS_JOIN = " JOIN subscription_versions v ON v.id = c.subscription_version_id"
"""Only to keep one namespace's rows (`focus_store.ONE_NAMESPACE`)."""


def _time(column: str, hour: str) -> str:
    """A covered instant as FOCUS text, or else the hour's (from the hours table)."""
    return f"coalesce(to_char(s.{column} AT TIME ZONE 'UTC', {_TIME}), s.{hour})"


_ARGS = {
    "billed": "s.amount_micros * 0.000001",
    "currency": f"coalesce(nullif(s.currency, ''), '{focus.NO_CURRENCY}')",
    "charge_end": _time("covers_end", "charge_end"),
    "charge_start": _time("covers_start", "charge_start"),
    "quantity": _QUANTITY,
    "contracted_cost": f"s.contracted * {_QUANTITY}",
    "list_cost": f"s.listed * {_QUANTITY}",
    "finalized": "CASE WHEN s.finalized THEN 'true' ELSE 'false' END",
    "unit_price": "s.unit_price_micros * 0.000001",
}
"""The cells that differ from row to row, in the order `format` numbers them. Prices are
never negative (margins stop at zero), so no product is a Decimal `-0`, and PostgreSQL's
product of numerics has the sum of the scales, as Decimal's has."""


def _arg(name: str) -> str:
    """The placeholder of a per-row cell in a line's template."""
    return f"%{list(_ARGS).index(name) + 1}$s"


def _literal(text: str) -> str:
    """Text `format` copies as it is."""
    return text.replace("%", "%%")


QUOTE = b"\x1e"
"""`COPY` quotes a line only when it holds a CR, LF, this or the delimiter (a label's odd
characters); such a line is unquoted on the way through."""
_QUOTE_BYTE = QUOTE[0]
COPY_OPTIONS = "(FORMAT csv, DELIMITER E'\\x1f', QUOTE E'\\x1e')"


_KEYS = """
    SELECT k.version, k.offering, k.book, k.source, k.uid,
           dense_rank() OVER (ORDER BY v.namespace, v.name, k.source, k.uid)::int
    FROM (SELECT DISTINCT c.subscription_version_id AS version,
                 c.offering_version_id AS offering, coalesce(c.pricebook_id, 0) AS book,
                 c.source, c.subscription_uid AS uid
          FROM subscription_charges c {versions} {where}) k
    JOIN subscription_versions v ON v.id = k.version
"""
"""Each key of the window's rows with its place in the export's order within an hour (the
order of `focus_store.ORDER`, by the database's own collation). A cluster holds one row per
Subscription, hour and source, so no two rows of an hour share a place."""
_VERSIONS = """
    SELECT id, namespace, name, namespace_labels, subscription_labels
    FROM subscription_versions WHERE id = ANY(%s::bigint[])
"""
_OFFERINGS = "SELECT id, namespace, name, uid, spec FROM offering_versions WHERE id = ANY(%s)"
_BOOKS = f"""
    SELECT id, book_namespace, book_name, rates_digest,
           {", ".join(allocations.RATE_COLUMNS.values())}
    FROM pricebooks WHERE id = ANY(%s::bigint[])
"""


def _filter(namespace: str | None) -> dict[str, str]:
    """The join and condition that keep the window's rows (of one namespace, or all)."""
    if namespace is None:
        return {"versions": "", "where": focus_store.SETTLED}
    return {"versions": _VERSIONS_JOIN, "where": focus_store.SETTLED + focus_store.ONE_NAMESPACE}


def rows_statement(namespace: str | None) -> str:
    """The query the `COPY` runs over one billing period's hours: one text column, the row's
    CSV line without its CRLF (named parameters: those of `focus_store.export_query` and of
    `key_tables`). Each row is matched to its key and the hour's text before the sort (hash
    joins, in the parallel workers), sorted by hour and the key's place, and only then made
    into text: one `format` of the key's line template with the cells that differ per row."""
    where = _filter(namespace)
    inner = _INNER.format(versions=where["versions"]) + where["where"]
    args = ", ".join(_ARGS.values())
    return (
        f"SELECT format(%(k_lines)s::jsonb ->> (s.line - 1)::int, {args})"
        f" FROM ({inner} ORDER BY c.hour, rank) s ORDER BY s.hour, s.rank"
    )


PLANNER = {"enable_mergejoin": "off"}
"""Settings for the rows statement, in its transaction only. The planner cannot know how
many distinct keys the key table holds and would sort every row by key for a merge join;
the table is small and a hash join of each row is what the export needs."""


def plan(conn: psycopg.Connection[Any], settings: dict[str, str] = PLANNER) -> dict[str, str]:
    """Sets the planner's `settings` for the rest of the transaction (with no transaction
    they last one statement: the export stays right, only slower); returns the values they
    replace, to put back the same way."""
    before = {}
    for name, value in settings.items():
        row = conn.execute("SELECT current_setting(%s)", (name,)).fetchone()
        before[name] = str(row[0]) if row else value
        conn.execute("SELECT set_config(%s, %s, true)", (name, value))
    return before


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
        head = focus.csv_header().encode()
        statement = f"COPY ({rows_statement(self.namespace)}) TO STDOUT {COPY_OPTIONS}"
        before = plan(self.conn)
        for part in by_period(self._params(), index):
            params = {**part, **key_tables(self.conn, part, index)}
            with self.conn.cursor() as cur, cur.copy(statement, params) as copy:
                for piece in self._pieces(copy, head):
                    head = b""
                    yield piece
        if head:
            yield head
        plan(self.conn, before)
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


def by_period(window: Window, index: periods.PeriodIndex) -> Iterator[Window]:
    """The window cut at its billing periods' bounds, in order: each part is one
    `rows_statement`, so a line's template holds its period's cells and invoice whatever the
    window's length. Every charge row sits on a whole hour, so the parts hold exactly the
    window's rows; a window with no whole hour has no part."""
    hours = focus.window_hours(index, window["start"], window["end"])
    for _, part in itertools.groupby(hours, key=lambda hour: hour[1].start):
        within = [hour for hour, _ in part]
        yield Window(**{**window, "start": within[0], "end": within[-1] + ticks.HOUR})


def key_tables(
    conn: psycopg.Connection[Any], params: Window, index: periods.PeriodIndex
) -> dict[str, object]:
    """The statement's tables as named parameters, for a window inside one billing period
    (`by_period`): each hour's text; each key of the window's rows (Subscription version,
    Offering version, PriceBook, source, Subscription uid) with its place in the order, its
    prices and its line template (the row's cells, with `format` placeholders for the cells
    that differ per row)."""
    hours = list(focus.window_hours(index, params["start"], params["end"]))
    billed = _distinct_periods(hours)
    if len(billed) > 1:
        raise ValueError(
            f"the window [{params['start']}, {params['end']}) spans {len(billed)} billing "
            "periods; export it a period at a time (by_period)"
        )
    tables: dict[str, object] = {
        "h_hour": [h for h, _ in hours],
        "h_end": [ticks.rfc3339(h + ticks.HOUR) for h, _ in hours],
        "h_start": [ticks.rfc3339(h) for h, _ in hours],
    }
    keys = conn.execute(_KEYS.format(**_filter(params["namespace"])).encode(), params).fetchall()
    found = [(int(v), int(o), int(b), str(s), str(u), int(r)) for v, o, b, s, u, r in keys]
    versions = {int(r[0]): r[1:] for r in conn.execute(_VERSIONS, [sorted({k[0] for k in found})])}
    terms = _terms(conn, params["cluster"], {k[1:4] for k in found})
    columns = ("k_version", "k_offering", "k_book", "k_source", "k_uid", "k_rank")
    for n, name in enumerate(columns):
        tables[name] = [k[n] for k in found]
    tables["k_listed"] = [terms[k[1:4]].listed for k in found]
    tables["k_contracted"] = [terms[k[1:4]].contracted for k in found]
    tables["k_fee"] = [terms[k[1:4]].fee_price for k in found]
    if not billed:
        tables["k_lines"] = Jsonb([])
        return tables
    shared = {
        "cluster": cells(params["cluster"], params["cluster"]),
        "provider": cell(params["provider"]),
        "period": cells(ticks.rfc3339(billed[0].end), ticks.rfc3339(billed[0].start)),
    }
    by_version = {v: _version(params["cluster"], billed[0], r) for v, r in versions.items()}
    lines = [_line(shared, by_version[v], terms[(o, b, s)], u, s) for v, o, b, s, u, _ in found]
    tables["k_lines"] = Jsonb(lines, dumps=msgspec.json.encode)
    return tables


@dataclasses.dataclass(frozen=True)
class _Terms:
    """What an (Offering version, PriceBook, source) fixes in a line: its prices as text (None
    where the row's own unit price stands) and its cells."""

    listed: str | None
    contracted: str | None
    fee_price: int | None
    unit: str
    consumed_unit: str
    charge: str  # ChargeCategory, ChargeClass, ChargeDescription, ChargeFrequency
    sku: str  # ServiceName .. SkuPriceId


@dataclasses.dataclass(frozen=True)
class _Version:
    """What a Subscription version fixes in a line, in one billing period."""

    name: str
    invoice: str
    account: str  # SubAccountId, SubAccountName, Tags


def _version(cluster: str, period: periods.Period, record: tuple[object, ...]) -> _Version:
    ns, name, labels, own = record
    tags = focus.text(focus.merged_tags(focus_store.strings(labels), focus_store.strings(own)))
    return _Version(
        name=cell(str(name)),
        invoice=cell(periods.invoice_id(cluster, str(ns), period.start, period.label)),
        account=cells(str(ns), str(ns), tags),
    )


def _line(shared: dict[str, str], version: _Version, terms: _Terms, uid: str, source: str) -> str:
    """A key's line template, in `focus.NAMES` order: fixed cells as they are (a `%` doubled),
    per-row cells as `format` placeholders. A price the Offering does not state is the row's
    unit price; a fee has no consumed quantity."""
    unit_price = _arg("unit_price")
    provider = _literal(shared["provider"])
    return ",".join(
        (
            _arg("billed"),  # BilledCost
            _literal(shared["cluster"]),  # BillingAccountId, BillingAccountName
            _arg("currency"),
            _literal(shared["period"]),  # BillingPeriodEnd, BillingPeriodStart
            _literal(terms.charge),
            _arg("charge_end"),
            _arg("charge_start"),
            "" if source == focus.FEE_SOURCE else _arg("quantity"),  # ConsumedQuantity
            _literal(terms.consumed_unit),
            _arg("contracted_cost"),
            unit_price if terms.contracted is None else _literal(terms.contracted),
            _arg("billed"),  # EffectiveCost
            _literal(version.invoice),
            provider,  # InvoiceIssuerName
            _arg("list_cost"),
            unit_price if terms.listed is None else _literal(terms.listed),
            _arg("quantity"),  # PricingQuantity
            _literal(terms.unit),
            provider,  # ProviderName
            provider,  # PublisherName
            _literal(cell(uid)),  # ResourceId
            _literal(version.name),  # ResourceName
            f"Subscription,{focus.SERVICE_CATEGORY}",  # ResourceType, ServiceCategory
            _literal(terms.sku),
            _literal(version.account),
            _literal(cell(source)),
            "",  # x_CorrectedInvoiceId
            _arg("finalized"),
            unit_price,  # x_UnitPrice
        )
    )


def _distinct_periods(hours: list[tuple[dt.datetime, periods.Period]]) -> list[periods.Period]:
    """The billing periods the window's hours fall in, in order."""
    found: dict[dt.datetime, periods.Period] = {}
    for _, period in hours:
        found.setdefault(period.start, period)
    return list(found.values())


def _terms(
    conn: psycopg.Connection[Any], cluster: str, keys: set[tuple[int, int, str]]
) -> dict[tuple[int, int, str], _Terms]:
    offerings = {int(r[0]): r[1:] for r in conn.execute(_OFFERINGS, [sorted({k[0] for k in keys})])}
    books = {
        int(r[0]): focus_store.price_list(r[1], r[2], r[3], r[4:])
        for r in conn.execute(_BOOKS, [sorted({k[1] for k in keys})])
    }
    found = {}
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
        terms = focus.sku_columns(sample)
        found[(offering, book, source)] = _Terms(
            listed=_text(terms.list_price),
            contracted=_text(terms.contracted_price),
            fee_price=terms.fee_price_micros,
            unit=cell(terms.unit),
            consumed_unit=cell(None if sample.is_fee else terms.unit),
            charge=_charge_cells(sample),
            sku=_sku_cells(sample, terms),
        )
    return found


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

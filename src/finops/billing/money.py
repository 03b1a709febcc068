"""Micro-currency: the one representation of money in the product.

Every amount is an `int` of micros (1,000,000 micros = 1.00 of the PriceBook's currency).
PriceBook rates arrive as decimal strings and are parsed digit by digit, so `"0.031"` is
exactly 31000 and never a binary float near it. Anything that is not a whole number of micros
is produced only by usage arithmetic, and it is rounded once, half to even, by `round_half_even`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any, NewType

from finops.api import bodies

Micros = NewType("Micros", int)

MICROS_PER_UNIT = 1_000_000
DECIMALS = 6
# A micro amount must fit PostgreSQL `bigint` (and Kubernetes int64 status fields).
MAX_MICROS = 2**63 - 1

# The PriceBook rate fields in API order; the first one that fails is the one reported.
RATE_FIELDS: tuple[str, ...] = (
    "cpuHour",
    "spotCPUHour",
    "ramGbHour",
    "spotRAMGbHour",
    "pvGbHour",
    "gpuHour",
    "networkGiB",
)

_RATE_PATTERN = re.compile(r"^([0-9]+)(?:\.([0-9]+))?$")


class RateParseError(ValueError):
    """A PriceBook rate that cannot become an exact micro amount.

    The message names the field and the value because it is what a PriceBook's
    `Ready=False, PricebookParseFailed` condition shows to the person who must fix it.
    """

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"rate {field}: cannot parse {value!r}: {reason}")


def parse_rate(field: str, value: object) -> Micros:
    """Parse one decimal-string rate into micros, exactly; the empty string means unset (0).

    Digits past the sixth decimal are refused unless they are all zeros: a rate must be
    a whole number of micros, or the charge would silently differ from what was written.
    """
    if not isinstance(value, str):
        raise RateParseError(field, value, 'a rate must be a decimal string such as "0.031"')
    if value == "":
        return Micros(0)
    match = _RATE_PATTERN.match(value)
    if match is None:
        raise RateParseError(field, value, 'a rate must be a non-negative decimal such as "0.031"')
    whole, frac = match.group(1), match.group(2) or ""
    if len(frac) > DECIMALS and frac[DECIMALS:].strip("0"):
        raise RateParseError(
            field, value, f"more than {DECIMALS} decimal places cannot be expressed in micros"
        )
    frac = frac[:DECIMALS].ljust(DECIMALS, "0")
    micros = int(whole) * MICROS_PER_UNIT + int(frac)
    if micros > MAX_MICROS:
        raise RateParseError(field, value, "too large for a signed 64-bit micro amount")
    return Micros(micros)


def parse_rates(rates: bodies.PriceRatesBody | None) -> dict[str, Micros]:
    """Parse a PriceBook's `spec.rates` block; absent and empty fields are 0 (unset).

    Raises `RateParseError` for the first field, in API order, that does not parse.
    """
    block: Mapping[str, Any] = rates or {}
    return {name: parse_rate(name, block.get(name, "")) for name in RATE_FIELDS}


def round_half_even(amount: Fraction | Decimal | int) -> Micros:
    """Round an exact amount of micros to a whole micro, ties to even (banker's rounding).

    This is the single rounding rule for usage charges; it has no bias over many rows.
    """
    exact = Fraction(amount)
    floor, rest = divmod(exact.numerator, exact.denominator)
    twice = 2 * rest
    if twice > exact.denominator or (twice == exact.denominator and floor % 2 == 1):
        floor += 1
    return Micros(floor)


def to_decimal(amount: Fraction, places: int) -> Decimal:
    """An exact rational shown as a Decimal with `places` decimals, half to even (for storage)."""
    scaled = round_half_even(amount * 10**places)
    digits = tuple(int(c) for c in str(abs(scaled)))
    # Built from its digits so no decimal context can round it.
    return Decimal((1 if scaled < 0 else 0, digits, -places))


def format_units(micros: int) -> str:
    """Micros as currency units for people: `40000000` -> `40.00`, `193326488` -> `193.326488`.

    Integer arithmetic only; at least two decimals, more only when the micros need them, and
    thousands separated by commas as the docs write them (`28,440.00`).
    """
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), MICROS_PER_UNIT)
    digits = f"{frac:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}{whole:,}.{digits}"


# ISO 4217 minor units of the currencies that do not use two decimals; every other code
# (and an unknown or empty one) is shown with two.
_MINOR_UNITS: dict[str, int] = {
    **dict.fromkeys(("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW"), 0),
    **dict.fromkeys(("PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
    "CLF": 4,
    "UYW": 4,
}


def currency_decimals(currency: str) -> int:
    """How many decimals people expect for `currency` (ISO 4217 minor units; default 2)."""
    return _MINOR_UNITS.get(currency.strip().upper(), 2)


def format_money(micros: int, currency: str = "") -> str:
    """Micros as people read money: the currency's fixed decimals, thousands separators.

    One format for every amount in a table, so columns compare at a glance: `193326488`
    USD -> `193.33`, `28440000000` -> `28,440.00`, JPY -> no decimals. The amount is rounded
    half to even for display only. A non-zero amount smaller than the currency's smallest
    unit would read as nothing at all, so it shows as `<0.01` (or `>-0.01`) instead of `0.00`.
    """
    places = currency_decimals(currency)
    rounded = round_half_even(Fraction(micros, 10 ** (DECIMALS - places)))
    if rounded == 0 and micros != 0:
        smallest = f"0.{'1'.rjust(places, '0')}" if places else "1"
        return f"<{smallest}" if micros > 0 else f">-{smallest}"
    sign = "-" if rounded < 0 else ""
    whole, frac = divmod(abs(rounded), 10**places)
    return f"{sign}{whole:,}.{frac:0{places}d}" if places else f"{sign}{whole:,}"

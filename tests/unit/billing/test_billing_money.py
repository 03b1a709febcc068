"""Money: PriceBook rates parse to exact micros; one rounding rule; units for people."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from finops.billing import money


class TestParsingRates:
    @pytest.mark.parametrize(
        ("text", "micros"),
        [
            ("0.031", 31_000),
            ("0.004", 4_000),
            ("0.00012", 120),
            ("1.8", 1_800_000),
            ("1.80", 1_800_000),
            ("0.09", 90_000),
            ("12", 12_000_000),
            ("0.000001", 1),
            ("9223372036854.775807", money.MAX_MICROS),
        ],
    )
    def test_decimal_strings_become_exact_micros(self, text: str, micros: int) -> None:
        assert money.parse_rate("cpuHour", text) == micros

    def test_empty_string_means_unset_and_parses_to_zero(self) -> None:
        assert money.parse_rate("gpuHour", "") == 0

    def test_trailing_zeros_past_six_decimals_are_still_exact(self) -> None:
        assert money.parse_rate("cpuHour", "0.0310000") == 31_000

    def test_a_seventh_significant_decimal_is_refused_naming_field_and_value(self) -> None:
        with pytest.raises(money.RateParseError) as err:
            money.parse_rate("pvGbHour", "0.0000001")
        assert err.value.field == "pvGbHour"
        assert err.value.value == "0.0000001"
        assert "pvGbHour" in str(err.value) and "0.0000001" in str(err.value)
        assert "decimal places" in str(err.value)

    def test_a_value_beyond_signed_64_bit_micros_is_refused(self) -> None:
        with pytest.raises(money.RateParseError) as err:
            money.parse_rate("networkGiB", "9223372036854.775808")
        assert "networkGiB" in str(err.value) and "9223372036854.775808" in str(err.value)
        assert "64-bit" in str(err.value)

    @pytest.mark.parametrize("text", ["-1", "1e3", "1,000", "$1", ".5", "1.", " 1", "0x10"])
    def test_shapes_outside_the_rate_pattern_are_refused(self, text: str) -> None:
        with pytest.raises(money.RateParseError):
            money.parse_rate("cpuHour", text)

    def test_a_number_instead_of_a_string_is_refused(self) -> None:
        with pytest.raises(money.RateParseError):
            money.parse_rate("cpuHour", 5)

    def test_a_whole_book_parses_with_unset_fields_as_zero(self) -> None:
        rates = money.parse_rates({"cpuHour": "0.031", "gpuHour": "1.8", "ramGbHour": ""})
        assert rates["cpuHour"] == 31_000
        assert rates["gpuHour"] == 1_800_000
        assert rates["ramGbHour"] == 0
        assert rates["spotCPUHour"] == 0
        assert set(rates) == set(money.RATE_FIELDS)

    def test_a_book_reports_the_first_failing_field_in_api_order(self) -> None:
        with pytest.raises(money.RateParseError) as err:
            money.parse_rates({"gpuHour": "0.0000001", "cpuHour": "99999999999999"})
        assert err.value.field == "cpuHour"

    @settings(deadline=None)
    @given(st.integers(min_value=0, max_value=money.MAX_MICROS))
    def test_every_micro_amount_round_trips_through_its_decimal_string(self, micros: int) -> None:
        whole, frac = divmod(micros, money.MICROS_PER_UNIT)
        assert money.parse_rate("cpuHour", f"{whole}.{frac:06d}") == micros


class TestRounding:
    @pytest.mark.parametrize(
        ("amount", "expected"),
        [
            (Fraction(1, 2), 0),
            (Fraction(3, 2), 2),
            (Fraction(5, 2), 2),
            (Fraction(7, 2), 4),
            (Fraction(-1, 2), 0),
            (Fraction(-3, 2), -2),
            (Fraction(24999, 10000), 2),
            (Fraction(25001, 10000), 3),
            (Fraction(7), 7),
        ],
    )
    def test_ties_go_to_the_even_micro(self, amount: Fraction, expected: int) -> None:
        assert money.round_half_even(amount) == expected

    @settings(deadline=None)
    @given(
        st.integers(min_value=-(10**20), max_value=10**20),
        st.integers(min_value=1, max_value=10**9),
    )
    def test_rounding_agrees_with_decimal_half_even(self, numerator: int, denominator: int) -> None:
        with localcontext() as ctx:
            ctx.prec = 200
            reference = (Decimal(numerator) / Decimal(denominator)).quantize(
                Decimal(1), rounding=ROUND_HALF_EVEN
            )
        rounded = money.round_half_even(Fraction(numerator, denominator))
        assert rounded == int(reference)
        assert abs(Fraction(rounded) - Fraction(numerator, denominator)) <= Fraction(1, 2)

    def test_quantities_are_shown_as_decimals_without_context_rounding(self) -> None:
        assert money.to_decimal(Fraction(1, 3), 12) == Decimal("0.333333333333")
        big = Fraction(10**30 + 1, 1)
        assert money.to_decimal(big, 12) == Decimal(10**30 + 1)
        assert money.to_decimal(big, 12).as_tuple().exponent == -12


class TestUnitsForPeople:
    @pytest.mark.parametrize(
        ("micros", "text"),
        [
            (40_000_000, "40.00"),
            (193_326_488, "193.326488"),
            (28_440_000_000, "28,440.00"),
            (1, "0.000001"),
            (0, "0.00"),
            (-1_500_000, "-1.50"),
        ],
    )
    def test_micros_read_as_currency_units(self, micros: int, text: str) -> None:
        assert money.format_units(micros) == text

    @settings(deadline=None)
    @given(st.integers(min_value=0, max_value=money.MAX_MICROS))
    def test_formatted_units_parse_back_to_the_same_micros(self, micros: int) -> None:
        assert money.parse_rate("x", money.format_units(micros).replace(",", "")) == micros


class TestOneMoneyFormat:
    @pytest.mark.parametrize(
        ("micros", "currency", "text"),
        [
            (40_000_000, "USD", "40.00"),
            (193_326_488, "USD", "193.33"),
            (28_440_000_000, "USD", "28,440.00"),
            (1_234_567_890_123, "EUR", "1,234,567.89"),
            (0, "USD", "0.00"),
            (-1_500_000, "USD", "-1.50"),
            (15_000, "USD", "0.02"),  # half to even
            (25_000, "USD", "0.02"),
            (1, "USD", "<0.01"),
            (5_000, "USD", "<0.01"),  # rounds to zero, but is not nothing
            (-1, "USD", ">-0.01"),
            (1_234_567_890, "JPY", "1,235"),
            (400_000, "JPY", "<1"),
            (1_234_567, "KWD", "1.235"),
            (300, "kwd", "<0.001"),
            (1_000_000, "", "1.00"),
        ],
    )
    def test_amounts_read_in_the_currencys_fixed_decimals(
        self, micros: int, currency: str, text: str
    ) -> None:
        assert money.format_money(micros, currency) == text

    @settings(deadline=None)
    @given(
        st.integers(min_value=-money.MAX_MICROS, max_value=money.MAX_MICROS),
        st.sampled_from(["USD", "JPY", "KWD", "CLF"]),
    )
    def test_shown_amount_is_within_half_a_minor_unit_and_never_zero_when_it_is_not(
        self, micros: int, currency: str
    ) -> None:
        text = money.format_money(micros, currency)
        places = money.currency_decimals(currency)
        if text.startswith(("<", ">")):
            assert micros != 0
            assert abs(micros) * 2 <= 10 ** (money.DECIMALS - places)
            return
        shown = Decimal(text.replace(",", ""))
        assert shown.as_tuple().exponent == -places
        assert abs(shown * money.MICROS_PER_UNIT - micros) * 2 <= 10 ** (money.DECIMALS - places)
        assert (shown == 0) == (micros == 0)

"""Go-style durations parse exactly as the reference's time.ParseDuration would."""

from __future__ import annotations

import datetime as dt

import pytest

from finops.collection import durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2m", dt.timedelta(minutes=2)),
        ("90s", dt.timedelta(seconds=90)),
        ("1h30m", dt.timedelta(hours=1, minutes=30)),
        ("1.5h", dt.timedelta(hours=1, minutes=30)),
        ("1440m", dt.timedelta(hours=24)),
        ("250ms", dt.timedelta(milliseconds=250)),
        ("0", dt.timedelta(0)),
        ("-1m", -dt.timedelta(minutes=1)),
    ],
)
def test_valid_durations_parse_to_the_exact_timedelta(text: str, expected: dt.timedelta) -> None:
    assert durations.parse(text) == expected


@pytest.mark.parametrize("text", ["", "5", "1d", "m", "1h 30m", "abc", "1.h2"])
def test_invalid_durations_raise_an_error_naming_the_text(text: str) -> None:
    with pytest.raises(durations.DurationError) as exc:
        durations.parse(text)
    assert repr(text) in str(exc.value)


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (dt.timedelta(milliseconds=850), "850ms"),
        (dt.timedelta(seconds=2, milliseconds=500), "2.5s"),
        (dt.timedelta(minutes=1, seconds=2), "1m2s"),
    ],
)
def test_format_seconds_is_short_and_exact(delta: dt.timedelta, text: str) -> None:
    assert durations.format_seconds(delta) == text

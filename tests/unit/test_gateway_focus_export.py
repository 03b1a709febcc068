"""The gateway's FOCUS export helpers: formats, file names, and the body's first chunk."""

from __future__ import annotations

import datetime as dt

import pytest

from finops.gateway import focus_export

START = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
END = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)


def test_csv_and_json_are_the_formats_and_others_are_named_in_the_refusal() -> None:
    assert focus_export.media_type("csv") == "text/csv; charset=utf-8"
    assert focus_export.media_type("json") == "application/json"
    with pytest.raises(ValueError, match="one of csv, json, got 'xlsx'"):
        focus_export.media_type("xlsx")


def test_the_file_name_says_whose_rows_and_which_window() -> None:
    assert (
        focus_export.filename("team-a", START, END, "csv")
        == "focus-team-a-20260401T000000Z-20260501T000000Z.csv"
    )
    assert focus_export.filename(None, START, END, "json").startswith("focus-all-")


def test_the_chunk_read_ahead_goes_first() -> None:
    assert list(focus_export.prepend("head\n", iter(["a\n", "b\n"]))) == ["head\n", "a\n", "b\n"]

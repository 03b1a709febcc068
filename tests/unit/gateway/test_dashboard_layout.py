"""The dashboard API's pure parts: the time axis, dense series, parameters, shipped assets."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from importlib import resources

import pytest

from finops.gateway import budgets as budget_views
from finops.gateway import dashboard, params
from finops.store import dashboard as queries

T0 = dt.datetime(2026, 4, 1, 22, 30, tzinfo=dt.UTC)


def test_the_axis_starts_at_the_bucket_holding_from_and_stops_before_to() -> None:
    hours = dashboard.bucket_axis(T0, T0 + dt.timedelta(hours=2), queries.Step.HOUR)
    assert hours == [T0.replace(minute=0) + dt.timedelta(hours=n) for n in range(3)]
    days = dashboard.bucket_axis(T0, T0 + dt.timedelta(hours=2), queries.Step.DAY)
    assert days == [dt.datetime(2026, 4, 1, tzinfo=dt.UTC), dt.datetime(2026, 4, 2, tzinfo=dt.UTC)]


def test_series_are_dense_per_key_and_currency_with_exact_totals() -> None:
    axis = dashboard.bucket_axis(T0, T0 + dt.timedelta(hours=3), queries.Step.HOUR)
    assert len(axis) == 4  # 22:30 to 01:30 touches four hours
    points = [
        queries.SeriesPoint(axis[0], "cpuHour", "EUR", 5),
        queries.SeriesPoint(axis[2], "cpuHour", "EUR", 7),
        queries.SeriesPoint(axis[1], "cpuHour", "USD", 1),
    ]
    assert dashboard.lay_out(points, axis) == [
        {"key": "cpuHour", "currency": "EUR", "valuesMicros": [5, 0, 7, 0], "totalMicros": 12},
        {"key": "cpuHour", "currency": "USD", "valuesMicros": [0, 1, 0, 0], "totalMicros": 1},
    ]


def test_an_unknown_choice_names_the_allowed_values() -> None:
    assert params.choice({}, "step", queries.Step, queries.Step.HOUR) is queries.Step.HOUR
    assert params.choice({"step": "day"}, "step", queries.Step, queries.Step.HOUR) is (
        queries.Step.DAY
    )
    with pytest.raises(params.BadRequest, match="'step' must be one of hour, day, got 'week'"):
        params.choice({"step": "week"}, "step", queries.Step, queries.Step.HOUR)


def test_the_page_loads_only_packaged_scripts_and_styles() -> None:
    static = resources.files("finops.gateway").joinpath("static")
    page = static.joinpath("index.html").read_text("utf-8")
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources, "the page references no assets"
    for source in sources:
        if source == "data:,":
            continue
        assert "//" not in source, f"{source} is not served by the gateway"
        assert static.joinpath(source.removeprefix("static/")).is_file(), source
    assert "<script>" not in page and "style=" not in page, "inline code would break the CSP"


def test_the_vendored_chart_library_is_the_release_its_readme_names() -> None:
    vendor = resources.files("finops.gateway").joinpath("static/vendor")
    script = vendor.joinpath("chart.umd.js").read_bytes()
    readme = vendor.joinpath("README.md").read_text("utf-8")
    version = re.search(r"Chart\.js (\d+\.\d+\.\d+)", readme)
    digest = re.search(r"sha256 `([0-9a-f]{64})`", readme)
    assert version and digest
    assert f"Chart.js v{version.group(1)}".encode() in script[:200]
    assert hashlib.sha256(script).hexdigest() == digest.group(1)
    assert "MIT License" in vendor.joinpath("LICENSE.chart.js.md").read_text("utf-8")


def test_a_budget_running_total_starts_at_zero_and_ends_with_the_spend_of_the_window() -> None:
    start = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
    hour = dt.timedelta(hours=1)
    instants, totals = budget_views.cumulative(start, start + 3 * hour, [(start + hour, 7)])
    assert instants == [start + n * hour for n in range(4)]
    assert totals == [0, 0, 7, 7]
    assert budget_views.cumulative(start, start, []) == ([start], [0])

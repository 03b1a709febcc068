"""Bodies no real OpenCost sends are refused with the allocation and field named, briefly."""

from __future__ import annotations

import datetime as dt
import email.utils
import json
from typing import Any

import pytest

from finops.opencost import client, errors, parse

HOUR = dt.datetime(2026, 10, 3, 10, tzinfo=dt.UTC)


def alloc(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "ns/web",
        "properties": {"namespace": "ns", "pod": "web", "labels": {"app": "web"}},
        "start": "2026-10-03T10:00:00Z",
        "end": "2026-10-03T11:00:00Z",
        "minutes": 60,
        "cpuCoreHours": 1,
    }
    base.update(fields)
    return base


def rows(text: str) -> list[Any]:
    found = parse.rows(parse.decode(text), cluster="c", aggregation="namespace,pod", hour=HOUR)
    parse.check_hour(found, HOUR)
    return found


def body(item: dict[str, Any], name: str = "ns/web") -> str:
    return json.dumps({"code": 200, "data": [{name: item}]})


@pytest.mark.parametrize(
    ("literal", "item", "field"),
    [
        ("NaN", alloc(cpuCoreHours="@"), "cpuCoreHours"),
        ("Infinity", alloc(ramByteHours="@"), "ramByteHours"),
        (
            "-Infinity",
            alloc(gpuAllocation={"gpuUsageAverage": "@"}),
            "gpuAllocation.gpuUsageAverage",
        ),
    ],
)
def test_a_bare_non_finite_number_names_the_allocation_and_its_field(
    literal: str, item: dict[str, Any], field: str
) -> None:
    text = body(item).replace('"@"', literal)
    with pytest.raises(errors.OpenCostResponseError) as exc:
        rows(text)
    assert f"allocation 'ns/web': `{field}` is {literal}, not a finite number" in str(exc.value)


def test_a_non_finite_constant_outside_any_allocation_is_refused_too() -> None:
    with pytest.raises(errors.OpenCostResponseError, match="constant NaN"):
        parse.decode('{"code":200,"data":[],"extra":NaN}')


def test_a_negative_quantity_names_the_allocation_field_and_value() -> None:
    with pytest.raises(errors.OpenCostResponseError, match=r"'ns/web': `minutes` is negative"):
        rows(body(alloc(minutes=-5)))


def test_zero_and_null_quantities_stay_valid() -> None:
    (row,) = rows(body(alloc(minutes=0, cpuCoreHours=None)))
    assert row.minutes == 0 and row.cpu_core_hours == 0


def test_an_oversized_string_is_refused_and_the_message_stays_short() -> None:
    huge = "x" * (10 * 1024 * 1024)
    with pytest.raises(errors.OpenCostResponseError) as exc:
        rows(body(alloc(properties={"namespace": "ns", "pod": huge})))
    assert "`pod` is 10485760 characters long" in str(exc.value)
    assert len(str(exc.value)) < 500
    with pytest.raises(errors.OpenCostResponseError) as exc:
        rows(body(alloc(), name=huge))
    assert "(10485760 characters)" in str(exc.value) and len(str(exc.value)) < 500


def test_labels_past_the_kubernetes_total_are_refused() -> None:
    labels = {f"k{i}": "v" * 60 for i in range(5000)}
    with pytest.raises(errors.OpenCostResponseError, match=r"`properties\.labels` hold"):
        rows(body(alloc(properties={"namespace": "ns", "labels": labels})))


@pytest.mark.parametrize(
    ("start", "end"),
    [
        ("2026-10-02T10:00:00Z", "2026-10-02T11:00:00Z"),  # a day early
        ("2026-10-03T09:59:00Z", "2026-10-03T10:30:00Z"),  # starts before the hour
        ("2026-10-03T10:30:00Z", "2026-10-03T11:00:01Z"),  # ends after it
        ("2026-10-03T10:40:00Z", "2026-10-03T10:30:00Z"),  # ends before it starts
    ],
)
def test_a_row_outside_the_requested_hour_is_refused(start: str, end: str) -> None:
    with pytest.raises(errors.OpenCostResponseError, match="outside the requested window"):
        rows(body(alloc(start=start, end=end)))


def test_an_error_message_is_clipped() -> None:
    message = parse.error_message(json.dumps({"message": "m" * 100_000}).encode())
    assert message.startswith("mmm") and message.endswith("(100000 characters)")
    assert len(message) < 600


def test_retry_after_reads_seconds_and_http_dates_and_ignores_garbage() -> None:
    assert client.retry_after("7") == 7.0
    assert client.retry_after(None) is None
    assert client.retry_after("soon") is None
    assert client.retry_after("-1") is None
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
    seconds = client.retry_after(email.utils.format_datetime(later, usegmt=True))
    assert seconds is not None and 25 <= seconds <= 31
    past = email.utils.format_datetime(dt.datetime(2000, 1, 1, tzinfo=dt.UTC), usegmt=True)
    assert client.retry_after(past) == 0.0

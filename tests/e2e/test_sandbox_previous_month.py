"""`finops sandbox --previous-month`: the examples charged from the last hours of the previous
month until it has closed, and its statement opened as the sandbox says to.

The sandbox's own services (control plane, PostgreSQL, controller, gateway, replayed OpenCost);
the back-dating and the simulated hours are the sandbox's, so this is what a person sees.
"""

from __future__ import annotations

import datetime as dt
import io
import re
import subprocess
import sys
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from finops.billing import ticks
from finops_devenv import sandbox, sandbox_periods


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[sandbox.Services, str]]:
    out = io.StringIO()
    with sandbox.services(tmp_path_factory.mktemp("sandbox-months"), out) as svc:
        with svc.kube.http() as client:
            for obj in sandbox.load_examples():
                sandbox.apply(client, obj)
        sandbox.wait_for_activation(svc, out)
        sandbox.simulate(svc, 0, out, previous_month=True)
        sandbox_periods.report(svc.dsn, svc.gateway_url, out)
        yield svc, out.getvalue()


def test_the_previous_month_closes_and_the_sandbox_says_where_its_statement_is(
    closed: tuple[sandbox.Services, str],
) -> None:
    svc, printed = closed
    month = ticks.floor_month(dt.datetime.now(dt.UTC)) - dt.timedelta(days=1)
    label = f"{month:%Y-%m}"
    # The Subscriptions were back-dated into the previous month, and said so.
    since = sandbox_periods.activation(dt.datetime.now(dt.UTC))
    assert f"counted as active since {ticks.rfc3339(since)}" in printed
    found = re.search(rf"open in a browser: (\S+/statements/{label})\?format=html", printed)
    assert found, printed
    page = httpx.get(f"{found.group(1)}?format=html", timeout=10)
    assert page.status_code == 200 and "Final" in page.text and "apps-platform" in page.text
    body = httpx.get(found.group(1), timeout=10).json()
    assert body["period"]["closed"] is True and body["period"]["label"] == label
    with psycopg.connect(svc.dsn) as conn:
        row = conn.execute(
            "SELECT sum(amount_micros) FROM subscription_charges WHERE hour < %s",
            (ticks.floor_month(dt.datetime.now(dt.UTC)),),
        ).fetchone()
    assert row is not None and sum(t["totalMicros"] for t in body["totals"]) == row[0] > 0


def test_the_printed_command_writes_the_same_statement(
    closed: tuple[sandbox.Services, str], tmp_path: pytest.TempPathFactory
) -> None:
    _, printed = closed
    command = re.search(r"finops statement (--dsn '[^']+' --period \S+ --namespace \S+)", printed)
    assert command, printed
    dsn = re.search(r"--dsn '([^']+)'", command.group(1))
    args = command.group(1).split("' ", 1)[1].split()
    assert dsn
    out = f"{tmp_path}/statement.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "finops.cli",
            "statement",
            "--dsn",
            dsn.group(1),
            *args,
            "--out",
            out,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    url = re.search(r"open in a browser: (\S+)\?format=html", printed)
    assert url
    with open(out, encoding="utf-8") as f:
        assert f.read() == httpx.get(url.group(1), timeout=10).text

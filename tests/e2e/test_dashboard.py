"""The cost dashboard in a real headless Chromium, over a real gateway, ledger and API server.

The gateway runs with authentication on; tenants are ServiceAccounts whose tokens the API
server issues. Playwright drives Debian's `chromium` (it never downloads a browser). One
screenshot is kept under `tests/.output/` as the run's artifact.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import shutil
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from playwright import sync_api
from tests.e2e import test_gateway as gateway_setup
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger

from finops.store import allocations, mirror, pool
from finops_devenv import controlplane

START = dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
HOURS = 48
HOUR = dt.timedelta(hours=1)
VIEW = "?from=2026-04-01T00:00:00Z&to=2026-04-03T00:00:00Z"
OUTPUT = pathlib.Path(__file__).resolve().parents[1] / ".output"
COLUMNS = ("subscription", "cpuHour", "ramGbHour", "gpuHour", "pvGbHour", "networkGb")
OFFERINGS = {"platform-base": "off-base", "gpu-addon": "off-gpu"}
# Per Subscription of tenant A: its Offering, and micros per hour n for each source it pays.
TENANT_A = {
    "web": (
        "platform-base",
        {
            "subscription": lambda n: 62_500,
            "cpuHour": lambda n: 18_000 + 900 * (n % 24),
            "ramGbHour": lambda n: 9_500 + 300 * (n % 12),
            "pvGbHour": lambda n: 2_400,
            "networkGb": lambda n: 700 * (n % 5),
        },
    ),
    "train": (
        "gpu-addon",
        {"subscription": lambda n: 20_000, "gpuHour": lambda n: 60_000 if 8 <= n % 24 < 18 else 0},
    ),
}
TENANT_B = {"secret-b-app": ("platform-base", {"subscription": lambda n: 999_999})}


def _chromium() -> str:
    found = os.environ.get("FINOPS_CHROMIUM") or shutil.which("chromium")
    if not found:
        if os.environ.get("CI"):
            raise RuntimeError("chromium is missing: tools/setup.sh installs Debian's chromium")
        pytest.skip("chromium is not installed (tools/setup.sh installs it as root)")
    return found


def _write_tenant(
    conn: Any, namespace: str, subscriptions: dict[str, Any], offerings: dict[str, int]
) -> list[charge_rows.ChargeRow]:
    rows = []
    for name, (offering, sources) in subscriptions.items():
        uid = f"{namespace}-{name}"
        version = mirror.upsert_subscription_version(
            conn,
            cluster="default",
            uid=uid,
            namespace=namespace,
            name=name,
            generation=1,
            resource_version="1",
            spec={"offeringRef": {"name": offering}},
            namespace_labels={"kubernetes.io/metadata.name": namespace},
        )
        for n in range(HOURS):
            for source, amount in sources.items():
                micros = amount(n)
                rows.append(
                    charge_rows.ChargeRow(
                        "default", uid, START + n * HOUR, source, Decimal(1), micros, micros,
                        "EUR", n < HOURS - 2, offerings[offering], version,
                    )
                )  # fmt: skip
    oracle_ledger.upsert(conn, rows)
    return rows


@pytest.fixture
def tenants(
    kube: controlplane.ControlPlane, kube_namespace: str, ledger_dsn: str
) -> dict[str, Any]:
    """Two days of EUR charges in namespaces A and B; a token for A's reader and a stranger."""
    ns_a, ns_b = kube_namespace, f"t-{uuid.uuid4().hex[:10]}"
    kube.create_namespace(ns_b)
    with pool.connect(ledger_dsn) as conn:
        allocations.ensure_pricebook(
            conn,
            cluster="default",
            namespace="finops-operator-system",
            name="eu-standard",
            uid="pb-eu",
            currency="EUR",
            rates={"cpuHour": 31_000},
        )
        offerings = {
            name: mirror.upsert_offering_version(
                conn,
                cluster="default",
                uid=uid,
                namespace="finops-operator-system",
                name=name,
                generation=1,
                resource_version="1",
                spec={"pricing": {}},
            )
            for name, uid in OFFERINGS.items()
        }
        rows_a = _write_tenant(conn, ns_a, TENANT_A, offerings)
        _write_tenant(conn, ns_b, TENANT_B, offerings)
        conn.commit()
    reader = gateway_setup._token_for(kube, ns_a, "tenant-a")
    stranger = gateway_setup._token_for(kube, ns_a, "stranger")
    gateway_setup._grant_subscription_reader(kube, ns_a, ns_a)
    return {"a": ns_a, "b": ns_b, "rows_a": rows_a, "reader": reader, "stranger": stranger}


@pytest.fixture
def gateway(
    kube: controlplane.ControlPlane, ledger_dsn: str, tenants: dict[str, Any]
) -> Iterator[str]:
    with gateway_setup._gateway(kube, ledger_dsn, auth=None) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        yield launched
        launched.close()


class Visit:
    """One browser tab on the dashboard: console errors and every API body it received."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.bodies: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("response", self._keep)

    def _keep(self, response: Any) -> None:
        if "/api/" in response.url:
            self.bodies.append(response.text())

    def open(self, url: str, state: str = "ready") -> None:
        self.page.goto(url)
        self.wait_for(state)

    def wait_for(self, state: str) -> None:
        self.page.wait_for_selector(f"body[data-state='{state}']", timeout=30_000)

    def datasets(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.page.evaluate(
            """() => {
                const chart = Chart.getChart(document.getElementById('chart'));
                if (!chart) return [];
                return chart.data.datasets.map(d => ({key: d.key, micros: d.micros}));
            }"""
        )
        return found

    def column(self, selector: str) -> list[str]:
        texts: list[str] = self.page.locator(selector).all_inner_texts()
        return texts

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def visit(browser: Any) -> Iterator[Visit]:
    tab = Visit(browser)
    yield tab
    tab.close()


def _dense(rows: list[charge_rows.ChargeRow], key: Any, step: dt.timedelta) -> dict[str, list[int]]:
    buckets = int(HOURS * HOUR / step)
    series: dict[str, list[int]] = {}
    for row in rows:
        values = series.setdefault(key(row), [0] * buckets)
        values[int((row.hour - START) / step)] += row.amount_micros
    return series


def test_the_dashboard_draws_exactly_the_ledger_of_the_tenant_without_console_errors(
    gateway: str, tenants: dict[str, Any], visit: Visit
) -> None:
    a, rows = tenants["a"], tenants["rows_a"]
    visit.open(f"{gateway}/{VIEW}&step=hour&group=source#token={tenants['reader']}")

    by_source = _dense(rows, lambda r: r.source, HOUR)
    got = {d["key"]: d["micros"] for d in visit.datasets()}
    assert got == by_source
    assert visit.page.locator("#currency").inner_text() == "EUR"
    assert visit.column("#namespace option") == ["All I may read", a]
    total = sum(r.amount_micros for r in rows)
    footer = visit.column("#breakdown tfoot td")
    assert footer[0] == "Total (EUR)"
    assert footer[-1] == f"{Decimal(total) / 1_000_000:,.2f}"  # rounded half to even
    exact = visit.page.eval_on_selector_all(
        "#breakdown tfoot td.num", "cells => cells.map(c => Number(c.dataset.micros))"
    )
    assert exact == [*(sum(by_source[s]) for s in COLUMNS), total]
    shown = visit.page.eval_on_selector_all(
        "#breakdown td[data-micros]",
        "cells => cells.map(c => [Number(c.dataset.micros), c.innerText])",
    )
    assert len(shown) == 3 + 6 + 7  # train: fee, GPU, total; web: five meters, total; footer
    for micros, text in shown:
        assert text == f"{Decimal(micros) / 1_000_000:,.2f}", (micros, text)
    offerings = visit.column("#breakdown tbody td:nth-child(2)")
    assert offerings == ["finops-operator-system/gpu-addon", "finops-operator-system/platform-base"]
    assert "token=" not in visit.page.url

    OUTPUT.mkdir(exist_ok=True)
    visit.page.screenshot(path=str(OUTPUT / "dashboard.png"), full_page=True)

    visit.page.select_option("#group", "subscription")
    visit.wait_for("ready")
    visit.page.select_option("#step", "day")
    visit.wait_for("ready")
    by_subscription = _dense(rows, lambda r: f"{a}/{r.subscription_uid[len(a) + 1 :]}", 24 * HOUR)
    assert {d["key"]: d["micros"] for d in visit.datasets()} == by_subscription
    assert visit.errors == []


def test_a_tenant_sees_nothing_of_a_namespace_it_may_not_read(
    gateway: str, tenants: dict[str, Any], visit: Visit, browser: Any
) -> None:
    b = tenants["b"]
    visit.open(f"{gateway}/{VIEW}&namespace={b}#token={tenants['reader']}", state="error")
    assert "Not allowed to read namespace" in visit.page.locator("#message").inner_text()
    assert visit.datasets() == []
    assert visit.column("#breakdown tbody td") == []

    stranger = Visit(browser)
    try:
        stranger.open(f"{gateway}/{VIEW}#token={tenants['stranger']}")
        assert stranger.column("#namespace option") == ["All I may read"]
        assert stranger.datasets() == []
        assert stranger.column("#breakdown tbody td") == ["No charges in this window."]
        assert stranger.errors == []
        seen = visit.bodies + stranger.bodies
    finally:
        stranger.close()
    assert seen, "the page made no API calls"
    for body in seen:
        assert b not in body and "secret-b-app" not in body


def test_a_person_passes_a_token_once_and_the_tab_keeps_it(
    gateway: str, tenants: dict[str, Any], visit: Visit
) -> None:
    visit.open(f"{gateway}/{VIEW}", state="needs-token")
    assert visit.page.locator("#token-form").is_visible()
    assert visit.datasets() == []

    visit.page.fill("#token-input", tenants["reader"])
    visit.page.click("#token-form button[type=submit]")
    visit.wait_for("ready")
    assert {d["key"] for d in visit.datasets()} == {r.source for r in tenants["rows_a"]}

    visit.page.reload()
    visit.wait_for("ready")
    assert visit.page.locator("#token-form").is_hidden()
    assert len(visit.datasets()) == len({r.source for r in tenants["rows_a"]})


def test_the_dashboard_api_refuses_anonymous_callers_and_bad_parameters_with_reasons(
    gateway: str, tenants: dict[str, Any]
) -> None:
    reader = {"Authorization": f"Bearer {tenants['reader']}"}
    window = {"from": "2026-04-01T00:00:00Z", "to": "2026-04-03T00:00:00Z"}
    series = f"{gateway}/api/v1/cost-series"
    assert httpx.get(f"{gateway}/api/v1/namespaces").status_code == 401
    assert httpx.get(series, params=window).status_code == 401

    cases = {
        "'step' must be one of hour, day": {"step": "week"},
        "'groupBy' must be one of source, subscription": {"groupBy": "offering"},
        "not a valid namespace name": {"namespace": "Not_A_Namespace"},
        "at most 62 days; use step=day": {"from": "2026-01-01T00:00:00Z"},
    }
    for reason, bad in cases.items():
        got = httpx.get(series, params={**window, **bad}, headers=reader)
        assert got.status_code == 400, got.text
        assert reason in got.json()["error"]

    daily = httpx.get(
        series, params={**window, "from": "2026-01-01T00:00:00Z", "step": "day"}, headers=reader
    )
    assert daily.status_code == 200, daily.text
    body = daily.json()
    assert body["namespaces"] == [tenants["a"]] and body["currency"] == "EUR"
    assert len(body["buckets"]) == 92
    totals = {s["key"]: s["totalMicros"] for s in body["series"]}
    assert totals == {
        source: sum(r.amount_micros for r in tenants["rows_a"] if r.source == source)
        for source in COLUMNS
    }


def test_the_page_and_its_chart_library_come_from_the_gateway_under_a_strict_policy(
    gateway: str,
) -> None:
    page = httpx.get(f"{gateway}/")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy
    assert 'src="static/vendor/chart.umd.js"' in page.text
    library = httpx.get(f"{gateway}/static/vendor/chart.umd.js")
    assert library.status_code == 200
    assert "javascript" in library.headers["content-type"]
    assert library.text.startswith("/*!\n * Chart.js v4.6.1")

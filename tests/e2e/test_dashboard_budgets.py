"""The dashboard's budget view in a real headless Chromium, over a real gateway, ledger and API
server, with the Budgets judged by the charge run's own evaluation step.

Two tenants each have a Budget and ten days of April charges in the ledger; the evaluation
step (`finops.jobs.budgets.evaluate`, as the charge run calls it) judges both against the
ledger at 10 April 05:00 and writes their status. Tenant A's reader must see A's Budget as
its status says (running total of the spend, the forecast to 1 May, the amount) and nothing of
B's. A screenshot of the view is kept under `tests/.output/` (the one in `docs/` comes from it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from tests.e2e import test_dashboard as page
from tests.e2e import test_gateway as gateway_setup
from tests.e2e.test_dashboard import browser  # noqa: F401  (its Chromium, a fixture)
from tests.oracle import charge_rows
from tests.oracle import ledger as oracle_ledger

from finops.api import bodies
from finops.collection import charges as charge_rules
from finops.jobs import budgets as budget_job
from finops.store import allocations, mirror, pool
from finops_devenv import controlplane

UTC = dt.UTC
HOUR = dt.timedelta(hours=1)
APRIL = (dt.datetime(2026, 4, 1, tzinfo=UTC), dt.datetime(2026, 5, 1, tzinfo=UTC))
AT = dt.datetime(2026, 4, 10, 5, tzinfo=UTC)
GROUP = "/apis/finops.stakater.com/v1alpha1"
FEE = {"priceMicros": 62_500, "tickAlignment": "ActivatedAt", "period": "1h"}


def _subscription(namespace: str, name: str) -> charge_rules.SubscriptionState:
    return charge_rules.SubscriptionState(
        uid=f"{namespace}-{name}", namespace=namespace, name=name, generation=1,
        resource_version="1", spec={"offeringRef": {"name": "base", "namespace": "ops"}},
        activated_at=APRIL[0], deactivated_at=None, deleting=False, finalizers=(),
        offering_namespace="ops", offering_name="base",
    )  # fmt: skip


def _seed(dsn: str, namespace: str, names: list[str]) -> list[budget_job.Billed]:
    """Fee rows as the charge run writes them and some CPU usage, through hour AT, for each
    Subscription; returns them with their terms, as the charge run hands them over."""
    billed: list[budget_job.Billed] = []
    with pool.connect(dsn) as conn:
        allocations.ensure_pricebook(
            conn, cluster="default", namespace="ops", name="eu", uid="pb-eu",
            currency="EUR", rates={"cpuHour": 31_000},
        )  # fmt: skip
        offering = mirror.upsert_offering_version(
            conn, cluster="default", uid="off-base", namespace="ops", name="base",
            generation=1, resource_version="1", spec={"pricing": {"subscriptionFee": FEE}},
        )  # fmt: skip
        rows = []
        for n, name in enumerate(names):
            state = _subscription(namespace, name)
            terms = charge_rules.terms_for(state, {"pricing": {"subscriptionFee": FEE}})
            billed.append((state, terms))
            version = mirror.upsert_subscription_version(
                conn, cluster="default", uid=state.uid, namespace=namespace, name=name,
                generation=1, resource_version="1", spec=dict(state.spec), namespace_labels={},
            )  # fmt: skip
            assert terms.fee is not None
            for hour, fee in terms.fee.hourly(APRIL[0], AT + HOUR):
                cpu = 15_000 + 700 * (hour.hour % 9) + 4_000 * n
                for source, micros in (("subscription", fee), ("cpuHour", cpu)):
                    rows.append(
                        charge_rows.ChargeRow(
                            "default", state.uid, hour, source, Decimal(1), micros, micros,
                            "EUR", hour < AT, offering, version,
                        )
                    )  # fmt: skip
        oracle_ledger.upsert(conn, rows)
        conn.commit()
    return billed


def _budget(kube: controlplane.ControlPlane, namespace: str, name: str, amount: str) -> None:
    body = {
        "apiVersion": "finops.stakater.com/v1alpha1",
        "kind": "Budget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"amount": amount, "currency": "EUR", "thresholds": [
            {"percent": 50}, {"percent": 100, "basis": "Forecast"}]},
    }  # fmt: skip
    with kube.http() as client:
        resp = client.post(f"{GROUP}/namespaces/{namespace}/budgets", json=body)
    assert resp.status_code == 201, resp.text


def _evaluate(kube: controlplane.ControlPlane, dsn: str, namespace: str, billed: Any) -> None:
    async def go() -> budget_job.BudgetReport:
        client = AsyncClient(config=KubeConfig.from_file(str(kube.kubeconfig)))
        try:
            return await budget_job.evaluate(
                client, dsn=dsn, cluster="default", scheduled=AT, now=AT, billed=billed,
                namespace=namespace,
            )  # fmt: skip
        finally:
            await client.close()

    # In a thread of its own: the module's browser runs an event loop in this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool_:
        report = pool_.submit(asyncio.run, go()).result()
    assert report.errors == {} and report.evaluated == 1 and report.statuses_written == 1


def _read_budget(kube: controlplane.ControlPlane, namespace: str, name: str) -> bodies.BudgetBody:
    with kube.http() as client:
        resp = client.get(f"{GROUP}/namespaces/{namespace}/budgets/{name}")
    assert resp.status_code == 200, resp.text
    found: bodies.BudgetBody = resp.json()
    return found


@pytest.fixture
def tenants(
    kube: controlplane.ControlPlane, kube_namespace: str, ledger_dsn: str
) -> dict[str, Any]:
    ns_a, ns_b = kube_namespace, f"t-{uuid.uuid4().hex[:10]}"
    kube.create_namespace(ns_b)
    billed_a = _seed(ledger_dsn, ns_a, ["web", "train"])
    billed_b = _seed(ledger_dsn, ns_b, ["secret-b-app"])
    _budget(kube, ns_a, "team-a-monthly", "60")
    _budget(kube, ns_b, "secret-b-budget", "5000")
    _evaluate(kube, ledger_dsn, ns_a, billed_a)
    _evaluate(kube, ledger_dsn, ns_b, billed_b)
    reader = gateway_setup._token_for(kube, ns_a, "tenant-a")
    gateway_setup._grant_subscription_reader(kube, ns_a, ns_a)
    with pool.connect(ledger_dsn) as conn:
        spent = conn.execute(
            """SELECT hour, sum(amount_micros) FROM subscription_charges
               WHERE subscription_uid LIKE %s GROUP BY hour ORDER BY hour""",
            (f"{ns_a}-%",),
        ).fetchall()
    return {
        "a": ns_a, "b": ns_b, "reader": reader, "hourly_a": [int(m) for _, m in spent],
        "budget_a": _read_budget(kube, ns_a, "team-a-monthly"),
    }  # fmt: skip


@pytest.fixture
def gateway(
    kube: controlplane.ControlPlane, ledger_dsn: str, tenants: dict[str, Any]
) -> Iterator[str]:
    with gateway_setup._gateway(kube, ledger_dsn, auth=None) as url:
        yield url


def test_the_budget_view_draws_the_spend_forecast_and_amount_the_status_says(
    gateway: str,
    tenants: dict[str, Any],
    browser: Any,  # noqa: F811
) -> None:
    status = tenants["budget_a"]["status"]
    assert status["state"] == "ForecastExceeded"  # the scenario: over 60.00 by 1 May
    visit = page.Visit(browser)
    try:
        visit.open(f"{gateway}/?range=custom&from=2026-04-01T00:00:00Z&to=2026-04-11T00:00:00Z"
                   f"#token={tenants['reader']}")  # fmt: skip
        rows = visit.page.eval_on_selector_all(
            "#budgets tbody tr", "rows => rows.map(r => r.dataset.budget)"
        )
        assert rows == [f"{tenants['a']}/team-a-monthly"]
        cells = visit.column("#budgets tbody td")
        assert cells[2:] == [
            "Monthly", "60.00", status["spent"], status["forecast"], "Forecast over budget",
            "50% actual, 100% forecast",
        ]  # fmt: skip
        found = visit.page.evaluate(
            """() => Chart.getChart(document.getElementById('budget-chart')).data.datasets
                     .map(d => ({key: d.key, micros: d.micros}))"""
        )
        lines = {d["key"]: d["micros"] for d in found}
        running = [0]
        for micros in tenants["hourly_a"]:
            running.append(running[-1] + micros)
        hours_in_april = 30 * 24
        assert len(lines["spent"]) == len(lines["budget"]) == hours_in_april + 1
        assert lines["spent"][: len(running)] == running
        assert running[-1] == status["spentMicros"]
        assert set(lines["spent"][len(running) :]) == {None}
        assert set(lines["budget"]) == {60_000_000}
        forecast = {i: m for i, m in enumerate(lines["forecast"]) if m is not None}
        assert forecast == {len(running) - 1: status["spentMicros"],
                            hours_in_april: status["forecastMicros"]}  # fmt: skip
        text = visit.page.locator("#budget-state").inner_text()
        assert text.startswith(f"Forecast over budget: spent {status['spent']} EUR so far")
        assert f"forecast {status['forecast']} EUR by 2026-05-01" in text
        assert "secret-b" not in visit.page.content()
        page.OUTPUT.mkdir(exist_ok=True)
        visit.page.locator("#budgets-card").screenshot(path=str(page.OUTPUT / "budgets.png"))
        assert visit.errors == []
    finally:
        visit.close()


def test_the_budget_api_is_scoped_to_the_namespaces_a_caller_may_read(
    gateway: str, tenants: dict[str, Any]
) -> None:
    reader = {"Authorization": f"Bearer {tenants['reader']}"}
    a, b = tenants["a"], tenants["b"]
    assert httpx.get(f"{gateway}/api/v1/budgets").status_code == 401
    listed = httpx.get(f"{gateway}/api/v1/budgets", headers=reader)
    assert listed.status_code == 200, listed.text
    assert [(i["namespace"], i["name"]) for i in listed.json()["items"]] == [(a, "team-a-monthly")]
    named = httpx.get(f"{gateway}/api/v1/budgets", params={"namespace": b}, headers=reader)
    assert named.status_code == 403
    theirs = httpx.get(f"{gateway}/api/v1/namespaces/{b}/budgets/secret-b-budget", headers=reader)
    assert theirs.status_code == 403 and "secret" not in theirs.text
    missing = httpx.get(f"{gateway}/api/v1/namespaces/{a}/budgets/nope", headers=reader)
    assert missing.status_code == 404 and "no evaluated Budget nope" in missing.json()["error"]
    mine = httpx.get(f"{gateway}/api/v1/namespaces/{a}/budgets/team-a-monthly", headers=reader)
    body = mine.json()
    status = tenants["budget_a"]["status"]
    assert (body["spentMicros"], body["forecastMicros"], body["state"]) == (
        status["spentMicros"], status["forecastMicros"], status["state"]
    )  # fmt: skip
    assert body["cumulativeMicros"][-1] == status["spentMicros"]
    assert body["instants"][0] == "2026-04-01T00:00:00Z"
    assert body["instants"][-1] == "2026-04-10T06:00:00Z"
    assert [t["crossedAt"] for t in body["thresholds"]] == ["2026-04-10T05:00:00Z"] * 2

"""The whole product, headless: the sandbox's services and examples, then the documented
uninstall order, ending with nothing stranded.

Everything is real (kube-apiserver, PostgreSQL, the controller as a process with its
webhooks, both job modes); only OpenCost is a replay of real captures. The sandbox starts its
own control plane, so nothing here touches the session's shared API server.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal

import httpx
import psycopg
import pytest
from prometheus_client import parser
from tests.e2e._support import by_name, condition, items, wait_until

from finops_devenv import sandbox

GROUP = "/apis/finops.stakater.com/v1alpha1"
HOURS = 2


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sandbox.Services]:
    out = io.StringIO()
    with sandbox.services(tmp_path_factory.mktemp("sandbox"), out) as svc:
        with svc.kube.http() as client:
            for obj in sandbox.load_examples():
                sandbox.apply(client, obj)
        sandbox.wait_for_activation(svc, out)
        sandbox.simulate_history(svc, HOURS, out)
        yield svc


def test_the_examples_become_ready_and_active(services: sandbox.Services) -> None:
    books = by_name(services, "pricebooks")
    assert books["onprem-pricing"]["status"]["active"] is True
    assert condition(books["onprem-pricing"], "Ready")["status"] == "True"
    for offering in items(services, "offerings"):
        assert condition(offering, "Ready")["status"] == "True", offering["metadata"]["name"]
    for sub in items(services, "subscriptions"):
        assert condition(sub, "Active") == condition(sub, "Active") | {
            "status": "True",
            "reason": "ActivationSucceeded",
        }
        assert sub["status"]["activatedAt"]
    provider = by_name(services, "finopsproviders")["default"]
    assert condition(provider, "Ready")["status"] == "True"


def test_each_costjob_owns_a_cronjob_in_its_namespace(services: sandbox.Services) -> None:
    with services.kube.http() as client:
        for name, mode in (
            ("resource-cost-collection", "--mode=cronjob"),
            ("subscription-charge-collection", "--mode=collectionjob"),
        ):
            cron = client.get(
                f"/apis/batch/v1/namespaces/{sandbox.SYSTEM_NS}/cronjobs/{name}-cronjob"
            ).json()
            assert cron["spec"]["schedule"] == "0 * * * *"
            owner = cron["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"], owner["controller"]) == ("CostJob", name, True)
            container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
            assert mode in container["args"]


def test_both_collection_jobs_record_their_runs_on_their_costjobs(
    services: sandbox.Services,
) -> None:
    jobs = by_name(services, "costjobs")
    for name in ("resource-cost-collection", "subscription-charge-collection"):
        status = jobs[name]["status"]
        assert status["lastExecutionStatus"] == "Success", name
        assert len(status["executionHistory"]) == HOURS + 1, name
        assert status["lastSuccessfulExecutionTime"] == status["lastExecutionTime"]


def test_the_ledger_and_status_costs_agree_to_the_micro(services: sandbox.Services) -> None:
    subs = by_name(services, "subscriptions")
    with psycopg.connect(services.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM provider_allocations").fetchone() != (0,)
        ledger = dict(
            conn.execute(
                "SELECT subscription_uid::text, sum(amount_micros) FROM subscription_charges "
                "WHERE finalized GROUP BY 1"
            ).fetchall()
        )
    platform = subs["apps-platform"]
    month = next(b for b in platform["status"]["costs"] if b["granularity"] == "month")
    # ActivatedAt 1h at 40.00: one tick per full hour since activation, all settled in the
    # finalized hours before the last scheduled hour.
    assert month.get("current", 0) == ledger.get(platform["metadata"]["uid"], 0)
    assert month.get("current", 0) % 40_000_000 == 0
    assert month.get("current", 0) >= 40_000_000 * (HOURS - 1)
    assert condition(platform, "CostsResolved")["reason"] == "FromDB"
    for sub in subs.values():
        assert [b["granularity"] for b in sub["status"]["costs"]] == ["hour", "day", "month"]
    observability = subs["apps-observability"]
    month = next(b for b in observability["status"]["costs"] if b["granularity"] == "month")
    meters = {m["name"] for m in month.get("breakdown", [])}
    assert {"subscription", "ramGbHour", "pvGbHour"} <= meters


def test_finops_export_focus_writes_the_ledger_as_a_csv_spreadsheets_open(
    services: sandbox.Services, tmp_path: pathlib.Path
) -> None:
    now = dt.datetime.now(dt.UTC)
    window = [(now - dt.timedelta(days=2)).isoformat(), (now + dt.timedelta(days=2)).isoformat()]
    out = tmp_path / "focus.csv"
    argv = [sys.executable, "-m", "finops.cli", "export", "focus", "--dsn", services.dsn]
    argv += ["--from", window[0], "--to", window[1], "--out", str(out), "--include-unsettled"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with out.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with psycopg.connect(services.dsn) as conn:
        total = conn.execute(
            "SELECT sum(amount_micros), count(*) FROM subscription_charges "
            "WHERE hour >= %s AND hour < %s"
            # Fee hours that closed no tick charged nothing and are not exported.
            " AND NOT (source = 'subscription' AND quantity = 0 AND amount_micros = 0)",
            window,
        ).fetchone()
    assert total is not None and total[1] == len(rows) > 0
    assert sum(Decimal(r["BilledCost"]) for r in rows).scaleb(6) == total[0]
    assert {r["ServiceName"] for r in rows} == {
        o["metadata"]["name"] for o in items(services, "offerings")
    }
    assert {r["BillingCurrency"] for r in rows} == {"USD"}


def metric(text: str, metric_name: str, **labels: str) -> float | None:
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == metric_name and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                return float(sample.value)
    return None


def test_metrics_expose_costs_of_the_run(services: sandbox.Services) -> None:
    subs = by_name(services, "subscriptions")
    platform = subs["apps-platform"]
    month = next(b for b in platform["status"]["costs"] if b["granularity"] == "month")
    labels = {"granularity": "month", "meter": "subscription", "subscription": "apps-platform"}

    def scrape() -> str:
        return httpx.get(f"{services.metrics_url}/metrics", timeout=5).text

    # The controller's watch cache sees the charge job's status write a moment later.
    wait_until(
        "cost metrics",
        lambda: (
            metric(scrape(), "finops_subscription_cost_current_micros", **labels)
            == month["current"]
        ),
    )
    text = scrape()
    assert metric(text, "finops_subscription_cost_projected_micros", **labels) == month["projected"]
    assert metric(text, "finops_pricebook_active_info", name="onprem-pricing", currency="USD") == 1
    assert (
        metric(text, "finops_costjob_last_execution_success", costjob="resource-cost-collection")
        == 1
    )
    charge_runs = metric(
        text, "finops_costjob_last_execution_success", costjob="subscription-charge-collection"
    )
    assert charge_runs == 1
    reconciled = metric(text, "controller_runtime_reconcile_total", controller="subscription")
    assert reconciled is not None and reconciled > 0


def test_the_printed_gateway_urls_serve_the_ledgers_costs(services: sandbox.Services) -> None:
    now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    window = (now - dt.timedelta(days=1), now + dt.timedelta(days=1))
    out = io.StringIO()
    sandbox.report(services, out, window)
    printed = out.getvalue()
    assert f"gateway: {services.gateway_url}/" in printed and "ENABLE_AUTH=false" in printed
    urls = re.findall(r"curl '([^']+)'", printed)
    assert [u.split("/namespaces/")[1].split("/")[0] for u in urls] == ["team-apps"]
    with psycopg.connect(services.dsn) as conn:
        rows = conn.execute(
            "SELECT subscription_uid::text, source, sum(amount_micros), "
            "coalesce(sum(amount_micros) FILTER (WHERE finalized), 0) "
            "FROM subscription_charges WHERE hour >= %s AND hour < %s GROUP BY 1, 2",
            window,
        ).fetchall()
    ledger = {(uid, source): (int(total), int(final)) for uid, source, total, final in rows}
    assert sum(total for total, _ in ledger.values()) > 0
    got = httpx.get(urls[0], timeout=10)
    assert got.status_code == 200, got.text
    served = {
        (i["subscriptionUid"], i["source"]): (i["totalMicros"], i["finalizedMicros"])
        for i in got.json()["items"]
    }
    assert served == ledger


def test_the_simulated_hours_end_with_the_current_hour_and_the_month_is_charged(
    services: sandbox.Services,
) -> None:
    now = dt.datetime.now(dt.UTC)
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    with psycopg.connect(services.dsn) as conn:
        first, last = conn.execute(
            "SELECT min(hour), max(hour) FROM subscription_charges"
        ).fetchone() or (None, None)
        collected = conn.execute("SELECT max(hour) FROM provider_allocations").fetchone()
    assert first is not None and first <= month_start
    # The last run is the current hour's (allowing for an hour turning during the tests).
    assert collected is not None and now - collected[0] < dt.timedelta(hours=2)
    assert last == collected[0]
    # What the dashboard's default view ("last 7 days", ending at the next whole hour) asks.
    end = now.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    window = {"from": (end - dt.timedelta(days=7)).isoformat(), "to": end.isoformat()}
    shown = httpx.get(f"{services.gateway_url}/api/v1/cost-series", params=window, timeout=10)
    assert shown.status_code == 200, shown.text
    with psycopg.connect(services.dsn) as conn:
        (total,) = conn.execute(
            "SELECT sum(amount_micros) FROM subscription_charges WHERE hour >= %s AND hour < %s",
            (end - dt.timedelta(days=7), end),
        ).fetchone() or (0,)
    assert sum(s["totalMicros"] for s in shown.json()["series"]) == total > 0
    assert shown.json()["series"][0]["valuesMicros"][-2:] != [0, 0]


def test_the_example_budget_is_forecast_to_go_over_and_says_so_everywhere(
    services: sandbox.Services,
) -> None:
    budget = by_name(services, "budgets")["apps-monthly"]
    status = budget["status"]
    assert status["forecastMicros"] > status["amountMicros"] == 25_000_000_000
    assert status["state"] in ("ForecastExceeded", "Exceeded")
    assert condition(budget, "ForecastExceeded")["status"] == "True"
    assert (100, "Forecast") in {(t["percent"], t["basis"]) for t in status["thresholds"]}
    assert status["subscriptions"] == 3
    with services.kube.http() as client:
        events = client.get(
            "/api/v1/namespaces/team-apps/events",
            params={"fieldSelector": "involvedObject.kind=Budget"},
        ).json()["items"]
    assert len(events) == len(status["thresholds"])
    labels = {"namespace": "team-apps", "budget": "apps-monthly"}

    def scrape() -> str:
        return httpx.get(f"{services.metrics_url}/metrics", timeout=5).text

    wait_until(
        "budget metrics",
        lambda: (
            metric(scrape(), "finops_budget_forecast_micros", **labels) == status["forecastMicros"]
        ),
    )
    text = scrape()
    assert metric(text, "finops_budget_spent_micros", **labels) == status["spentMicros"]
    assert metric(text, "finops_budget_amount_micros", **labels) == status["amountMicros"]
    listed = httpx.get(f"{services.gateway_url}/api/v1/budgets", timeout=10).json()["items"]
    assert [(i["name"], i["forecastMicros"], i["state"]) for i in listed] == [
        ("apps-monthly", status["forecastMicros"], status["state"])
    ]
    out = io.StringIO()
    sandbox.report(services, out, (dt.datetime.now(dt.UTC), dt.datetime.now(dt.UTC)))
    line = next(r for r in out.getvalue().splitlines() if r.startswith("team-apps    apps-monthly"))
    assert line.split()[-3:] == [status["spent"], status["forecast"], status["state"]]


def test_uninstall_in_the_documented_order_strands_nothing(services: sandbox.Services) -> None:
    with services.kube.http() as client:
        # 1. Subscriptions: deleted, wound down by the controller, released by a charge run.
        for sub in items(services, "subscriptions"):
            meta = sub["metadata"]
            client.delete(f"{GROUP}/namespaces/{meta['namespace']}/subscriptions/{meta['name']}")
        wait_until(
            "Deleting=False WaitingForCollectionJob",
            lambda: all(
                condition(s, "Deleting").get("reason") == "WaitingForCollectionJob"
                for s in items(services, "subscriptions")
            ),
        )
        assert items(services, "subscriptions"), "only the charge job may release them"
        # app-hosting's DayBoundary fee snaps its deactivation to the next midnight: its
        # charges settle once a run is scheduled after that hour has closed.
        now = dt.datetime.now(dt.UTC)
        after_midnight = (now + dt.timedelta(days=1)).replace(hour=1, minute=0, second=0)
        offset = math.ceil((after_midnight - now) / dt.timedelta(hours=1))
        sandbox.simulate_hours(services, 0, io.StringIO(), start_offset=offset)
        assert items(services, "subscriptions") == []

        # 2. Offerings: the webhook allows it now; the controller drops its finalizer.
        for offering in items(services, "offerings"):
            meta = offering["metadata"]
            resp = client.delete(f"{GROUP}/namespaces/{meta['namespace']}/offerings/{meta['name']}")
            assert resp.status_code == 200, resp.text
        wait_until("offerings gone", lambda: items(services, "offerings") == [])

        # 3. CostJobs, PriceBooks, FinOpsProvider: no finalizers.
        for plural in ("costjobs", "pricebooks"):
            for obj in items(services, plural):
                meta = obj["metadata"]
                client.delete(f"{GROUP}/namespaces/{meta['namespace']}/{plural}/{meta['name']}")
        client.delete(f"{GROUP}/finopsproviders/default")
        for plural in ("costjobs", "pricebooks", "finopsproviders"):
            assert items(services, plural) == [], plural
        # The generated CronJobs are owned by their CostJobs, so the garbage collector of a
        # real cluster removes them (this control plane runs none).
        crons = client.get(f"/apis/batch/v1/namespaces/{sandbox.SYSTEM_NS}/cronjobs").json()
        for cron in crons["items"]:
            assert cron["metadata"]["ownerReferences"][0]["kind"] == "CostJob"

        # 4. The operator: stop it and remove its webhook registration.
        sandbox.stop_controller(services)
        client.delete(
            f"{sandbox.local_webhooks.API}/finops-operator-validating-webhook-configuration"
        )

        # 5. The CRDs: their deletion completes because no object holds a finalizer.
        crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        for plural in sandbox.PLURALS.values():
            client.delete(f"{crds}/{plural}.finops.stakater.com")

        def gone() -> bool:
            names = [c["metadata"]["name"] for c in client.get(crds).json()["items"]]
            return not any(n.endswith(".finops.stakater.com") for n in names)

        wait_until("CRDs removed", gone)


def test_the_sandbox_command_prints_the_cost_table_and_exits(tmp_path: pathlib.Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "finops.cli",
            "sandbox",
            "--exit-after-report",
            "--hours",
            "1",
            "--state-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUBSCRIPTION" in done.stdout and "team-apps/apps-platform" in done.stdout
    assert "export KUBECONFIG=" in done.stdout
    assert re.search(r"gateway serving the ledger at http://127\.0\.0\.1:\d+ ", done.stdout)
    collected = re.findall(r"collected hour (\S+): ok", done.stdout)
    assert len(collected) == 2
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:00:00Z", hour) for hour in collected)
    # USD, one format: two decimals, thousands separated, never 0.00 for a non-zero amount.
    amount = re.compile(r"<0\.01|\d{1,3}(,\d{3})*\.\d\d")
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("team-apps/")]
    assert len(rows) == 3
    for row in rows:
        assert all(amount.fullmatch(cell) for cell in row[-4:]), row

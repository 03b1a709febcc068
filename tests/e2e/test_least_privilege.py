"""The product works with exactly the permissions the chart grants, and no more is asked for.

Every other test runs the controller and the jobs as the control plane's admin
(`system:masters`), which proves nothing about the chart's RBAC. Here a fresh control plane
gets the chart's ServiceAccounts, (Cluster)Roles and bindings for real; the controller process
(with its Lease and webhooks) runs on a token of the manager's ServiceAccount, and both job
modes run as processes on a token of the job's ServiceAccount, exactly as their pods would.
Only the examples and the webhook registration are applied as admin, as an installer would.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import os
import pathlib
import re
import ssl
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
import yaml
from tests.e2e._support import by_name, condition, items, wait_until
from tests.kube import _helm

from finops.pricing import opencost_document
from finops_devenv import controlplane, sandbox

RELEASE = "finops-operator"
NS = sandbox.SYSTEM_NS
MANAGER_SA = f"{RELEASE}-controller-manager"
JOB_SA = f"{RELEASE}-job"
GROUP = "/apis/finops.stakater.com/v1alpha1"
HOURS = 2
# What an RBAC refusal looks like in a log line, whichever client reported it.
FORBIDDEN = re.compile(r"forbidden|\b403\b", re.IGNORECASE)
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def install_chart_identities(kube: controlplane.ControlPlane, workdir: pathlib.Path) -> None:
    """Render the chart and create its identities and their permissions, for real."""
    objects = _helm.template(RELEASE, NS, {}, workdir)
    wanted = [o for o in objects if o["kind"] in RBAC_KINDS]
    with kube.http() as client:
        api = _helm.Api(client)
        for obj in wanted:
            resp = api.apply(obj, dry_run=False)
            assert resp.status_code < 300, f"{obj['kind']} {obj['metadata']['name']}: {resp.text}"


def token_kubeconfig(
    kube: controlplane.ControlPlane, account: str, path: pathlib.Path
) -> pathlib.Path:
    """A kubeconfig whose user is a bound token of `account` (TokenRequest API), as the
    projected token of a pod running as that ServiceAccount would be."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600},
    }
    with kube.http() as client:
        resp = client.post(f"/api/v1/namespaces/{NS}/serviceaccounts/{account}/token", json=request)
    assert resp.status_code == 201, resp.text
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "finops-test",
                "cluster": {"server": kube.server, "certificate-authority": str(kube.ca_file)},
            }
        ],
        "users": [{"name": account, "user": {"token": resp.json()["status"]["token"]}}],
        "contexts": [{"name": account, "context": {"cluster": "finops-test", "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def whoami(kube: controlplane.ControlPlane, kubeconfig: pathlib.Path) -> str:
    """The user name the API server authenticates a kubeconfig's token as."""
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    with httpx.Client(
        base_url=kube.server,
        verify=ssl.create_default_context(cafile=str(kube.ca_file)),
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ) as client:
        resp = client.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    assert resp.status_code == 201, resp.text
    name: str = resp.json()["status"]["userInfo"]["username"]
    return name


class Setup:
    """The running services plus the job identity's kubeconfig and the job logs."""

    def __init__(self, svc: sandbox.Services, job_kubeconfig: pathlib.Path, logs: pathlib.Path):
        self.svc = svc
        self.job_kubeconfig = job_kubeconfig
        self.logs = logs
        self.job_runs: list[tuple[str, int, pathlib.Path]] = []

    def run_job(self, mode: str, costjob: str, scheduled: dt.datetime) -> int:
        """One job as its own process, as the generated CronJob's pod runs it."""
        log = self.logs / f"{mode}-{scheduled:%Y%m%d%H}.log"
        env = {
            **os.environ,
            **sandbox.job_env(self.svc, costjob, scheduled),
            "KUBECONFIG": str(self.job_kubeconfig),
        }
        done = subprocess.run(
            [sys.executable, "-m", "finops.operator", f"--mode={mode}"],
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            timeout=60,
            check=False,
        )
        self.job_runs.append((mode, done.returncode, log))
        return done.returncode

    def run_hour(self, scheduled: dt.datetime) -> None:
        for mode, costjob in (
            ("cronjob", "resource-cost-collection"),
            ("collectionjob", "subscription-charge-collection"),
        ):
            status = self.run_job(mode, costjob, scheduled)
            assert status == 0, self.job_runs[-1][2].read_text()


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    state = tmp_path_factory.mktemp("least-privilege")
    identities: dict[str, pathlib.Path] = {}

    def manager_identity(kube: controlplane.ControlPlane) -> pathlib.Path:
        install_chart_identities(kube, state)
        identities["job"] = token_kubeconfig(kube, JOB_SA, state / "job.kubeconfig")
        return token_kubeconfig(kube, MANAGER_SA, state / "manager.kubeconfig")

    out = io.StringIO()
    with sandbox.services(
        state, out, controller_identity=manager_identity, controller_args=["--leader-elect"]
    ) as svc:
        with svc.kube.http() as client:
            for obj in sandbox.load_examples():
                sandbox.apply(client, obj)
        sandbox.wait_for_activation(svc, out)
        ready = Setup(svc, identities["job"], state)
        now = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
        for k in range(HOURS + 1):
            ready.run_hour(now + k * sandbox.HOUR + dt.timedelta(minutes=5))
        yield ready


def refusals(text: str) -> list[str]:
    return [line for line in text.splitlines() if FORBIDDEN.search(line)]


# -- the identities are the chart's, not the admin ------------------------------------------


def test_the_processes_authenticate_as_the_charts_service_accounts(setup: Setup) -> None:
    kube = setup.svc.kube
    manager_config = setup.svc.controller_log.parent / "manager.kubeconfig"
    assert whoami(kube, manager_config) == f"system:serviceaccount:{NS}:{MANAGER_SA}"
    assert whoami(kube, setup.job_kubeconfig) == f"system:serviceaccount:{NS}:{JOB_SA}"


def leases(setup: Setup) -> list[dict[str, Any]]:
    with setup.svc.kube.http() as client:
        got: list[dict[str, Any]] = client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
        ).json()["items"]
    return got


def test_the_manager_acquires_and_renews_its_leader_lease(setup: Setup) -> None:
    (lease,) = leases(setup)
    assert lease["spec"]["holderIdentity"]
    # Renewal is an update of the read Lease; it happens every retry period (2 s by default).
    wait_until(
        "a lease renewal",
        lambda: leases(setup)[0]["spec"]["renewTime"] != lease["spec"]["renewTime"],
    )


# -- the product reaches the admin sandbox's state -----------------------------------------


def test_the_examples_become_ready_and_active(setup: Setup) -> None:
    svc = setup.svc
    book = by_name(svc, "pricebooks")["onprem-pricing"]
    assert book["status"]["active"] is True
    assert condition(book, "Ready")["status"] == "True"
    for offering in items(svc, "offerings"):
        assert condition(offering, "Ready")["status"] == "True", offering["metadata"]["name"]
    subs = items(svc, "subscriptions")
    assert subs
    for sub in subs:
        active = condition(sub, "Active")
        assert (active.get("status"), active.get("reason")) == ("True", "ActivationSucceeded")
    assert condition(by_name(svc, "finopsproviders")["default"], "Ready")["status"] == "True"


def test_each_costjob_owns_its_cronjob_and_records_successful_runs(setup: Setup) -> None:
    with setup.svc.kube.http() as client:
        for name, mode in (
            ("resource-cost-collection", "--mode=cronjob"),
            ("subscription-charge-collection", "--mode=collectionjob"),
        ):
            cron = client.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/{name}-cronjob").json()
            pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
            assert pod["serviceAccountName"] == JOB_SA
            assert mode in pod["containers"][0]["args"]
            assert cron["metadata"]["ownerReferences"][0]["name"] == name
    # Both jobs record each run in their CostJob's status, through the job identity.
    jobs = by_name(setup.svc, "costjobs")
    for name in ("resource-cost-collection", "subscription-charge-collection"):
        status = jobs[name]["status"]
        assert status["lastExecutionStatus"] == "Success", status
        assert [run["status"] for run in status["executionHistory"]] == ["Success"] * (HOURS + 1)


def test_the_charge_job_writes_status_costs_of_every_subscription(setup: Setup) -> None:
    subs = by_name(setup.svc, "subscriptions")
    for sub in subs.values():
        assert [b["granularity"] for b in sub["status"]["costs"]] == ["hour", "day", "month"]
    platform = subs["apps-platform"]
    month = next(b for b in platform["status"]["costs"] if b["granularity"] == "month")
    with psycopg.connect(setup.svc.dsn) as conn:
        settled = conn.execute(
            "SELECT coalesce(sum(amount_micros), 0) FROM subscription_charges "
            "WHERE finalized AND subscription_uid = %s",
            (platform["metadata"]["uid"],),
        ).fetchone()
    # ActivatedAt 1h at 40.00: whole hours since activation, settled in the ledger.
    assert settled is not None and month.get("current", 0) == settled[0]
    assert month.get("current", 0) >= 40_000_000 * (HOURS - 1)
    assert month.get("current", 0) % 40_000_000 == 0


def test_the_opencost_side_is_written_through_the_namespaced_role(setup: Setup) -> None:
    with setup.svc.kube.http() as client:
        configmap = client.get(
            f"/api/v1/namespaces/{NS}/configmaps/{opencost_document.CONFIGMAP_NAME}"
        )
        deployment = client.get(
            f"/apis/apps/v1/namespaces/{NS}/deployments/{sandbox.OPENCOST_DEPLOYMENT}"
        ).json()
    assert configmap.status_code == 200, configmap.text
    assert configmap.json()["data"]
    annotations = deployment["spec"]["template"]["metadata"].get("annotations") or {}
    assert opencost_document.RESTARTED_AT_ANNOTATION in annotations


def test_the_manager_records_events_where_their_objects_live(setup: Setup) -> None:
    with setup.svc.kube.http() as client:
        events = client.get("/api/v1/events").json()["items"]
    ours = [e for e in events if e.get("reportingComponent") == "finops-operator"]
    assert {e["involvedObject"]["kind"] for e in ours} >= {"Subscription"}
    assert {e["metadata"]["namespace"] for e in ours} >= {"team-apps"}


# -- deletion, wound down by the controller and released by the charge job -----------------


def test_a_deleted_subscription_is_wound_down_and_released(setup: Setup) -> None:
    svc = setup.svc
    with svc.kube.http() as client:
        for sub in items(svc, "subscriptions"):
            meta = sub["metadata"]
            resp = client.delete(
                f"{GROUP}/namespaces/{meta['namespace']}/subscriptions/{meta['name']}"
            )
            assert resp.status_code in (200, 202), resp.text
    wait_until(
        "Deleting=False WaitingForCollectionJob",
        lambda: all(
            condition(s, "Deleting").get("reason") == "WaitingForCollectionJob"
            for s in items(svc, "subscriptions")
        ),
    )
    assert items(svc, "subscriptions"), "only the charge job may release them"
    # A DayBoundary fee snaps a deactivation to the next midnight: schedule after it closes.
    now = dt.datetime.now(dt.UTC)
    after_midnight = (now + dt.timedelta(days=1)).replace(hour=1, minute=5, second=0)
    hours = math.ceil((after_midnight - now) / dt.timedelta(hours=1))
    scheduled = now.replace(minute=5, second=0, microsecond=0) + hours * sandbox.HOUR
    setup.run_hour(scheduled)
    assert items(svc, "subscriptions") == []


def test_offerings_without_subscriptions_are_deleted_and_their_finalizer_dropped(
    setup: Setup,
) -> None:
    svc = setup.svc
    assert items(svc, "subscriptions") == [], "runs after the Subscriptions are released"
    with svc.kube.http() as client:
        for offering in items(svc, "offerings"):
            meta = offering["metadata"]
            resp = client.delete(f"{GROUP}/namespaces/{meta['namespace']}/offerings/{meta['name']}")
            assert resp.status_code == 200, resp.text
    wait_until("offerings gone", lambda: items(svc, "offerings") == [])


# -- nothing was refused --------------------------------------------------------------------


def test_no_job_run_was_refused_anything(setup: Setup) -> None:
    assert setup.job_runs
    for mode, status, log in setup.job_runs:
        assert status == 0, (mode, log.read_text())
        assert refusals(log.read_text()) == [], mode


def test_the_controller_stops_cleanly_releasing_its_lease_and_was_refused_nothing(
    setup: Setup,
) -> None:
    # Last: stopping exercises the Lease release, and the log covers everything the tests
    # above made the controller do.
    sandbox.stop_controller(setup.svc)
    assert setup.svc.controller.returncode == 0
    (lease,) = leases(setup)
    assert not lease["spec"].get("holderIdentity"), lease
    text = setup.svc.controller_log.read_text(errors="replace")
    assert "released leadership" in text
    assert refusals(text) == []

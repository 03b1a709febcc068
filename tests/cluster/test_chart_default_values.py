"""The chart with its default values, next to a PostgreSQL and an OpenCost already running.

Everything as `values.yaml` ships it except the image coordinates and `certManager.enabled`
(no cert-manager here; the admin provides the webhook's serving Secret and caBundle). Nothing
is bundled, so the admin creates the two dependency Secrets the chart names, pointing at a
database and an OpenCost outside the cluster: on this machine, a PostgreSQL listening on the
node's address with a password role (pods come in from the pod network with the password),
and the OpenCost replay server serving the real captures on the same address.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import psycopg
import pytest

from finops_devenv import opencost_replay as replay
from finops_devenv import postgres, realnode, release
from tests.cluster import _chart
from tests.cluster._chart import NAMESPACE, RELEASE

SECRETS = {
    "finops-operator-postgres-config": "POSTGRES_CONNECTION_STRING",
    "finops-operator-opencost-config": "OPENCOST_CONNECTION_STRING",
}


@pytest.fixture(scope="module")
def database(node: realnode.RealNode) -> Iterator[tuple[postgres.PostgresCluster, str]]:
    with postgres.PostgresCluster(remote=(realnode.NODE_IP, realnode.POD_CIDR)) as pg:
        dsn = pg.create_database("finops_external", owner=postgres.PASSWORD_ROLE)
        yield pg, dsn


@pytest.fixture(scope="module")
def opencost(node: realnode.RealNode) -> Iterator[replay.ReplayServer]:
    with replay.ReplayServer(replay.Captures(), host=realnode.NODE_IP) as srv:
        yield srv


@pytest.fixture(scope="module")
def installed(
    node: realnode.RealNode,
    images: dict[str, realnode.Image],
    database: tuple[postgres.PostgresCluster, str],
    opencost: replay.ReplayServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    pg, _dsn = database
    node.kubectl("create", "namespace", NAMESPACE)
    found = {
        "finops-operator-postgres-config": pg.remote_dsn("finops_external"),
        "finops-operator-opencost-config": opencost.url,
    }
    for name, key in SECRETS.items():
        node.kubectl(
            "create", "secret", "generic", name, "-n", NAMESPACE,
            f"--from-literal={key}={found[name]}",
        )  # fmt: skip
    manager = {"controllerManager": release.image_values(images)["controllerManager"]}
    values = release.merge(manager, {"certManager": {"enabled": False}})
    release.install(node, values, tmp_path_factory.mktemp("defaults"))
    yield RELEASE
    # The documented order: what the operator made (CronJobs, their Jobs) goes with the
    # CostJob, while the operator still runs; then the release.
    node.kubectl("delete", "costjobs,pricebooks", "--all", "-n", NAMESPACE, "--wait=true")
    node.kubectl("delete", "finopsprovider", "default", "--ignore-not-found")
    release.helm(node, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    node.kubectl("delete", "secrets", *SECRETS, release.WEBHOOK_SECRET, "-n", NAMESPACE)
    release.wait_for(node, "the release's pods gone", lambda: not _chart.pods(node, NAMESPACE), 120)


def test_default_values_run_the_manager_and_the_gateway_and_bundle_nothing(
    node: realnode.RealNode, installed: str, database: tuple[postgres.PostgresCluster, str]
) -> None:
    found = release.items(node, "deployments", "-n", NAMESPACE)
    deployments = sorted(d["metadata"]["name"] for d in found)
    assert deployments == [
        f"{RELEASE}-controller-manager",
        f"{RELEASE}-finops-gateway-gateway",
    ]
    assert not release.items(node, "statefulsets", "-n", NAMESPACE)
    # The ledger's schema landed in the external database, applied from inside the cluster.
    with psycopg.connect(database[1]) as conn:
        (applied,) = conn.execute("SELECT count(*) FROM schema_migrations").fetchone() or (0,)
    assert applied >= 8


def test_a_costjob_run_by_hand_fills_the_external_database_from_the_external_opencost(
    node: realnode.RealNode,
    installed: str,
    database: tuple[postgres.PostgresCluster, str],
    opencost: replay.ReplayServer,
) -> None:
    docs = release.examples()
    node.apply(
        [d for d in docs if d["kind"] in ("Namespace", "FinOpsProvider", "PriceBook")]
        + [d for d in docs if d["metadata"]["name"] == "resource-cost-collection"]
    )
    release.wait_for(
        node,
        "the CostJob's CronJob",
        lambda: (
            release.get(node, "cronjob", "-n", NAMESPACE, _chart.ALLOCATION_CRONJOB) is not None
        ),
        60,
    )
    hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    release.run_job(node, NAMESPACE, _chart.ALLOCATION_CRONJOB, "by-hand")
    assert any(r.params.get("aggregate") == "namespace,pod,container" for r in opencost.requests)
    with psycopg.connect(database[1]) as conn:
        rows = conn.execute(
            "SELECT count(*), count(DISTINCT namespace) FROM provider_allocations"
            " WHERE hour = %s AND aggregation = 'namespace,pod,container'",
            (hour,),
        ).fetchone()
    # Every pod of the capture, under its container, for the hour the Job pinned.
    assert rows == (16, 5)


def test_a_pod_reaches_nothing_outside_this_machine(
    node: realnode.RealNode, installed: str
) -> None:
    # The node drops whatever a pod sends anywhere but the pod network and the node itself.
    (gateway,) = _chart.pods(node, NAMESPACE, "app.kubernetes.io/component=gateway")
    probe = (
        "import socket\n"
        "s = socket.socket(); s.settimeout(3)\n"
        "try:\n"
        "    s.connect(('192.0.2.1', 80)); print('reached')\n"
        "except OSError as exc:\n"
        "    print('refused', type(exc).__name__)\n"
    )
    done = node.kubectl(
        "exec", "-n", NAMESPACE, gateway["metadata"]["name"], "--", "python3", "-c", probe
    )
    assert done.stdout.startswith("refused"), done.stdout

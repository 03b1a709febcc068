"""`finops sandbox --real-node`: the chart's pods on a real single-node cluster on this machine.

Where the plain sandbox runs every part as a host process and simulates hours, this one runs
the product as a platform team does: the images built from this repository
(`tools/images.sh`), a real node (`finops_devenv.realnode`), `helm install` of the chart with
its bundled PostgreSQL, OpenCost stand-in and Prometheus, then `examples/`. The CostJobs'
CronJobs run on the real clock; so that the report does not wait for the next hour, the first
run of each is started at once, as a user would (`kubectl create job --from=cronjob/...`).
Needs root; Ctrl-C (or `--exit-after-report`) removes the cluster and everything it added.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import time
from collections.abc import Iterator
from typing import TextIO

from finops.pricing import opencost_document
from finops_devenv import realnode, release, sandbox

READER = "sandbox-reader"
TENANT = "team-apps"
OPENCOST = f"{release.RELEASE}-opencost"
CRONJOBS = ("resource-cost-collection-cronjob", "subscription-charge-collection-cronjob")


def _say(out: TextIO, text: str) -> None:
    print(f"[sandbox] {text}", file=out, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def cluster(out: TextIO) -> Iterator[realnode.RealNode]:
    """The images built, a node running them and the chart installed with its dependencies."""
    reason = realnode.host_ready()
    if reason:
        raise realnode.RealNodeError(f"a real node cannot run here: {reason}")
    _say(out, "building the images from Debian and PyPI (tools/images.sh; cached after once)")
    images = realnode.build_images()
    _say(out, f"starting a real node (state under {realnode.STATE_ROOT})")
    with realnode.running(images=list(images.values())) as node:
        _say(out, f"node {realnode.NODE_NAME} Ready; API server {node.server}")
        values = release.merge(
            release.image_values(images),
            {"certManager": {"enabled": False}, "mdoDependencies": {"enabled": True}},
        )
        _say(out, f"helm install {release.RELEASE} (bundled PostgreSQL, OpenCost, Prometheus)")
        workdir = node.dir / "sandbox"
        workdir.mkdir(exist_ok=True)
        release.install(node, values, workdir)
        try:
            yield node
        except KeyboardInterrupt:
            _say(out, "removing the cluster (further Ctrl-C is ignored until it is gone)")
            raise


def apply_examples(node: realnode.RealNode, out: TextIO) -> None:
    """`examples/`, then wait for the Subscriptions to settle and run each CostJob once."""
    _say(out, f"applying {release.EXAMPLES}")
    node.apply(release.examples())

    def settled() -> bool:
        subs = release.items(node, "subscriptions", "-A")
        return bool(subs) and all(
            sandbox.condition(s, "Active").get("status") in ("True", "False") for s in subs
        )

    def opencost_restarted() -> bool:
        found = release.get(node, "deployment", "-n", release.NAMESPACE, OPENCOST)
        template = (found or {}).get("spec", {}).get("template", {})
        return opencost_document.RESTARTED_AT_ANNOTATION in template.get("metadata", {}).get(
            "annotations", {}
        )

    release.wait_for(node, "the example Subscriptions settled", settled, 120)
    # The PriceBook's activation restarts OpenCost with its pricing document: the first runs
    # read usage from the restarted OpenCost, not from the pod on its way out.
    release.wait_for(node, f"the operator restarted {OPENCOST}", opencost_restarted, 120)
    release.wait_for(node, "every rollout finished", lambda: release.settled(node), 120)
    stamp = dt.datetime.now(dt.UTC).strftime("%H%M%S")
    for cronjob in CRONJOBS:
        name = f"{cronjob.removesuffix('-cronjob')}-{stamp}"
        _say(out, f"kubectl create job {name} --from=cronjob/{cronjob}")
        release.run_job(node, release.NAMESPACE, cronjob, name)


def reader_token(node: realnode.RealNode) -> str:
    """A token of a ServiceAccount with the built-in `view` role in the tenant namespace."""
    node.kubectl("create", "serviceaccount", READER, "-n", TENANT, check=False)
    node.kubectl(
        "create", "rolebinding", f"{READER}-view", "-n", TENANT, "--clusterrole=view",
        f"--serviceaccount={TENANT}:{READER}", check=False,
    )  # fmt: skip
    return node.kubectl("create", "token", READER, "-n", TENANT).stdout.strip()


def report(node: realnode.RealNode, out: TextIO) -> None:
    """The tables the plain sandbox prints, the pods, and where to look."""
    with node.http() as client:
        books = sandbox.list_objects(client, "pricebooks")
        currency = next((b["spec"].get("currency", "") for b in books), "")
        table = sandbox.cost_table(client, currency)
        budgets = sandbox.budget_table(client)
    heading = f"Subscription costs ({currency}; settled so far, and the month's projection):"
    print(f"\n{heading}", file=out)
    print(table, file=out)
    print("\nBudgets (spent so far in the period, and its forecast):", file=out)
    print(budgets, file=out)
    release.wait_for(node, "every rollout finished", lambda: release.settled(node), 120)
    print("\nkubectl get pods -A:", file=out)
    print(node.kubectl("get", "pods", "-A").stdout, file=out)
    svc = release.get(
        node, "service", "-n", release.NAMESPACE, f"{release.RELEASE}-finops-gateway-service"
    )
    ip = svc["spec"]["clusterIP"] if svc else "<gateway service>"
    now = dt.datetime.now(dt.UTC)
    start = now.strftime("%Y-%m-01T00:00:00Z")
    end = (now.replace(day=28) + dt.timedelta(days=4)).strftime("%Y-%m-01T00:00:00Z")
    assert node.node_bin is not None
    print(
        f"""Where to look:
  export KUBECONFIG={node.kubeconfig} PATH={node.node_bin}:$PATH
  kubectl get pods -A
  kubectl get cronjobs,jobs -n {release.NAMESPACE}
  kubectl get subscription apps-hosting -n {TENANT} -o yaml     # status.costs
  kubectl get budgets -n {TENANT}
  kubectl create job again --from=cronjob/{CRONJOBS[1]} -n {release.NAMESPACE}
  gateway (Service {ip}:8080, reachable from this machine; auth on, as the chart installs it):
  curl -H "Authorization: Bearer $(kubectl create token {READER} -n {TENANT})" \\
    'http://{ip}:8080/api/v1/namespaces/{TENANT}/costs?from={start}&to={end}'
""",
        file=out,
        flush=True,
    )


def run(exit_after_report: bool, out: TextIO) -> int:
    """The whole real-node sandbox; returns an exit status."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with cluster(out) as node:
            apply_examples(node, out)
            reader_token(node)
            report(node, out)
            if exit_after_report:
                _say(out, "removing the cluster")
                return 0
            _say(out, "running; press Ctrl-C to stop and remove everything")
            while True:
                time.sleep(1)
    except (realnode.RealNodeError, release.ReleaseError) as exc:
        _say(out, f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        _say(out, "interrupted; the cluster was removed")
        return 130

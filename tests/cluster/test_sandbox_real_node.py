"""`finops sandbox --real-node`: what a user runs to see the product's pods on this machine.

It brings up a cluster of its own, so it runs before the tier's shared node exists (see
conftest); with `--exit-after-report` it prints the report and removes everything.
"""

from __future__ import annotations

import os
import subprocess
import sys

from finops_devenv import realnode
from tests.cluster.conftest import require_real_node


def test_the_real_node_sandbox_prints_costs_and_running_pods_then_leaves_nothing() -> None:
    require_real_node()
    done = subprocess.run(
        [sys.executable, "-m", "finops.cli", "sandbox", "--real-node", "--exit-after-report"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out = done.stdout
    assert done.returncode == 0, out[-5000:] + done.stderr[-3000:]
    table = out[out.index("Subscription costs (USD") : out.index("Budgets (spent")]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:] if line.strip()}
    assert set(rows) == {
        "team-apps/apps-platform",
        "team-apps/apps-hosting",
        "team-apps/apps-observability",
    }
    assert all(row[2] == "True" for row in rows.values()), table
    budgets = out[out.index("Budgets (spent") : out.index("kubectl get pods -A:")]
    judged = ("OnTrack", "ForecastExceeded", "Exceeded")
    assert "apps-monthly" in budgets and any(s in budgets for s in judged), budgets
    pods = out[out.index("kubectl get pods -A:") : out.index("Where to look:")]
    lines = [line.split() for line in pods.splitlines()[2:] if line.strip()]
    assert len(lines) >= 7, pods  # five workloads and the two Jobs started by hand
    assert all(cols[3] in ("Running", "Completed") for cols in lines), pods
    assert "export KUBECONFIG=" in out
    assert realnode.leftovers() == []

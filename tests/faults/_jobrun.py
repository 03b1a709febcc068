"""One job mode as a process of its own, for the fault tests to kill.

The same `run` the operator binary's `--mode=cronjob` / `--mode=collectionjob` call, with two
test-only pins: the clock (`FAULTS_NOW`), so runs of a simulated hour are reproducible, and
the charge job's namespace (`FAULTS_NAMESPACE`), because every test of a session shares one
API server and a cluster-wide run would charge other tests' Subscriptions.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys

from finops import logs
from finops.jobs import allocations, charges


def main(mode: str) -> int:
    logs.configure()
    env = dict(os.environ)
    now = dt.datetime.fromisoformat(env["FAULTS_NOW"])
    if mode == "allocations":
        return asyncio.run(allocations.run(env, now=lambda: now))
    namespace = env.get("FAULTS_NAMESPACE", "*")
    return asyncio.run(charges.run(env, now=lambda: now, namespace=namespace))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

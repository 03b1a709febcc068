"""A generated forest created all at once converges to exactly what the pure decisions say.

The controller's fast path (watch-cache reads, read-your-writes overlay, Subscriptions put
back behind their queued parent, fan-out through the indexes) must end where the slow exact
path ends: `tests.unit.hierarchy.builders.Cluster` runs `subscriptions.plan` over plain dicts
until nothing changes. Without deletions every gate only ever opens, so that end state is
unique whatever order the creates land in. The periodic resync is turned off (600 s), so a
missed wake-up shows up here as a Subscription that never reaches its state.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
from tests.kube import _hierarchy as h
from tests.kube.test_controller_support import (
    ControllerProcess,
    create,
    get,
    running_controller,
    wait_for,
)
from tests.unit.hierarchy import builders as b

from finops_devenv import controlplane

OFFERINGS: dict[str, list[str]] = {
    "core": [],
    "vm": [],
    "disk": ["vm"],
    "mon": ["vm"],
    "alert": ["mon"],
    "lonely": ["unsubscribed"],  # nobody binds `unsubscribed`: never covered
    "unsubscribed": [],
}
CHOICES = ["vm", "vm", "disk", "mon", "alert", "lonely"]


@pytest.fixture(scope="module")
def controller(kube: controlplane.ControlPlane) -> Iterator[ControllerProcess]:
    home = f"conv-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(home)
    env = {**h.NO_WEBHOOKS, "FINOPS_RESYNC_SECONDS": "600", "FINOPS_WORKERS": "4"}
    with running_controller(kube, home, env=env) as proc:
        yield proc


def forest(seed: int, families: int) -> list[tuple[str, str, str | None]]:
    """(name, offering, parent) in creation order: random trees, some under a missing parent."""
    rng = random.Random(seed)
    subs: list[tuple[str, str, str | None]] = []
    for f in range(families):
        members = [f"f{f}-root"]
        subs.append((members[0], "core", None))
        for i in range(rng.randint(1, 8)):
            parent = rng.choice(members) if rng.random() > 0.05 else f"f{f}-ghost"
            name = f"f{f}-m{i}"
            subs.append((name, rng.choice(CHOICES), parent))
            members.append(name)
    rng.shuffle(subs)
    return subs


def expected(subs: list[tuple[str, str, str | None]]) -> dict[str, tuple[Any, ...]]:
    """The slow exact path: the pure decisions run to a fixed point in memory."""
    cluster = b.Cluster()
    for name, requires in OFFERINGS.items():
        cluster.add_offering(b.offering(name, requires=requires))
    for name, offering, parent in subs:
        cluster.create(b.subscription(name, offering, parent=parent))
    cluster.settle(limit=100_000)
    uids = {obj["metadata"]["uid"]: key.name for key, obj in cluster.subs.items()}
    return {key.name: outcome(obj, uids) for key, obj in cluster.subs.items()}


def outcome(obj: Mapping[str, Any], uids: Mapping[str, str]) -> tuple[Any, ...]:
    """What must agree: readiness, the conditions' reasons, activation, the family root."""
    status = obj.get("status") or {}
    root = status.get("compatibilityRoot")
    return (
        status.get("ready"),
        h.reason(obj, "Ready"),
        h.reason(obj, "Active"),
        "activatedAt" in status,
        "deactivatedAt" in status,
        uids.get(root, root) if root else None,
    )


async def create_all(
    kube: controlplane.ControlPlane, ns: str, bodies: list[dict[str, Any]]
) -> None:
    """Everything at once, 16 requests in flight, as a burst of `kubectl apply` would."""
    gate = asyncio.Semaphore(16)
    async with httpx.AsyncClient(
        base_url=kube.server, verify=kube.ssl_context(), timeout=60
    ) as client:

        async def one(body: dict[str, Any]) -> None:
            async with gate:
                (await client.post(h.path("Subscription", ns), json=body)).raise_for_status()

        await asyncio.gather(*(one(body) for body in bodies))


def observed(kube: controlplane.ControlPlane, ns: str) -> dict[str, tuple[Any, ...]]:
    items = (get(kube, h.path("Subscription", ns)) or {}).get("items") or []
    uids = {s["metadata"]["uid"]: s["metadata"]["name"] for s in items}
    return {s["metadata"]["name"]: outcome(s, uids) for s in items}


@pytest.mark.parametrize("seed", [1, 2])
def test_a_forest_created_at_once_ends_where_the_pure_decisions_end(
    kube: controlplane.ControlPlane, controller: ControllerProcess, seed: int
) -> None:
    ns = f"forest-{uuid.uuid4().hex[:8]}"
    kube.create_namespace(ns)
    for name, requires in OFFERINGS.items():
        create(kube, h.path("Offering", ns), h.offering_body(name, ns, requires=requires))
    for name in OFFERINGS:
        h.wait_reason(kube, "Offering", ns, name, "Ready", "ValidationSucceeded")
    subs = forest(seed, families=25)
    want = expected(subs)
    assert any(o[0] == "True" for o in want.values())
    assert any(o[0] == "False" for o in want.values())  # the generator holds some, too
    bodies = [h.subscription_body(n, ns, o, parent=p) for n, o, p in subs]
    asyncio.run(create_all(kube, ns, bodies))
    last: dict[str, tuple[Any, ...]] = {}

    def settled() -> bool:
        last.clear()
        last.update(observed(kube, ns))
        return last == want

    try:
        wait_for(settled, timeout=180, what="the forest to reach the pure decisions' end")
    except AssertionError:
        diff = {n: (last.get(n), w) for n, w in want.items() if last.get(n) != w}
        raise AssertionError(f"{len(diff)} differ (observed, expected): {diff}") from None
    assert last == want

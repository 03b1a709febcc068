"""The `cluster` tier: the chart installed on a real single-node cluster on this machine.

One cluster per session (`finops_devenv.realnode`); the images come from `tools/images.sh`.
Root is required: without it the tier is skipped locally and fails under CI, where it must run.
Tests that start a cluster of their own (the real-node sandbox) run first, before the shared
one exists: there is one node per machine. When the session's cluster stops, the host must
hold nothing of it (processes, interfaces, iptables chains, mounts, network namespaces).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from finops_devenv import realnode

REQUIRED_IMAGES = ("pause", "finops-operator", "postgres", "opencost", "prometheus")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests without the shared `node` run before any test that brings it up."""
    here = os.path.dirname(__file__)
    mine = [i for i in items if str(i.fspath).startswith(here)]
    if not mine:
        return
    alone = [i for i in mine if "node" not in getattr(i, "fixturenames", ())]
    shared = [i for i in mine if i not in alone]
    at = items.index(mine[0])
    others = [i for i in items if i not in mine]
    items[:] = others[:at] + alone + shared + others[at:]


def require_real_node() -> None:
    """Skip (locally) or fail (under CI) when this machine cannot run a node."""
    reason = realnode.host_ready()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the cluster tier must run under CI: {reason}")
        pytest.skip(f"no real node here: {reason}")


@pytest.fixture(scope="session")
def images() -> dict[str, realnode.Image]:
    require_real_node()
    built = realnode.build_images()
    missing = [name for name in REQUIRED_IMAGES if name not in built]
    assert not missing, f"tools/images.sh built no image named {missing}"
    return built


@pytest.fixture(scope="session")
def node(images: dict[str, realnode.Image]) -> Iterator[realnode.RealNode]:
    wanted = [images[name] for name in REQUIRED_IMAGES]
    with realnode.running(images=wanted) as cluster:
        yield cluster
    left = realnode.leftovers()
    assert not left, f"the cluster's teardown left: {left}"

"""The `cluster` tier: the chart installed on a real single-node cluster on this machine.

One cluster for the tier (`finops_devenv.realnode`), stopped after its last test so the other
tiers do not share the machine with its pods; the images come from `tools/images.sh`, built
before the first test.
Root is required: without it the tier is skipped locally and fails under CI, where it must run.
Tests that start a cluster of their own (the real-node sandbox) run first, before the shared
one exists: there is one node per machine. When the tier's cluster stops, the host must
hold nothing of it (processes, interfaces, iptables chains, mounts, network namespaces).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from finops_devenv import realnode

REQUIRED_IMAGES = ("pause", "finops-operator", "postgres", "opencost", "prometheus")
_BUILT: dict[str, realnode.Image] = {}


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


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the images before the tier's first test starts its clock.

    On a cold cache (Go modules, debootstrap, the Prometheus build) the build takes longer than a
    test may; built here, once, it counts against no test's timeout, and the sandbox test and the
    shared node find every image cached. A failure is left to the `images` fixture to report.
    """
    here = os.path.dirname(__file__)
    if session.config.option.collectonly or realnode.host_ready():
        return
    if not any(str(i.fspath).startswith(here) for i in session.items):
        return
    try:
        _BUILT.update(realnode.build_images())
    except (realnode.RealNodeError, OSError) as exc:  # the fixture reports it inside a test
        print(f"building the cluster tier's images failed: {exc}")


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
    built = _BUILT or realnode.build_images()
    missing = [name for name in REQUIRED_IMAGES if name not in built]
    assert not missing, f"tools/images.sh built no image named {missing}"
    return built


@pytest.fixture(scope="package")
def node(images: dict[str, realnode.Image]) -> Iterator[realnode.RealNode]:
    wanted = [images[name] for name in REQUIRED_IMAGES]
    with realnode.running(images=wanted) as cluster:
        yield cluster
    left = realnode.leftovers()
    assert not left, f"the cluster's teardown left: {left}"

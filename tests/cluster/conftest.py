"""The `cluster` tier: the chart installed on a real single-node cluster on this machine.

One cluster per session (`finops.devenv.realnode`); the images come from `tools/images.sh`.
Root is required: without it the tier is skipped locally and fails under CI, where it must run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from finops.devenv import realnode

REQUIRED_IMAGES = ("pause", "finops-operator", "postgres", "opencost", "prometheus")


@pytest.fixture(scope="session")
def images() -> dict[str, realnode.Image]:
    reason = realnode.host_ready()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"the cluster tier must run under CI: {reason}")
        pytest.skip(f"no real node here: {reason}")
    built = realnode.build_images()
    missing = [name for name in REQUIRED_IMAGES if name not in built]
    assert not missing, f"tools/images.sh built no image named {missing}"
    return built


@pytest.fixture(scope="session")
def node(images: dict[str, realnode.Image]) -> Iterator[realnode.RealNode]:
    wanted = [images[name] for name in REQUIRED_IMAGES]
    with realnode.running(images=wanted) as cluster:
        yield cluster

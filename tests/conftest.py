"""Test harness: tiers by folder, real services as session fixtures."""

from __future__ import annotations

import pathlib

import pytest

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.kube", "tests.fixtures.opencost"]

_TIERS = ("unit", "db", "kube", "e2e", "faults", "cluster")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with the tier of the folder it lives in (tests/<tier>/...)."""
    root = pathlib.Path(__file__).parent
    for item in items:
        try:
            rel = pathlib.Path(str(item.fspath)).relative_to(root)
        except ValueError:
            continue
        if rel.parts and rel.parts[0] in _TIERS:
            item.add_marker(getattr(pytest.mark, rel.parts[0]))

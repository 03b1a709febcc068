"""The ledger pass freezes the objects made before it, and never leaves them frozen."""

from __future__ import annotations

import gc

import pytest

from finops.jobs import charges as job


def _scanned(value: object) -> bool:
    """Whether the collector's passes look at `value` (frozen objects are left out)."""
    return any(o is value for o in gc.get_objects())


def test_objects_made_before_the_pass_are_skipped_during_it_and_scanned_after() -> None:
    assert gc.get_freeze_count() == 0
    earlier = [["made before the pass"]]
    with job._earlier_objects_frozen():
        during = [["made by the pass"]]
        assert not _scanned(earlier) and _scanned(during)
    assert _scanned(earlier) and gc.get_freeze_count() == 0


def test_a_failing_pass_leaves_nothing_frozen() -> None:
    with pytest.raises(RuntimeError), job._earlier_objects_frozen():
        assert gc.get_freeze_count() > 0
        raise RuntimeError("the pass failed")
    assert gc.get_freeze_count() == 0

"""Which watch events wake a reconciler."""

from __future__ import annotations

from typing import Any

from finops.controller import app


def obj(generation: int = 1, labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "x", "namespace": "n", "generation": generation, "labels": labels},
        "status": status,
    }


def test_status_only_updates_do_not_wake_the_reconciler() -> None:
    assert not app.spec_or_meta_changed(obj(), obj(active=True))


def test_spec_label_creation_and_deletion_do() -> None:
    assert app.spec_or_meta_changed(obj(1), obj(2))
    assert app.spec_or_meta_changed(obj(), obj(labels={"a": "b"}))
    assert app.spec_or_meta_changed(None, obj())
    assert app.spec_or_meta_changed(obj(), None)


def test_owned_objects_map_to_their_controlling_costjob() -> None:
    cronjob = {
        "metadata": {
            "namespace": "n",
            "ownerReferences": [
                {"kind": "Other", "name": "o", "controller": False},
                {"kind": "CostJob", "name": "alloc", "controller": True},
            ],
        }
    }
    assert app.owner_costjob(cronjob) == ("CostJob", "n", "alloc")
    assert app.owner_costjob({"metadata": {"namespace": "n"}}) is None

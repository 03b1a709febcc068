"""The TypedDicts of `finops.api.bodies` name exactly the keys the pydantic models accept."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel

from finops.api import bodies, models

pytestmark = pytest.mark.unit

# Keys the API server adds that the models leave out on purpose (the server owns metadata).
EXTRAS: dict[str, set[str]] = {"ObjectMeta": {"managedFields", "ownerReferences"}}


def _models() -> list[type[BaseModel]]:
    found = []
    for value in vars(models).values():
        if (
            isinstance(value, type)
            and issubclass(value, BaseModel)
            and value.__module__ == models.__name__
            and not value.__name__.startswith("_")
        ):
            found.append(value)
    return found


def _wire_keys(model: type[BaseModel]) -> tuple[set[str], set[str]]:
    """All keys of the model as JSON spells them, and the required ones."""
    every = {f.alias or name for name, f in model.model_fields.items()}
    required = {f.alias or name for name, f in model.model_fields.items() if f.is_required()}
    return every, required


def test_every_model_has_a_typed_dict() -> None:
    missing = [m.__name__ for m in _models() if not hasattr(bodies, m.__name__ + "Body")]
    assert missing == []


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_keys_agree_with_the_model(model: type[BaseModel]) -> None:
    typed = getattr(bodies, model.__name__ + "Body")
    every, required = _wire_keys(model)
    keys = set(typed.__required_keys__) | set(typed.__optional_keys__)
    assert keys == every | EXTRAS.get(model.__name__, set())
    assert set(typed.__required_keys__) == required


@pytest.mark.parametrize("kind", models.KINDS, ids=lambda k: k.kind_name)
def test_kinds_extend_object(kind: type[BaseModel]) -> None:
    typed = getattr(bodies, kind.__name__ + "Body")
    assert typing.is_typeddict(typed)
    assert set(bodies.Object.__optional_keys__) <= set(typed.__optional_keys__)


def test_a_drifted_key_is_caught() -> None:
    """The comparison can fail: a renamed key differs from the model's alias."""

    class Drifted(bodies.ObjectReferenceBody, total=False):
        namespaceName: str

    keys = set(Drifted.__required_keys__) | set(Drifted.__optional_keys__)
    assert keys != _wire_keys(models.ObjectReference)[0]

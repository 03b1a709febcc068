"""The controller with its watch-store projection switched off: the memory benchmark's baseline.

Every watched Offering, Subscription and Namespace is kept exactly as the API server sent it
(as before the projection), everything else is the shipped `finops-operator` entry point.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from finops import operator
from finops.controller import watched


def _whole(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The whole object: what a store keeps without a projection (the very object, no copy)."""
    return cast(dict[str, Any], obj)


def main() -> None:
    watched.hierarchy_object = _whole
    watched.namespace = _whole
    raise SystemExit(operator.main())


if __name__ == "__main__":
    main()

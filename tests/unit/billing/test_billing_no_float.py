"""No float in any money path: an AST scan of the billing core.

Floats round silently (0.1 + 0.2 != 0.3), so `finops.billing` must not contain a float
literal, mention `float`, use true division `/` (which yields floats on ints), call
`timedelta.total_seconds()` (a float), or import `math`. Exact alternatives: `//`,
`Fraction(n, d)`, `Decimal`, `timedelta // timedelta`.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import finops.billing

BILLING = pathlib.Path(finops.billing.__file__).parent


def float_hazards(source: str, filename: str = "<source>") -> list[str]:
    """`file:line: what` for every construct that can bring a float into money."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, float | complex):
            found.append(f"{filename}:{line}: float literal {node.value!r}")
        elif isinstance(node, ast.Name) and node.id == "float":
            found.append(f"{filename}:{line}: use of float")
        elif isinstance(node, ast.BinOp | ast.AugAssign) and isinstance(node.op, ast.Div):
            found.append(f"{filename}:{line}: true division '/'")
        elif isinstance(node, ast.Attribute) and node.attr == "total_seconds":
            found.append(f"{filename}:{line}: total_seconds() returns a float")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            if "math" in names:
                found.append(f"{filename}:{line}: import of math")
    return found


def test_the_billing_core_has_no_float_hazards() -> None:
    files = sorted(BILLING.glob("*.py"))
    assert len(files) >= 7, "the scan must see the billing modules"
    hazards = [h for f in files for h in float_hazards(f.read_text(), f.name)]
    assert hazards == []


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("price = 0.031", "float literal"),
        ("price = float(rate)", "use of float"),
        ("def f(x: float) -> int: ...", "use of float"),
        ("share = used / total", "true division"),
        ("share /= total", "true division"),
        ("hours = delta.total_seconds()", "total_seconds"),
        ("import math", "import of math"),
        ("from math import floor", "import of math"),
    ],
)
def test_the_scan_catches_each_hazard(source: str, what: str) -> None:
    assert any(what in hazard for hazard in float_hazards(source))


def test_the_scan_accepts_exact_arithmetic() -> None:
    clean = "q = Fraction(used, total) * price // 1000\nn = delta // timedelta(seconds=1)\n"
    assert float_hazards(clean) == []

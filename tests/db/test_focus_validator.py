"""The FOCUS export checked by the FinOps Foundation's own validator (`focus-validator` 2.2.1).

A generated ledger (every fee alignment with prorated opening ticks, usage meters with both
margins, deactivations, usage in two currencies, a closed month and corrections of it) is
exported with `finops export focus` exactly as a user would, then validated against FOCUS 1.2
with the applicability criteria `docs/focus.md` declares. Every failing rule must be one that
`docs/focus.md` lists as a validator fault (with the spec text that shows it does not apply);
any other failure fails the test, and so does a fault listed there that no longer fails.

The validator needs Python >= 3.12, so it lives in its own virtualenv, `.venv-focus`, which
`tools/setup.sh` creates. Without it the test is skipped on a developer's machine and fails
under CI (`CI` set), where setup must have made it.
"""

from __future__ import annotations

import csv
import os
import pathlib
import re
import subprocess
import xml.etree.ElementTree as ET
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from finops import cli
from finops.store import unit
from tests.db import periods_support as ps

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-focus"
DOC = ROOT / "docs" / "focus.md"
CLUSTER = "focus-conformance"
MICRO = Decimal("0.000001")


def validator() -> pathlib.Path:
    """The validator's executable, or a skip (a failure under CI) naming what to run."""
    exe = VENV / "bin" / "focus-validator"
    if not exe.exists():
        message = f"{exe} is missing: run tools/setup.sh (it needs Python >= 3.12)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return exe


def declared() -> tuple[list[str], set[str]]:
    """The applicability criteria and the validator faults `docs/focus.md` declares: the
    criteria are the `CRITERIA:` line's comma-separated list, the faults the rule ids that
    start a row of its fault table."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"^CRITERIA: (.+)$", text, re.MULTILINE)
    assert found, "docs/focus.md declares no CRITERIA: line"
    criteria = [c.strip() for c in found.group(1).split(",")]
    faults = set(re.findall(r"^\| `([A-Za-z]+-[A-Z]-\d{3}-[A-Z])` \|", text, re.MULTILINE))
    return criteria, faults


def failures(report: pathlib.Path) -> set[str]:
    """Rule ids of the failed test cases of the validator's JUnit report."""
    tree = ET.parse(report)
    failed = set()
    for case in tree.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(case.attrib["name"].split(" ")[0].strip(":"))
    return failed


def site_packages() -> pathlib.Path:
    """Where the validator's package lives: it opens its currency list by a path relative to
    there, so it runs with that as its working directory."""
    found = sorted(VENV.glob("lib/python3.*/site-packages"))
    assert found, f"no site-packages under {VENV}"
    return found[-1]


def test_the_export_passes_the_foundations_validator(
    ledger_dsn: str, tmp_path: pathlib.Path
) -> None:
    exe = validator()
    criteria, faults = declared()
    with unit.connect(ledger_dsn) as conn:
        ps.generated_ledger(conn, CLUSTER)
        assert corrections(conn) > 0
    out = tmp_path / "focus.csv"
    argv = ["export", "focus", "--dsn", ledger_dsn, "--cluster", CLUSTER, "--out", str(out)]
    argv += ["--from", "2026-03-01T00:00:00Z", "--to", "2026-05-01T00:00:00Z"]
    assert cli.main(argv) == 0
    holds_what_the_faults_ask(out)
    report = tmp_path / "report.xml"
    command = [str(exe), "--data-file", str(out), "--validate-version", "1.2"]
    command += ["--block-download", "--applicability-criteria", ",".join(criteria)]
    command += ["--output-type", "unittest", "--output-destination", str(report)]
    done = subprocess.run(
        command, cwd=site_packages(), capture_output=True, text=True, timeout=600, check=False
    )
    assert report.exists(), f"the validator wrote no report:\n{done.stdout}\n{done.stderr}"
    failed = failures(report)
    assert failed - faults == set(), f"rules failed beyond the documented faults:\n{done.stdout}"
    assert faults - failed == set(), "docs/focus.md lists faults the validator no longer reports"


def corrections(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM charge_corrections WHERE cluster = %s", (CLUSTER,)
    ).fetchone()
    return 0 if row is None else int(row[0])


def holds_what_the_faults_ask(export: pathlib.Path) -> None:
    """The export keeps the spec text of every rule the validator gets wrong, and has what
    the generated ledger was made to have (so the validator sees every kind of row)."""
    with export.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        assert (r["ConsumedQuantity"] == "") == (r["ChargeCategory"] != "Usage"), r
        assert r["InvoiceId"].startswith("INV-"), r
        assert r["EffectiveCost"] == r["BilledCost"], r
        list_cost = Decimal(r["ListUnitPrice"]) * Decimal(r["PricingQuantity"])
        assert Decimal(r["ListCost"]) == list_cost, r
        # Contracted cost and billed cost differ by the charge's one rounding at most.
        assert abs(Decimal(r["ContractedCost"]) - Decimal(r["BilledCost"])) < MICRO, r
    assert {r["BillingCurrency"] for r in rows} == {"EUR", "USD"}
    assert {r["ChargeClass"] for r in rows} == {"", "Correction"}
    fees = [r for r in rows if r["ChargeCategory"] == "Purchase"]
    assert {r["PricingUnit"] for r in fees} >= {"Hour", "6 Hours", "Day", "7 Days", "Month"}
    assert any(Decimal(r["PricingQuantity"]) % 1 for r in fees), "no prorated opening tick"
    assert any(r["ListUnitPrice"] != r["ContractedUnitPrice"] for r in rows), "no margin"
    assert {r["PricingUnit"] for r in fees} >= {"90 Minutes"}

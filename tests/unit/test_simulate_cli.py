"""`finops simulate`: an Offering's subscription fee hour by hour, for people and scripts."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
import yaml

from finops import cli

QUICK_START_OFFERING = {
    "apiVersion": "finops.stakater.com/v1alpha1",
    "kind": "Offering",
    "metadata": {"name": "platform-base", "namespace": "finops-operator-system"},
    "spec": {
        "pricing": {
            "subscriptionFee": {
                "period": "1h",
                "tickAlignment": "ActivatedAt",
                "priceMicros": 40000000,
            }
        }
    },
}


def offering_file(tmp_path: pathlib.Path, body: dict[str, Any], name: str = "o.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(body))
    return str(path)


def with_fee(**fee: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(json.dumps(QUICK_START_OFFERING))
    body["spec"]["pricing"]["subscriptionFee"] = fee
    return body


def simulate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(["simulate", *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


class TestJson:
    def test_the_deactivation_example_lists_every_hour_and_totals_200(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        status, out, err = simulate(
            capsys,
            offering_file(tmp_path, QUICK_START_OFFERING),
            "--activated-at=2026-04-01T09:00:00Z",
            "--deactivated-at=2026-04-01T13:42:07Z",
            "--from=2026-04-01T07:00:00Z",
            "--to=2026-04-01T17:00:00Z",
            "--json",
        )
        assert (status, err) == (0, "")
        body = json.loads(out)
        assert body["total_micros"] == 200_000_000
        assert [h["start"] for h in body["hours"]] == [
            f"2026-04-01T{h:02d}:00:00Z" for h in range(7, 17)
        ]
        assert [h["micros"] for h in body["hours"]] == [0, 0] + [40_000_000] * 5 + [0, 0, 0]
        assert set(body) == {"total_micros", "hours"}
        assert all(set(h) == {"start", "micros"} for h in body["hours"])

    def test_the_monthly_opening_tick_shows_in_the_last_hour_of_august(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = offering_file(
            tmp_path, with_fee(period="1", tickAlignment="MonthBoundary", priceMicros=300000000)
        )
        status, out, _ = simulate(
            capsys,
            path,
            "--activated-at",
            "2026-08-12T09:15:00Z",
            "--from",
            "2026-08-31T22:00:00Z",
            "--to",
            "2026-09-01T01:00:00Z",
            "--json",
        )
        assert status == 0
        body = json.loads(out)
        assert body["hours"] == [
            {"start": "2026-08-31T22:00:00Z", "micros": 0},
            {"start": "2026-08-31T23:00:00Z", "micros": 193326488},
            {"start": "2026-09-01T00:00:00Z", "micros": 0},
        ]
        assert body["total_micros"] == 193326488

    def test_a_usage_only_offering_costs_zero_every_hour(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        body = json.loads(json.dumps(QUICK_START_OFFERING))
        body["spec"]["pricing"] = {"resourcePricing": [{"name": "cpuHour"}]}
        status, out, _ = simulate(
            capsys,
            offering_file(tmp_path, body),
            "--activated-at=2026-04-01T09:00:00Z",
            "--from=2026-04-01T09:00:00Z",
            "--to=2026-04-01T12:00:00Z",
            "--json",
        )
        assert status == 0
        assert json.loads(out) == {
            "total_micros": 0,
            "hours": [{"start": f"2026-04-01T{h}:00:00Z", "micros": 0} for h in ("09", "10", "11")],
        }


class TestForPeople:
    def test_the_table_reads_in_currency_units(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        status, out, _ = simulate(
            capsys,
            offering_file(tmp_path, QUICK_START_OFFERING),
            "--activated-at=2026-04-01T09:00:00Z",
            "--deactivated-at=2026-04-01T13:42:07Z",
            "--from=2026-04-01T08:00:00Z",
            "--to=2026-04-01T15:00:00Z",
        )
        assert status == 0
        lines = out.splitlines()
        assert "finops-operator-system/platform-base" in lines[0]
        assert any("2026-04-01T14:00:00Z" in line for line in lines)  # the snapped end
        table = {
            line.split()[0]: line.split()[-1]
            for line in lines
            if line.startswith(("2026", "TOTAL"))
        }
        assert table["2026-04-01T08:00:00Z"] == "0.00"
        assert table["2026-04-01T09:00:00Z"] == "40.00"
        assert table["2026-04-01T14:00:00Z"] == "0.00"
        assert table["TOTAL"] == "200.00"
        assert len(table) == 8

    def test_a_prorated_opening_tick_keeps_its_micros(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = offering_file(
            tmp_path, with_fee(period="1", tickAlignment="MonthBoundary", priceMicros=300000000)
        )
        status, out, _ = simulate(
            capsys,
            path,
            "--activated-at=2026-08-12T09:15:00Z",
            "--from=2026-08-31T23:00:00Z",
            "--to=2026-09-01T00:00:00Z",
        )
        assert status == 0
        assert "TOTAL" in out and out.rstrip().endswith("193.326488")


class TestRefusals:
    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--from=2026-04-01T09:30:00Z", "--to=2026-04-01T12:00:00Z"], "not a whole hour"),
            (["--from=2026-04-01T09:00:00Z", "--to=2026-04-01T12:00:01Z"], "not a whole hour"),
            (["--from=2026-04-01T12:00:00Z", "--to=2026-04-01T12:00:00Z"], "later than --from"),
            (["--from=yesterday", "--to=2026-04-01T12:00:00Z"], "not an RFC 3339 time"),
            (["--from=2026-04-01T09:00:00", "--to=2026-04-01T12:00:00Z"], "no timezone"),
            (["--to=2026-04-01T12:00:00Z"], "--from is required"),
        ],
    )
    def test_bad_windows_exit_1_with_a_clear_message(
        self,
        tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str],
        args: list[str],
        message: str,
    ) -> None:
        status, out, err = simulate(
            capsys,
            offering_file(tmp_path, QUICK_START_OFFERING),
            "--activated-at=2026-04-01T09:00:00Z",
            *args,
        )
        assert status == 1 and out == ""
        assert message in err and err.startswith("finops simulate: ")

    def test_a_missing_activation_exits_1(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        status, _, err = simulate(
            capsys,
            offering_file(tmp_path, QUICK_START_OFFERING),
            "--from=2026-04-01T09:00:00Z",
            "--to=2026-04-01T10:00:00Z",
        )
        assert status == 1 and "--activated-at is required" in err

    def test_a_deactivation_before_activation_exits_1(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        status, _, err = simulate(
            capsys,
            offering_file(tmp_path, QUICK_START_OFFERING),
            "--activated-at=2026-04-01T09:00:00Z",
            "--deactivated-at=2026-04-01T08:00:00Z",
            "--from=2026-04-01T09:00:00Z",
            "--to=2026-04-01T10:00:00Z",
        )
        assert status == 1 and "earlier than --activated-at" in err

    def run_window(self, capsys: pytest.CaptureFixture[str], path: str) -> tuple[int, str, str]:
        return simulate(
            capsys,
            path,
            "--activated-at=2026-04-01T09:00:00Z",
            "--from=2026-04-01T09:00:00Z",
            "--to=2026-04-01T10:00:00Z",
            "--json",
        )

    def test_a_period_that_does_not_fit_its_alignment_is_refused_by_the_contract(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        path = offering_file(
            tmp_path, with_fee(period="1", tickAlignment="ActivatedAt", priceMicros=40000000)
        )
        status, out, err = self.run_window(capsys, path)
        assert status == 1 and out == ""
        assert "is not a valid Offering" in err
        assert (
            "period must be a Go duration (e.g. '1h') for ActivatedAt alignment, "
            "or a plain integer for boundary alignments"
        ) in err

    def test_rules_outside_the_fee_are_checked_too(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        # The fee is fine; only the contract's margin rule can refuse this Offering.
        body = json.loads(json.dumps(QUICK_START_OFFERING))
        body["spec"]["pricing"]["resourcePricing"] = [
            {"name": "cpuHour", "margins": {"absoluteMicros": 200, "factorMilli": 1150}}
        ]
        status, _, err = self.run_window(capsys, offering_file(tmp_path, body))
        assert status == 1
        assert "absoluteMicros and factorMilli are mutually exclusive" in err

    def test_another_kind_is_refused(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        body = {**QUICK_START_OFFERING, "kind": "PriceBook"}
        status, _, err = self.run_window(capsys, offering_file(tmp_path, body))
        assert status == 1 and "not an Offering" in err

    def test_an_unreadable_or_malformed_file_is_refused(
        self, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        status, _, err = self.run_window(capsys, str(tmp_path / "missing.yaml"))
        assert status == 1 and "cannot read" in err
        broken = tmp_path / "broken.yaml"
        broken.write_text("kind: Offering\nspec: [unclosed\n")
        status, _, err = self.run_window(capsys, str(broken))
        assert status == 1 and "not valid YAML" in err

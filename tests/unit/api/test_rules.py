"""The rule table: interval spellings, cron schedules, and agreement with cel-python."""

from __future__ import annotations

import pytest

from finops.api import rules, validation

INTERVAL_RULE = next(r for r in rules.RULES if r.path == "spec.interval")


@pytest.mark.parametrize(
    ("interval", "schedule"),
    [
        # concepts/costjob.md's table, and its "parsed duration" equivalences.
        ("1h", "0 * * * *"),
        ("6h", "0 */6 * * *"),
        ("12h", "0 */12 * * *"),
        ("24h", "0 0 * * *"),
        ("1m", "* * * * *"),
        ("5m", "*/5 * * * *"),
        ("60m", "0 * * * *"),
        ("1440m", "0 0 * * *"),
        # DESIGN §2.2: the values the reference silently turned into daily runs.
        ("2h", "0 */2 * * *"),
        ("8h", "0 */8 * * *"),
        ("30m", "*/30 * * * *"),
        ("3600s", "0 * * * *"),
        ("1h0m0s", "0 * * * *"),
    ],
)
def test_accepted_intervals_map_to_their_cron_schedule(interval: str, schedule: str) -> None:
    assert rules.interval_schedule(interval) == schedule


@pytest.mark.parametrize("interval", ["7m", "90m", "5h", "25h", "48h", "45s", "1d", "1.5h", ""])
def test_other_intervals_have_no_schedule(interval: str) -> None:
    assert rules.interval_schedule(interval) is None


SPELLINGS = [
    *(f"{m}m" for m in range(0, 121)),
    *(f"{h}h" for h in range(0, 50)),
    *(f"{s}s" for s in (30, 60, 90, 120, 300, 3599, 3600, 7200, 86400, 86401)),
    "1h30m", "0h60m", "23h60m", "1h0m0s", "24h0m", "", "h", "1", "1H", "-1h", "1.0h", "1m30s",
    "99999h", "0000001h",
]  # fmt: skip


@pytest.mark.parametrize("interval", SPELLINGS)
def test_the_cel_interval_rule_accepts_exactly_what_has_a_schedule(interval: str) -> None:
    passed, problem = validation._evaluate(INTERVAL_RULE.rule, interval, None)
    assert problem is None
    assert passed == (rules.interval_schedule(interval) is not None)


def test_the_interval_message_lists_every_accepted_duration() -> None:
    for minutes in rules.INTERVAL_MINUTES:
        assert f"{minutes}m" in rules.INTERVAL_MESSAGE
    for hours in rules.INTERVAL_HOURS:
        assert f"{hours}h" in rules.INTERVAL_MESSAGE


def test_transition_rules_are_exactly_those_reading_old_self() -> None:
    for rule in rules.RULES:
        assert rule.transition == ("oldSelf" in rule.rule), rule


def test_every_kind_with_rules_is_a_defined_kind() -> None:
    assert {r.kind for r in rules.RULES} == {
        "FinOpsProvider",
        "Offering",
        "Subscription",
        "CostJob",
        "Budget",
    }

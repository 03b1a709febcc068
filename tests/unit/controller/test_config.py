"""The manager's environment: required variables named, exact-string switches."""

from __future__ import annotations

import pytest

from finops.controller import config, serving

FULL = {
    "POSTGRES_CONNECTION_STRING": "postgresql://x",
    "OPENCOST_CONNECTION_STRING": "http://oc:9003",
    "OPENCOST_DEPLOYMENT_NAME": "oc",
    "OPENCOST_DEPLOYMENT_NAMESPACE": "finops",
    "POD_NAMESPACE": "finops-system",
}


@pytest.mark.parametrize("missing", config.REQUIRED)
def test_each_missing_required_variable_is_named(missing: str) -> None:
    env = {k: v for k, v in FULL.items() if k != missing}
    with pytest.raises(config.ConfigError, match=missing):
        config.from_env(env)


@pytest.mark.parametrize(("value", "on"), [("true", True), ("True", False), ("1", False)])
def test_mto_only_for_the_exact_string_true(value: str, on: bool) -> None:
    assert config.from_env({**FULL, "MTO_ENABLED": value}).mto_enabled is on


def test_costjob_namespaces_default_to_the_operators_own() -> None:
    s = config.from_env(FULL)
    assert s.costjob_namespace_allowed("finops-system")
    assert not s.costjob_namespace_allowed("team-a")
    s = config.from_env({**FULL, "COSTJOB_ALLOWED_NAMESPACES": "a, b"})
    assert s.costjob_namespace_allowed("b") and not s.costjob_namespace_allowed("finops-system")
    assert config.from_env({**FULL, "COSTJOB_ALLOWED_NAMESPACES": "*"}).costjob_namespace_allowed(
        "z"
    )


def test_bind_addresses() -> None:
    assert serving.parse_bind_address(":8081") == ("0.0.0.0", 8081)
    assert serving.parse_bind_address("127.0.0.1:9") == ("127.0.0.1", 9)
    assert serving.parse_bind_address("0") is None


@pytest.mark.parametrize(("value", "workers"), [(None, 4), ("", 4), (" ", 4), ("1", 1), ("8", 8)])
def test_workers_default_to_four_and_take_a_positive_count(value: str | None, workers: int) -> None:
    env = FULL if value is None else {**FULL, "FINOPS_WORKERS": value}
    assert config.from_env(env).workers == workers


@pytest.mark.parametrize("value", ["0", "-2", "2.5", "four", "1e2", "4_0", "+4", "٣"])
def test_a_worker_count_that_is_not_a_positive_whole_number_is_refused_by_name(
    value: str,
) -> None:
    with pytest.raises(config.ConfigError, match="FINOPS_WORKERS") as caught:
        config.from_env({**FULL, "FINOPS_WORKERS": value})
    assert repr(value) in str(caught.value)


@pytest.mark.parametrize(
    ("name", "field"),
    [
        ("FINOPS_RESYNC_SECONDS", "resync_seconds"),
        ("FINOPS_LEASE_DURATION_SECONDS", "lease_duration_seconds"),
    ],
)
def test_a_duration_is_read_and_one_not_positive_and_finite_is_refused_by_name(
    name: str, field: str
) -> None:
    assert getattr(config.from_env({**FULL, name: "7.5"}), field) == 7.5
    for bad in ("5m", "0", "-1", "nan", "inf"):
        with pytest.raises(config.ConfigError, match=name) as caught:
            config.from_env({**FULL, name: bad})
        assert repr(bad) in str(caught.value)


@pytest.mark.parametrize(
    ("value", "policy"), [(None, ""), ("", ""), ("Never", "Never"), (" Always ", "Always")]
)
def test_the_job_image_pull_policy_is_read_when_set(value: str | None, policy: str) -> None:
    env = FULL if value is None else {**FULL, "OPERATOR_IMAGE_PULL_POLICY": value}
    assert config.from_env(env).operator_image_pull_policy == policy


@pytest.mark.parametrize("value", ["never", "Sometimes"])
def test_an_unknown_job_image_pull_policy_is_refused_by_name(value: str) -> None:
    with pytest.raises(config.ConfigError, match="OPERATOR_IMAGE_PULL_POLICY"):
        config.from_env({**FULL, "OPERATOR_IMAGE_PULL_POLICY": value})


def test_billing_period_settings_are_checked_at_start_and_kept_for_the_charge_jobs() -> None:
    assert config.from_env(FULL).billing_env == ()
    env = {**FULL, "FINOPS_BILLING_TIME_ZONE": " Europe/Berlin ", "FINOPS_PERIOD_GRACE_HOURS": "6"}
    assert config.from_env(env).billing_env == (
        ("FINOPS_BILLING_TIME_ZONE", "Europe/Berlin"),
        ("FINOPS_PERIOD_GRACE_HOURS", "6"),
    )
    with pytest.raises(config.ConfigError, match="FINOPS_BILLING_TIME_ZONE 'Asia/Kolkata'"):
        config.from_env({**FULL, "FINOPS_BILLING_TIME_ZONE": "Asia/Kolkata"})
    with pytest.raises(config.ConfigError, match="FINOPS_PERIOD_GRACE_HOURS"):
        config.from_env({**FULL, "FINOPS_PERIOD_GRACE_HOURS": "a day"})


def test_ledger_retention_is_checked_at_start_and_kept_for_the_charge_jobs() -> None:
    env = {
        **FULL,
        "FINOPS_LEDGER_RETENTION_MONTHS": "13",
        "FINOPS_LEDGER_RETENTION_ACTION": "drop",
    }
    assert config.from_env(env).billing_env == (
        ("FINOPS_LEDGER_RETENTION_MONTHS", "13"),
        ("FINOPS_LEDGER_RETENTION_ACTION", "drop"),
    )
    with pytest.raises(config.ConfigError, match="FINOPS_LEDGER_RETENTION_MONTHS"):
        config.from_env({**FULL, "FINOPS_LEDGER_RETENTION_MONTHS": "a year"})
    with pytest.raises(config.ConfigError, match="FINOPS_LEDGER_RETENTION_ACTION"):
        config.from_env({**FULL, "FINOPS_LEDGER_RETENTION_ACTION": "archive"})

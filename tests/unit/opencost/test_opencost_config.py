"""Run settings come from the pod's variables, then the CostJob spec, then the defaults."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from finops.opencost import config

URL = {"OPENCOST_CONNECTION_STRING": "http://opencost:9003/"}


def test_defaults_match_the_documented_table() -> None:
    cfg = config.OpenCostConfig.from_sources({}, URL)
    assert cfg.base_url == "http://opencost:9003"  # trailing slash trimmed
    assert (cfg.aggregate, cfg.step, cfg.resolution) == ("namespace,pod,container", "1h", "1m")
    assert cfg.fetch_timeout == dt.timedelta(minutes=2)
    assert cfg.sharding is None
    assert config.Timeouts.from_sources({}, {}) == config.Timeouts(
        database_init=dt.timedelta(minutes=2),
        kubernetes_operation=dt.timedelta(minutes=1),
        opencost_fetch=dt.timedelta(minutes=2),
        database_insert=dt.timedelta(minutes=3),
        status_update=dt.timedelta(minutes=1),
        http_client=dt.timedelta(seconds=90),
    )


def test_query_shape_variables_override_the_defaults() -> None:
    env = {**URL, "OPENCOST_AGGREGATE": "namespace", "OPENCOST_STEP": "10m"}
    env["OPENCOST_RESOLUTION"] = "5m"
    cfg = config.OpenCostConfig.from_sources({}, env)
    assert (cfg.aggregate, cfg.step, cfg.resolution) == ("namespace", "10m", "5m")


def test_a_timeout_variable_wins_over_the_spec_field_which_wins_over_the_default() -> None:
    spec = {"openCostFetchTimeout": "5m", "databaseInsertTimeout": "10m"}
    timeouts = config.Timeouts.from_sources(spec, {"OPENCOST_FETCH_TIMEOUT": "90s"})
    assert timeouts.opencost_fetch == dt.timedelta(seconds=90)
    assert timeouts.database_insert == dt.timedelta(minutes=10)
    assert timeouts.status_update == dt.timedelta(minutes=1)
    assert config.OpenCostConfig.from_sources(spec, URL).fetch_timeout == dt.timedelta(minutes=5)


def test_an_unparsable_timeout_is_logged_and_the_default_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        timeouts = config.Timeouts.from_sources(
            {"statusUpdateTimeout": "soon"}, {"K8S_OPERATION_TIMEOUT": "-1m"}
        )
    assert timeouts.status_update == dt.timedelta(minutes=1)
    assert timeouts.kubernetes_operation == dt.timedelta(minutes=1)
    assert "spec.statusUpdateTimeout='soon'" in caplog.text
    assert "K8S_OPERATION_TIMEOUT='-1m'" in caplog.text


def test_sharding_is_opt_in_and_fills_documented_defaults() -> None:
    assert config.ShardPlan.from_spec({}) is None
    assert config.ShardPlan.from_spec({"sharding": {}}) == config.ShardPlan(25, 4)
    got = config.ShardPlan.from_spec({"sharding": {"namespacesPerShard": 3, "concurrency": 2}})
    assert got == config.ShardPlan(3, 2)
    assert config.ShardPlan.from_spec({"sharding": {"concurrency": 0}}) == config.ShardPlan(25, 4)


def test_a_missing_opencost_url_is_refused() -> None:
    with pytest.raises(ValueError, match="OPENCOST_CONNECTION_STRING"):
        config.OpenCostConfig.from_sources({}, {"OPENCOST_CONNECTION_STRING": " "})

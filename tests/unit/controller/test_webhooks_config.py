"""Switching the webhook server: only the exact string "false" turns it off; its address."""

from __future__ import annotations

import pytest

from finops.controller import config

FULL = {
    "POSTGRES_CONNECTION_STRING": "postgresql://x",
    "OPENCOST_CONNECTION_STRING": "http://oc:9003",
    "OPENCOST_DEPLOYMENT_NAME": "oc",
    "OPENCOST_DEPLOYMENT_NAMESPACE": "finops",
    "POD_NAMESPACE": "finops-system",
}


@pytest.mark.parametrize(
    ("value", "on"), [("false", False), ("False", True), ("", True), ("0", True), ("true", True)]
)
def test_webhooks_are_off_only_for_the_exact_string_false(value: str, on: bool) -> None:
    assert config.from_env({**FULL, "ENABLE_WEBHOOKS": value}).enable_webhooks is on


def test_webhooks_are_on_when_the_variable_is_absent() -> None:
    assert config.from_env(FULL).enable_webhooks is True


def test_the_webhook_port_defaults_to_9443_on_every_interface() -> None:
    assert config.from_env(FULL).webhook_bind_address == ":9443"


def test_the_webhook_bind_address_can_be_moved() -> None:
    env = {**FULL, "WEBHOOK_BIND_ADDRESS": "127.0.0.1:19443"}
    assert config.from_env(env).webhook_bind_address == "127.0.0.1:19443"

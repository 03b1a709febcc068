"""The console scripts exist, refuse unbuilt modes clearly, and check the controller's env."""

from __future__ import annotations

import pytest

from finops import logs, operator
from finops.controller import config


def test_collectionjob_without_a_database_exits_non_zero_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("POSTGRES_CONNECTION_STRING", raising=False)
    monkeypatch.setattr(logs, "configure", lambda *_: None)  # keep pytest's log capture
    assert operator.main(["--mode=collectionjob"]) == 1
    assert "POSTGRES_CONNECTION_STRING" in caplog.text


def test_controller_without_required_env_exits_non_zero_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in config.REQUIRED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POSTGRES_CONNECTION_STRING", "postgresql://x")
    assert operator.main(["--mode=controller", "--skipDBConnection"]) == 1
    assert "OPENCOST_CONNECTION_STRING" in capsys.readouterr().err


def test_cronjob_without_required_env_exits_non_zero_naming_the_variables(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("COSTJOB_NAME", "COSTJOB_NAMESPACE", "POSTGRES_CONNECTION_STRING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENCOST_CONNECTION_STRING", "http://127.0.0.1:9003")
    monkeypatch.setattr(logs, "configure", lambda *_: None)  # keep pytest's log capture
    assert operator.main(["--mode=cronjob"]) == 1
    assert "COSTJOB_NAME" in caplog.text and "POSTGRES_CONNECTION_STRING" in caplog.text


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        operator.main(["--mode=gateway-xyz"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("argv", "secure"),
    [
        ([], True),
        (["--metrics-secure"], True),
        (["--metrics-secure=false"], False),
        (["--metrics-secure=true"], True),
    ],
)
def test_metrics_secure_defaults_to_true_like_the_reference(argv: list[str], secure: bool) -> None:
    assert operator.build_parser().parse_args(argv).metrics_secure is secure


def test_a_bad_boolean_flag_value_is_refused() -> None:
    with pytest.raises(SystemExit):
        operator.build_parser().parse_args(["--metrics-secure=maybe"])

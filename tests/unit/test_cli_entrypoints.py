"""The console scripts exist, refuse unbuilt modes clearly, and check the controller's env."""

from __future__ import annotations

import pytest

from finops import logs, operator
from finops.controller import config


@pytest.mark.parametrize("mode", ["collectionjob"])
def test_unbuilt_mode_says_not_implemented_and_exits_2(
    mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert operator.main([f"--mode={mode}"]) == 2
    assert "not implemented yet" in capsys.readouterr().err


def test_controller_without_required_env_exits_non_zero_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in config.REQUIRED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POSTGRES_CONNECTION_STRING", "postgresql://x")
    assert operator.main(["--mode=controller", "--skipDBConnection"]) == 1
    assert "OPENCOST_CONNECTION_STRING" in capsys.readouterr().err


def test_cronjob_without_required_env_exits_non_zero_naming_the_variables(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("COSTJOB_NAME", "COSTJOB_NAMESPACE", "POSTGRES_CONNECTION_STRING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENCOST_CONNECTION_STRING", "http://127.0.0.1:9003")
    # Keep pytest's root logger as it is: the message reaches stderr through lastResort.
    monkeypatch.setattr(logs, "configure", lambda: None)
    assert operator.main(["--mode=cronjob"]) == 1
    err = capsys.readouterr().err
    assert "COSTJOB_NAME" in err and "POSTGRES_CONNECTION_STRING" in err


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        operator.main(["--mode=gateway-xyz"])
    assert exc.value.code == 2

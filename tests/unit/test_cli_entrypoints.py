"""The console scripts exist and refuse unbuilt modes clearly."""

from __future__ import annotations

import pytest

from finops import operator


@pytest.mark.parametrize("mode", ["controller", "cronjob", "collectionjob"])
def test_unbuilt_mode_says_not_implemented_and_exits_2(
    mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert operator.main([f"--mode={mode}"]) == 2
    assert "not implemented yet" in capsys.readouterr().err


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        operator.main(["--mode=gateway-xyz"])
    assert exc.value.code == 2

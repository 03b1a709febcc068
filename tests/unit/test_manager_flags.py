"""The manager's command line: every documented flag is accepted and honoured, mistakes are
refused in one line naming the flag and what it accepts, and `--help` lists every default."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys

import pytest
from tests import manager_flags

from finops import logs, operator

FIELDS = {
    "metrics_address": ":8443",
    "probe_address": ":8081",
    "webhook_certs": "/tmp/k8s-webhook-server/serving-certs",
    "metrics_certs": "/tmp/k8s-metrics-server/metrics-certs",
}


def refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Parse `argv`, expect Go's exit status 2, and return the one line printed."""
    with pytest.raises(SystemExit) as exc:
        operator.build_parser().parse_args(argv)
    assert exc.value.code == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    assert "Traceback" not in out.err and "usage:" not in out.err
    return lines[0]


def test_the_whole_documented_flag_list_is_accepted_and_each_value_taken() -> None:
    args = operator.build_parser().parse_args(manager_flags.argv(**FIELDS))
    assert (args.mode, args.skipDBConnection, args.leader_elect) == ("controller", True, True)
    assert (args.metrics_bind_address, args.health_probe_bind_address) == (":8443", ":8081")
    assert args.metrics_secure is True
    assert (args.webhook_cert_path, args.webhook_cert_name, args.webhook_cert_key) == (
        FIELDS["webhook_certs"],
        "tls.crt",
        "tls.key",
    )
    assert (args.metrics_cert_path, args.metrics_cert_name, args.metrics_cert_key) == (
        FIELDS["metrics_certs"],
        "tls.crt",
        "tls.key",
    )
    assert operator.log_options(args) == logs.Options(
        level=logging.DEBUG,
        encoder="json",
        stacktrace_level=logging.ERROR,
        time_encoding="iso8601",
    )


def test_help_lists_every_documented_flag_with_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        operator.build_parser().parse_args(["--help"])
    assert exc.value.code == 0
    options = capsys.readouterr().out.split("options:", 1)[1]
    # One entry per flag: its line and the indented lines that continue it.
    entries = {
        m.group(1): " ".join(m.group(0).split())
        for m in re.finditer(r"^  (--[\w-]+)[^\n]*(?:\n {4,}[^\n]*)*", options, re.MULTILINE)
    }
    for flag, _ in manager_flags.DOCUMENTED:
        assert flag in entries, flag
        assert "(default: " in entries[flag], entries[flag]
    assert entries["--metrics-bind-address"].endswith("(default: 0)")
    assert entries["--metrics-secure"].endswith("(default: true)")
    assert entries["--leader-elect"].endswith("(default: false)")
    assert entries["--webhook-cert-name"].endswith("(default: tls.crt)")


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--zap-log-level=verbose"], ("--zap-log-level", "debug, info, error")),
        (["--zap-log-level=0"], ("--zap-log-level", "integer > 0")),
        (["--zap-encoder=yaml"], ("--zap-encoder", "json, console")),
        (["--zap-stacktrace-level=warn"], ("--zap-stacktrace-level", "info, error, panic")),
        (["--zap-time-encoding=unix"], ("--zap-time-encoding", "rfc3339")),
        (["--zap-devel=maybe"], ("--zap-devel", "true, false")),
        (["--leader-elect=yes please"], ("--leader-elect", "true, false")),
        (["--metrics-bind-address=8443"], ("--metrics-bind-address", "HOST:PORT")),
        (["--health-probe-bind-address=:http"], ("--health-probe-bind-address", ":PORT")),
        (["--mode=gateway"], ("--mode", "controller, cronjob, collectionjob")),
        (["--metrics-cert-path"], ("--metrics-cert-path", "expected one argument")),
    ],
)
def test_a_bad_value_is_one_line_naming_the_flag_and_what_it_accepts(
    capsys: pytest.CaptureFixture[str], argv: list[str], names: tuple[str, ...]
) -> None:
    line = refusal(capsys, argv)
    assert line.startswith("finops-operator: ")
    for name in names:
        assert name in line


def test_an_unknown_flag_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    line = refusal(capsys, ["--leader-elect", "--zap-colour=on", "--verbose"])
    assert "unknown flag --zap-colour=on" in line and "--help" in line


def test_a_stray_word_is_named_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert "unexpected argument extra" in refusal(capsys, ["--mode=controller", "extra"])


def test_prefixes_are_not_guessed(capsys: pytest.CaptureFixture[str]) -> None:
    assert "unknown flag --zap-log" in refusal(capsys, ["--zap-log=debug"])


def test_go_spellings_are_accepted() -> None:
    args = operator.build_parser().parse_args(
        ["-leader-elect=false", "-zap-log-level", "2", "--skipDBConnection=true", "-zap-devel"]
    )
    assert args.leader_elect is False and args.skipDBConnection is True and args.zap_devel
    # logr's V(2): one step more verbose than debug.
    assert operator.log_options(args).level == logging.DEBUG - 1


def test_zap_devel_changes_the_defaults_and_explicit_flags_still_win() -> None:
    parse = operator.build_parser().parse_args
    assert operator.log_options(parse([])) == logs.Options()
    assert operator.log_options(parse(["--zap-devel"])) == logs.Options(
        level=logging.DEBUG, encoder="console", stacktrace_level=logging.WARNING
    )
    mixed = operator.log_options(
        parse(["--zap-devel", "--zap-encoder=json", "--zap-stacktrace-level=panic"])
    )
    assert (mixed.encoder, mixed.level, mixed.stacktrace_level) == (
        "json",
        logging.DEBUG,
        logging.CRITICAL,
    )


def record(level: int, msg: str = "hello", **extra: object) -> logging.LogRecord:
    rec = logging.makeLogRecord(
        {"name": "finops.test", "levelno": level, "levelname": logging.getLevelName(level)}
    )
    rec.msg, rec.created = msg, 1_780_000_000.25
    rec.__dict__.update(extra)
    return rec


@pytest.mark.parametrize(
    ("encoding", "ts"),
    [
        ("rfc3339nano", "2026-05-28T20:26:40.250000+00:00"),
        ("rfc3339", "2026-05-28T20:26:40Z"),
        ("iso8601", "2026-05-28T20:26:40.250Z"),
        ("epoch", 1_780_000_000.25),
        ("millis", 1_780_000_000_250.0),
        ("nanos", 1_780_000_000_250_000_000),
    ],
)
def test_time_encodings(encoding: str, ts: object) -> None:
    formatter = logs.JsonFormatter(logs.Options(time_encoding=encoding))
    assert json.loads(formatter.format(record(logging.INFO)))["ts"] == ts


def failed_record() -> logging.LogRecord:
    try:
        raise ValueError("boom")
    except ValueError:
        return record(logging.ERROR, exc_info=sys.exc_info())


def test_by_default_only_logged_exceptions_carry_a_trace() -> None:
    default = logs.JsonFormatter(logs.Options())
    assert "stacktrace" not in json.loads(default.format(record(logging.ERROR)))
    assert "Traceback" in json.loads(default.format(failed_record()))["error_trace"]


def test_call_site_stacks_start_at_the_stacktrace_level() -> None:
    errors = logs.JsonFormatter(logs.Options(stacktrace_level=logging.ERROR))
    assert "stacktrace" not in json.loads(errors.format(record(logging.WARNING)))
    stack = json.loads(errors.format(record(logging.ERROR)))["stacktrace"]
    assert "test_manager_flags.py" in stack and "logging/__init__.py" not in stack
    quiet = logs.JsonFormatter(logs.Options(stacktrace_level=logging.CRITICAL))
    line = json.loads(quiet.format(failed_record()))
    assert line["exception"] == "ValueError('boom')"
    assert "stacktrace" not in line and "error_trace" not in line


def test_the_console_encoder_writes_tab_separated_lines() -> None:
    formatter = logs.ConsoleFormatter(logs.Options(encoder="console", time_encoding="rfc3339"))
    line = formatter.format(record(logging.INFO, "reconciled", controller="pricebook"))
    assert line.split("\t") == [
        "2026-05-28T20:26:40Z",
        "INFO",
        "finops.test",
        "reconciled",
        '{"controller": "pricebook"}',
    ]


def test_the_binary_exits_2_with_one_line_on_an_unknown_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "finops.operator", "--zap-log-level=debug", "--zap-colour=on"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "finops-operator: unknown flag --zap-colour=on; run 'finops-operator --help' for every flag"
    ]


def test_the_binary_logs_as_the_zap_flags_say() -> None:
    """A job mode that stops at once (no database configured) shows the wiring end to end."""
    argv = [sys.executable, "-m", "finops.operator", "--mode=collectionjob"]
    env = {k: v for k, v in os.environ.items() if k != "POSTGRES_CONNECTION_STRING"}
    console = subprocess.run(
        [*argv, "--zap-encoder=console", "--zap-time-encoding=rfc3339"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert console.returncode == 1
    ts, level, logger, msg = console.stderr.splitlines()[0].split("\t")[:4]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", ts)
    assert (level, logger) == ("ERROR", "finops.jobs.charges")
    assert "POSTGRES_CONNECTION_STRING" in msg
    quiet = subprocess.run(
        [*argv, "--zap-log-level=error", "--zap-time-encoding=epoch"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    [line] = [json.loads(x) for x in quiet.stderr.splitlines()]
    assert line["level"] == "error" and isinstance(line["ts"], float)

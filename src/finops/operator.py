"""The operator binary: one image, one entry point, a mode per process.

Every mode registers the reference manager's whole flag set (configuration reference, "Manager
flags"), Go-style: `--flag=value` or `--flag value`, one or two leading dashes, booleans as
`--flag`, `--flag=true` or `--flag=false`, no abbreviations. A wrong flag or value is one line
naming the flag and what it accepts, and exit status 2, as Go's flag package does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from finops import logs

PROG = "finops-operator"
MODES = ("controller", "cronjob", "collectionjob")
_TRUE = ("true", "1", "t")
_FALSE = ("false", "0", "f")


def _flag(value: str) -> bool:
    """A Go-style boolean flag value (`--flag=false`)."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {value!r} (accepted: true, false, 1, 0)")


def _bind_address(value: str) -> str:
    """`HOST:PORT`, `:PORT`, or `0` (disabled); checked here so a typo never reaches a socket."""
    if value in ("", "0"):
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535 or ":" in host.strip("[]"):
        raise argparse.ArgumentTypeError(
            f"invalid address {value!r} (accepted: HOST:PORT, :PORT, or 0 to disable)"
        )
    return value


def _mode(value: str) -> str:
    if value not in MODES:
        raise argparse.ArgumentTypeError(f"invalid mode {value!r} (accepted: {', '.join(MODES)})")
    return value


def _checked(parse: Callable[[str], object]) -> Callable[[str], object]:
    """A `logs` value parser whose ValueError becomes the flag parser's one-line refusal."""

    def check(value: str) -> object:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    check.__name__ = parse.__name__
    return check


class _HelpFormatter(argparse.HelpFormatter):
    """Appends each flag's default, written as the reference writes it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is argparse.SUPPRESS or "(default" in text:
            return text
        default = action.default
        shown = str(default).lower() if isinstance(default, bool) else (default or '""')
        return f"{text} (default: {shown})"


class FlagParser(argparse.ArgumentParser):
    """argparse with Go's flag conventions and a one-line refusal (exit 2, no usage dump)."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            unknown = message.removeprefix("unrecognized arguments: ").split()
            kind = "unknown flag" if unknown[0].startswith("-") else "unexpected argument"
            message = f"{kind} {unknown[0]}" + (
                f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
            )
        else:
            message = message.removeprefix("argument ")
        self.exit(2, f"{PROG}: {message}; run '{PROG} --help' for every flag\n")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        """Parse after turning Go's single-dash spelling (`-leader-elect`) into ours."""
        argv = list(sys.argv[1:] if args is None else args)
        known = set(self._option_string_actions)
        fixed = [
            f"-{a}" if a[:1] == "-" and a[1:2] != "-" and f"-{a.split('=', 1)[0]}" in known else a
            for a in argv
        ]
        return super().parse_args(fixed)


def _bool(p: argparse.ArgumentParser, name: str, default: bool, text: str) -> None:
    p.add_argument(
        name, nargs="?", const=True, default=default, type=_flag, metavar="BOOL", help=text
    )


def _add_manager_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mode",
        type=_mode,
        default="controller",
        metavar="MODE",
        help="controller (long-lived manager), cronjob (allocation collection) "
        "or collectionjob (subscription charge collection)",
    )
    _bool(p, "--skipDBConnection", False, "do not connect to PostgreSQL or migrate at start")
    p.add_argument(
        "--metrics-bind-address",
        type=_bind_address,
        default="0",
        metavar="ADDRESS",
        help="address the metrics endpoint binds to ('0' disables it)",
    )
    _bool(p, "--metrics-secure", True, "serve metrics over HTTPS to authorised callers only")
    p.add_argument(
        "--health-probe-bind-address",
        type=_bind_address,
        default=":8081",
        metavar="ADDRESS",
        help="address the liveness and readiness endpoints bind to",
    )
    _bool(p, "--leader-elect", False, "elect a leader through a Lease before acting")
    _add_cert_flags(
        p,
        "webhook",
        "directory holding the webhook serving certificate "
        "(empty: /tmp/k8s-webhook-server/serving-certs)",
    )
    _add_cert_flags(
        p,
        "metrics",
        "directory holding the metrics serving certificate, reloaded when it changes "
        "(empty: a self-signed certificate made at start)",
    )


def _add_cert_flags(p: argparse.ArgumentParser, server: str, path_help: str) -> None:
    """`--<server>-cert-path`, `-cert-name` and `-cert-key`: where a server's certificate is."""
    p.add_argument(f"--{server}-cert-path", default="", metavar="DIR", help=path_help)
    p.add_argument(
        f"--{server}-cert-name",
        metavar="FILE",
        default="tls.crt",
        help=f"{server} certificate file name",
    )
    p.add_argument(
        f"--{server}-cert-key",
        metavar="FILE",
        default="tls.key",
        help=f"{server} private key file name",
    )


def _add_zap_flags(p: argparse.ArgumentParser) -> None:
    _bool(
        p,
        "--zap-devel",
        False,
        "development defaults: console encoder, debug level, stack traces from warnings up",
    )
    p.add_argument(
        "--zap-encoder",
        type=_checked(logs.parse_encoder),
        metavar="json|console",
        help="log line format (default: json, or console with --zap-devel)",
    )
    p.add_argument(
        "--zap-log-level",
        type=_checked(logs.parse_level),
        metavar="LEVEL",
        help="debug, info, error, or an integer > 0 for more verbosity "
        "(default: info; debug with --zap-devel)",
    )
    p.add_argument(
        "--zap-stacktrace-level",
        type=_checked(logs.parse_stacktrace_level),
        metavar="info|error|panic",
        help="lowest level whose lines carry a call-site stack trace "
        "(default: none, only logged exceptions keep theirs; warn with --zap-devel)",
    )
    p.add_argument(
        "--zap-time-encoding",
        type=_checked(logs.parse_time_encoding),
        metavar="ENCODING",
        help=f"how 'ts' is written: {', '.join(logs.TIME_ENCODINGS)} (default: rfc3339nano)",
    )


def build_parser() -> FlagParser:
    """Flags of the reference manager; `--mode` selects which process this is."""
    p = FlagParser(
        prog=PROG,
        description="FinOps operator: controller manager and the two one-shot job modes.",
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
    )
    _add_manager_flags(p)
    _add_zap_flags(p)
    return p


def log_options(args: argparse.Namespace) -> logs.Options:
    """The `--zap-*` flags as logging settings."""
    return logs.Options.from_flags(
        devel=args.zap_devel,
        encoder=args.zap_encoder,
        level=args.zap_log_level,
        stacktrace_level=args.zap_stacktrace_level,
        time_encoding=args.zap_time_encoding,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the selected mode (controller, or one of the two one-shot jobs)."""
    args = build_parser().parse_args(argv)
    logs.configure(log_options(args))
    if args.mode == "controller":
        from finops.controller import app

        return app.main(args)
    from finops.jobs import allocations, charges

    if args.mode == "cronjob":
        return allocations.main()
    return charges.main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

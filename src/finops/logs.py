"""Log lines shaped like the reference's zap logger, configured by the same `--zap-*` flags.

The default is what the reference ships: JSON, one object per line, at info level. Unlike
zap's production default we add no call-site stack to every error line (a start-up refusal
stays one readable line); an exception logged with its traceback keeps it, as before.
`--zap-stacktrace-level` turns call-site stacks on from that level up (exceptions below it
shrink to one line), and `--zap-devel` switches the defaults to a human console format at
debug level with stacks from warnings up; each other flag overrides one setting. The value
parsers here raise `ValueError` naming what is accepted, so the flag parser can say so.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_OWN_FILES = {os.path.normcase(logging.__file__), os.path.normcase(__file__)}

ENCODERS = ("json", "console")
LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}
STACKTRACE_LEVELS = {"info": logging.INFO, "error": logging.ERROR, "panic": logging.CRITICAL}


def _iso(t: dt.datetime, places: int) -> str:
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if places:
        text += f".{t.microsecond:06d}"[: places + 1]
    return text + "Z"


TIME_ENCODINGS: dict[str, Callable[[float], object]] = {
    "rfc3339nano": lambda ts: dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(),
    "rfc3339": lambda ts: _iso(dt.datetime.fromtimestamp(ts, dt.UTC), 0),
    "iso8601": lambda ts: _iso(dt.datetime.fromtimestamp(ts, dt.UTC), 3),
    "epoch": lambda ts: ts,
    "millis": lambda ts: ts * 1000.0,
    "nanos": lambda ts: round(ts * 1_000_000) * 1000,  # microseconds: what a float holds
}


def parse_encoder(value: str) -> str:
    """`--zap-encoder`: json or console (any case)."""
    if value.lower() not in ENCODERS:
        raise ValueError(f"invalid encoder {value!r} (accepted: {', '.join(ENCODERS)})")
    return value.lower()


def parse_level(value: str) -> int:
    """`--zap-log-level`: debug, info, error, or N > 0 for logr's V(N) (more verbose as N grows)."""
    named = LEVELS.get(value.lower())
    if named is not None:
        return named
    try:
        verbosity = int(value)
    except ValueError:
        verbosity = 0
    if verbosity <= 0:
        raise ValueError(
            f"invalid log level {value!r} (accepted: debug, info, error, or an integer > 0)"
        )
    return max(1, logging.DEBUG - (verbosity - 1))


def parse_stacktrace_level(value: str) -> int:
    """`--zap-stacktrace-level`: info, error or panic."""
    level = STACKTRACE_LEVELS.get(value.lower())
    if level is None:
        accepted = ", ".join(STACKTRACE_LEVELS)
        raise ValueError(f"invalid stacktrace level {value!r} (accepted: {accepted})")
    return level


def parse_time_encoding(value: str) -> str:
    """`--zap-time-encoding`: how the `ts` field is written."""
    if value.lower() not in TIME_ENCODINGS:
        accepted = ", ".join(TIME_ENCODINGS)
        raise ValueError(f"invalid time encoding {value!r} (accepted: {accepted})")
    return value.lower()


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """The resolved logging settings."""

    level: int = logging.INFO
    encoder: str = "json"
    stacktrace_level: int | None = None  # None: exception traces only, no call-site stacks
    time_encoding: str = "rfc3339nano"

    @classmethod
    def from_flags(
        cls,
        *,
        devel: bool = False,
        encoder: str | None = None,
        level: int | None = None,
        stacktrace_level: int | None = None,
        time_encoding: str | None = None,
    ) -> Options:
        """`--zap-devel` picks the defaults; every flag that was given wins over them."""
        base = cls(logging.DEBUG, "console", logging.WARNING) if devel else cls()
        return cls(
            level=base.level if level is None else level,
            encoder=encoder or base.encoder,
            stacktrace_level=base.stacktrace_level
            if stacktrace_level is None
            else stacktrace_level,
            time_encoding=time_encoding or base.time_encoding,
        )


def _call_site() -> str:
    """The stack of the logging call, without the logging machinery's own frames."""
    frames = [
        f for f in traceback.extract_stack() if os.path.normcase(f.filename) not in _OWN_FILES
    ]
    return "".join(traceback.format_list(frames)).rstrip()


class JsonFormatter(logging.Formatter):
    """level, ts, logger, msg, then any `extra=` fields, then the trace the options ask for."""

    def __init__(self, options: Options | None = None) -> None:
        super().__init__()
        self.options = options or Options()

    def fields(self, record: logging.LogRecord) -> dict[str, object]:
        """Everything but level, ts, logger and msg."""
        entry: dict[str, object] = {}
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        floor = self.options.stacktrace_level
        traced = floor is not None and record.levelno >= floor
        if record.exc_info and record.exc_info[1] is not None and (floor is None or traced):
            entry["error_trace"] = self.formatException(record.exc_info)
        elif record.exc_info and record.exc_info[1] is not None:
            entry["exception"] = repr(record.exc_info[1])
        elif traced:
            entry["stacktrace"] = _call_site()
        return entry

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "level": record.levelname.lower(),
            "ts": TIME_ENCODINGS[self.options.time_encoding](record.created),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(self.fields(record))
        return json.dumps(entry, default=str)


class ConsoleFormatter(JsonFormatter):
    """zap's development console layout: ts, LEVEL, logger, msg, then the fields as JSON."""

    def format(self, record: logging.LogRecord) -> str:
        fields = self.fields(record)
        trace = fields.pop("error_trace", None) or fields.pop("stacktrace", None)
        parts = [
            str(TIME_ENCODINGS[self.options.time_encoding](record.created)),
            record.levelname.upper(),
            record.name,
            record.getMessage(),
        ]
        if fields:
            parts.append(json.dumps(fields, default=str))
        line = "\t".join(parts)
        return f"{line}\n{trace}" if trace else line


def configure(options: Options | None = None) -> None:
    """Route every logger to stderr in the chosen encoding, at the chosen level."""
    options = options or Options()
    handler = logging.StreamHandler(sys.stderr)
    formatter = (
        ConsoleFormatter(options) if options.encoder == "console" else JsonFormatter(options)
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if not isinstance(h.formatter, JsonFormatter)]
    root.addHandler(handler)
    root.setLevel(options.level)
    quiet = logging.WARNING if options.level >= logging.DEBUG else logging.NOTSET
    for noisy in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(noisy).setLevel(quiet)

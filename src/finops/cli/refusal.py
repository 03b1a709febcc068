"""How a command says no: a bad argument, an unusable input or an unreadable ledger is one line
on stderr and exit status 1, never a traceback."""

from __future__ import annotations


class Refused(Exception):
    """The one line a command prints (after its name) before exiting with status 1."""

"""The test servers' ports: distinct, outside the kernel's ephemeral range, and free when given."""

from __future__ import annotations

import socket

import pytest

from finops_devenv import ports


def test_ports_are_distinct_below_the_ephemeral_and_node_port_ranges() -> None:
    given = [ports.free_port() for _ in range(64)]
    assert len(set(given)) == len(given)
    ceiling = min(ports._ephemeral_start(), 30_000)
    assert all(10_000 <= port < ceiling for port in given)
    for port in given:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = held.getsockname()[1]
        draws = iter([busy, busy, 12_345, 23_456])
        monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: next(draws))
        monkeypatch.setattr(ports, "_ephemeral_start", lambda: 32_768)
        monkeypatch.setattr(ports, "_given", set())
        port = ports.free_port()
    assert port != busy and port in (12_345, 23_456)

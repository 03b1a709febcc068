"""The test servers' ports: distinct, clear of the kernel's ephemeral range and of Kubernetes'
fixed ports, and free when given."""

from __future__ import annotations

import socket

import pytest

from finops_devenv import ports


def test_ports_are_distinct_and_clear_of_the_ephemeral_and_kubernetes_ports() -> None:
    given = [ports.free_port() for _ in range(64)]
    assert len(set(given)) == len(given)
    ceiling = min(ports._ephemeral_start(), 30_000)
    assert all(11_000 <= port < ceiling for port in given)
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

"""Free TCP ports on 127.0.0.1 for the test servers and processes this package starts.

Asking the kernel for port 0 and closing the socket hands out a port from the ephemeral range,
which the kernel may give again to the next caller (two flags of one process got the same port)
or to any outgoing connection before the server binds it. Ports are therefore drawn below the
ephemeral range (and below Kubernetes' NodePort range, 30000 up, which the real node's services
use), above the ports Kubernetes' node and control-plane components listen on by default
(10248–10259: the real node's kubelet takes 10250), never twice in one process, and each is
checked to be bindable.
"""

from __future__ import annotations

import pathlib
import random
import socket
import threading

_LOWEST = 11_000
_NODE_PORTS = 30_000
_given: set[int] = set()
_lock = threading.Lock()


def _ephemeral_start() -> int:
    """The first port the kernel hands to outgoing connections (32768 if unknown)."""
    try:
        first = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]
        return int(first)
    except (OSError, ValueError, IndexError):
        return 32_768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on now, not handed out before by this process."""
    end = min(_ephemeral_start(), _NODE_PORTS)
    with _lock:
        if end - _LOWEST > 1_000:
            for _ in range(200):
                port = random.randrange(_LOWEST, end)
                if port not in _given and _bindable(port):
                    _given.add(port)
                    return port
        # A machine whose ephemeral range starts low: let the kernel choose, still never twice.
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            if port not in _given:
                _given.add(port)
                return port

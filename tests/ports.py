"""Free TCP ports for the servers that tests and benchmarks start.

A port from ``bind(0)`` is free when drawn but comes from the kernel's ephemeral range:
until the server binds it (an SGLang server loads its model first, for seconds) any
outgoing connection or other ``bind(0)`` on the machine may be handed the same port, and
the server then fails to start ("address already in use"). Ports are therefore drawn at
random below that range, where the kernel never allocates on its own.
"""
from __future__ import annotations

import random
import socket

_LOWEST = 20000
_DRAW = random.SystemRandom()  # tests seed the module-level generator; draws must not repeat


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(offsets: tuple[int, ...] = (0,)) -> int:
    """A port p with p + each of ``offsets`` free on 127.0.0.1 now (a Redis Cluster node
    needs p and its bus p + 10000), drawn below the ephemeral range; from ``bind(0)`` where
    that range leaves too little room below it."""
    high = _ephemeral_low() - 1 - max(offsets)
    if high - _LOWEST >= 1000:
        for _ in range(500):
            port = _DRAW.randint(_LOWEST, high)
            if all(_bindable(port + offset) for offset in offsets):
                return port
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + max(offsets) <= 65535 and all(_bindable(port + offset) for offset in offsets):
            return port

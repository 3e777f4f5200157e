"""A kernel port taken by another process between its choice and the kernel's bind.

jupyter_client chooses a local kernel's ports in `LocalPortCache.find_available_port`
(bind port 0, let it go); the kernel binds them once it has started. `first_port_taken`
holds a listening socket, as another process would, and makes that choice give its port
once, as the first port of the next kernel started (its shell port): that kernel dies on
`ZMQError: Address already in use`, for real. Every later choice is jupyter_client's own.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from jupyter_client.connect import LocalPortCache


@dataclass
class TakenPort:
    """The port held, and how many kernels were given it."""

    port: int
    handed_out: int = 0


@contextmanager
def first_port_taken() -> Iterator[TakenPort]:
    """Hold a port and make it the next kernel's first port (once), within the block."""
    cache = LocalPortCache.instance()
    original = cache.find_available_port
    shadowed = vars(cache).get("find_available_port")  # another double's, if any
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = TakenPort(port=int(holder.getsockname()[1]))

        def find_available_port(ip: str) -> int:
            if taken.handed_out == 0:
                taken.handed_out += 1
                return taken.port
            return original(ip)

        cache.find_available_port = find_available_port  # type: ignore[method-assign]
        try:
            yield taken
        finally:
            if shadowed is None:
                del cache.find_available_port  # the class's method again
            else:
                cache.find_available_port = shadowed  # type: ignore[method-assign]

"""Kernel ports taken by another process between their choice and the kernel's bind.

jupyter_client chooses a local kernel's five ports in `LocalPortCache.find_available_port`
(bind port 0, let it go), shell port first; the kernel binds them once it has started.
`first_ports_taken` holds one port per kernel, as another process would, and makes that
choice give them out as the shell ports of the next kernels started, one each: those
kernels die on `ZMQError: Address already in use`, for real. Every other choice is
jupyter_client's own.

The holder is a plain listening socket, or (`socket_type`) a zmq socket of that type,
as another kernel's iopub PUB would be: a client's DEALER meets a socket it cannot talk
to, and libzmq drops its pipe.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import zmq
from jupyter_client.connect import LocalPortCache

#: The ports `LocalProvisioner.pre_launch` chooses for one kernel, shell port first.
PORTS_PER_KERNEL = 5


@dataclass
class TakenPorts:
    """The ports held, and how many of them were given to a kernel."""

    ports: list[int] = field(default_factory=list)
    handed_out: int = 0

    @property
    def port(self) -> int:
        """The first port held (the only one when one kernel was asked for)."""
        return self.ports[0]


def _hold(stack: ExitStack, socket_type: int | None) -> int:
    if socket_type is None:
        holder = stack.enter_context(socket.socket())
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        return int(holder.getsockname()[1])
    context = zmq.Context()
    stack.callback(context.term)
    held = context.socket(socket_type)
    stack.callback(held.close, linger=0)
    return held.bind_to_random_port("tcp://127.0.0.1")


@contextmanager
def first_ports_taken(kernels: int = 1, *, socket_type: int | None = None) -> Iterator[TakenPorts]:
    """Hold `kernels` ports and make them the shell ports of the next kernels started."""
    cache = LocalPortCache.instance()
    original = cache.find_available_port
    shadowed = vars(cache).get("find_available_port")  # another double's, if any
    calls = 0
    with ExitStack() as stack:
        taken = TakenPorts(ports=[_hold(stack, socket_type) for _ in range(kernels)])

        def find_available_port(ip: str) -> int:
            nonlocal calls
            calls += 1
            if (calls - 1) % PORTS_PER_KERNEL == 0 and taken.handed_out < kernels:
                taken.handed_out += 1
                return taken.ports[taken.handed_out - 1]
            return original(ip)

        cache.find_available_port = find_available_port  # type: ignore[method-assign]
        try:
            yield taken
        finally:
            if shadowed is None:
                del cache.find_available_port  # the class's method again
            else:
                cache.find_available_port = shadowed  # type: ignore[method-assign]


@contextmanager
def first_port_taken() -> Iterator[TakenPorts]:
    """Hold one port (a listening socket) and make it the next kernel's shell port."""
    with first_ports_taken(1) as taken:
        yield taken

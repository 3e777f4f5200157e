"""Run blocking store work on a small pool of threads, never on the event loop.

A store call may wait: for the write lock another server holds (bounded by the store's
lock timeout, then `StoreError`, 503 `StoreUnavailable`), or for a database across a
network. On the server's event loop such a wait would stop everything the server does,
jupyter-server's own `GET /api/status` included, so the lease heartbeat, the takeover and
the store writes of every operation run here instead (`off_loop`). The pool is bounded:
when every thread waits on the store, more calls queue here, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")

#: Threads for store calls (each waits at most the store's lock timeout).
POOL_SIZE = 8
THREAD_PREFIX = "ditto-store"

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _threads() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(POOL_SIZE, thread_name_prefix=THREAD_PREFIX)
        return _pool


async def off_loop(call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """`call(*args, **kwargs)` on a store thread, in a copy of the caller's context (a
    transaction it is in, say); the loop goes on meanwhile."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    work = functools.partial(context.run, call, *args, **kwargs)
    return await loop.run_in_executor(_threads(), work)

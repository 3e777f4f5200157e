"""Waiting at start for a checkpoint store that is not reachable yet (issue 40 section 2).

A PostgreSQL store down for a moment as the server starts (the database restarting with
it, a container not up yet) must not turn ditto off until a restart. The extension opens
its store again and again, on a store thread, with backoff (`FIRST_DELAY_S` doubling up
to `MAX_DELAY_S`), for at most `store_connect_timeout` seconds; each failed attempt logs
one line. Meanwhile jupyter-server serves as ever and every ditto route answers 503
`StoreUnavailable` with the line `unreachable_line` makes (the URL without its password).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.store import StoreUnreachable

_T = TypeVar("_T")

#: Seconds before the second attempt; each wait doubles, up to `MAX_DELAY_S`.
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 10.0


def unreachable_line(error: StoreUnreachable, timeout: float) -> str:
    """What a route answers while the store is not reachable yet (one line)."""
    reason = str(error).strip().splitlines()[0] if str(error).strip() else "no connection"
    return (
        f"the checkpoint store is not reachable yet ({reason}); ditto_jupyter keeps trying "
        f"for up to {timeout:g} s after start (store_connect_timeout)"
    )


async def open_with_backoff(
    open_once: Callable[[], _T],
    first_error: StoreUnreachable,
    timeout: float,
    failed: Callable[[StoreUnreachable, int], None],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> _T:
    """After a first attempt that failed (`first_error`): `open_once()` on a store thread
    until it opens, waiting longer before each attempt, for at most `timeout` seconds from
    now; `failed(error, attempt)` after each attempt that found the store not reachable.
    The last StoreUnreachable once the time is up; any other error at once (a setting
    that is wrong)."""
    deadline = clock() + timeout
    delay, attempt, last = FIRST_DELAY_S, 1, first_error
    while True:
        left = deadline - clock()
        if left <= 0:
            raise last
        await asyncio.sleep(min(delay, left))
        delay = min(delay * 2, MAX_DELAY_S)
        attempt += 1
        try:
            return await off_loop(open_once)
        except StoreUnreachable as error:
            failed(error, attempt)
            last = error

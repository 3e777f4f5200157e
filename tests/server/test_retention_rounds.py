"""Retention rounds in a real Jupyter server run by themselves, on the server's timer
(`retention_interval`), every store call of theirs on the store's threads, never on the
event loop; the status route says when the last one ran."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from ditto_jupyter.control.off_loop import THREAD_PREFIX
from ditto_jupyter.core.models import RuntimeCheckpoint
from ditto_jupyter.server.app import DittoJupyterApp

Api = Any  # the `api` fixture of conftest.py

pytestmark = pytest.mark.slow


@pytest.fixture
def jp_server_config(ditto_data_dir: Path) -> Config:
    return Config(
        {
            "ServerApp": {"jpserver_extensions": {"ditto_jupyter.server": True}},
            "DittoJupyterApp": {
                "data_dir": str(ditto_data_dir),
                "load_magics": False,
                "kernel_pool_size": 0,
                "retention_interval": 0.2,
                "retention_budget_bytes": 0,
            },
        }
    )


async def test_rounds_run_by_themselves_with_every_store_call_off_the_loop(
    api: Api, ditto_app: DittoJupyterApp
) -> None:
    assert ditto_app.service is not None
    store = ditto_app.service.store
    threads: list[str] = []
    listed = store.whole_automatic

    def spy(*, before_ms: int) -> list[RuntimeCheckpoint]:
        threads.append(threading.current_thread().name)
        return listed(before_ms=before_ms)

    store.whole_automatic = spy  # type: ignore[method-assign]
    deadline = time.monotonic() + 60
    while len(threads) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert len(threads) >= 2  # two rounds, on the timer
    assert all(name.startswith(THREAD_PREFIX) for name in threads), threads
    status, answer = await api("GET", "retention")
    assert status == 200 and answer["budget_bytes"] is None
    assert answer["last_round_at_ms"] is not None and answer["last"] is None  # nothing thinned

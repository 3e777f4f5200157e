"""Retention in a real Jupyter server with real kernels and its SQLite store (issue 42
section 1): `%autocheckpoint` after every cell, checkpoint times written through the store
as the test sets them, then a round (the one the server's timer runs) thins what the tiers
or the budget let go of, never what must stay, frees the bytes, emits a `thin` event per
runtime and answers it on `GET /api/v1/runtimes/retention`; rounds run by themselves, their
store calls off the event loop; tiers out of order are a setting that is wrong."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ditto_jupyter.core.disk_usage import data_dir_bytes
from ditto_jupyter.core.models import RuntimeCheckpoint
from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run

Api = Any  # the `api` fixture of conftest.py

pytestmark = pytest.mark.slow

FLUSH = "get_ipython().magics_manager.registry['DittoMagics'].autocheckpointer.flush()"
DAY_MS = 24 * 3600 * 1000
WRITE_A_FILE = "import ditto_jupyter\n(ditto_jupyter.workspace() / 'notes.txt').write_text('since')"


@pytest.fixture
def ditto_load_magics() -> bool:
    return True  # %autocheckpoint


async def cells(app: DittoJupyterApp, kernel: str, first: int, last: int) -> None:
    """Cells `first`..`last`, each replacing `b` with 300 KB of its own that nothing
    compresses (`automatic` finds their checkpoints by it): only its checkpoint holds it."""
    for n in range(first, last + 1):
        await run(app, kernel, f"import os\nb = os.urandom(300_000)  # cell {n}")
    await run(app, kernel, FLUSH)  # their automatic checkpoints are recorded


def automatic(app: DittoJupyterApp, rid: str) -> list[RuntimeCheckpoint]:
    assert app.service is not None
    return [
        c
        for c in app.service.store.list_checkpoints(rid)
        if c.automatic is not None and "urandom" in c.automatic.source
    ]


def whole_ids(app: DittoJupyterApp, rid: str) -> set[str]:
    assert app.service is not None
    return {
        c.checkpoint_id
        for c in app.service.store.list_checkpoints(rid)
        if c.context_manifest_id and not c.pruned
    }


def aged(app: DittoJupyterApp, checkpoint: RuntimeCheckpoint, days: float) -> None:
    """Written through the store as the test sets it: taken `days` ago."""
    assert app.service is not None
    at = int(time.time() * 1000 - days * DAY_MS)
    app.service.store.put_checkpoint(checkpoint.model_copy(update={"created_at_ms": at}))


async def test_a_round_thins_old_cells_keeps_what_must_stay_and_says_so(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, events: list[Any]
) -> None:
    assert ditto_app.service is not None and ditto_app.retention_rounds is not None
    retention = ditto_app.service.retention
    retention.gc_grace_seconds = 0  # the blobs the test just wrote may go at once
    runtime = await open_runtime("notebooks/long.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await run(ditto_app, kernel, "%autocheckpoint on")
    await cells(ditto_app, kernel, 1, 6)
    status, named = await api("POST", "checkpoint", {"runtime_id": rid, "name": "mine"})
    assert status == 200, named
    auto = automatic(ditto_app, rid)
    counts = [c.automatic.execution_count for c in auto if c.automatic]
    assert counts == list(range(counts[0], counts[0] + 6))  # one a cell
    source = auto[1]  # cell 3: a checkout source
    status, child = await api("POST", "checkout", {"checkpoint_id": source.checkpoint_id})
    assert status == 200, child
    for checkpoint in auto[:-1]:
        aged(ditto_app, checkpoint, 40)  # beyond the last tier; the newest is the head
    on_disk = data_dir_bytes(retention.data_dir)

    await ditto_app.retention_rounds.round_logged()

    thinned_ids = {c.checkpoint_id for c in auto} - whole_ids(ditto_app, rid)
    assert thinned_ids == {auto[n].checkpoint_id for n in (0, 2, 3, 4)}
    assert named["checkpoint_id"] in whole_ids(ditto_app, rid)
    assert data_dir_bytes(retention.data_dir) < on_disk - 3 * 300_000

    status, answer = await api("GET", "retention")
    assert status == 200, answer
    last = answer["last"]
    assert last["rules"] == ["tiers"] and last["thinned"] == 4 and last["error"] is None
    assert last["runtimes"] == [
        {
            "runtime_id": rid,
            "conversation_id": "notebooks/long.ipynb",
            "checkpoints": 4,
            "cells": [
                {"first": counts[0], "last": counts[0]},
                {"first": counts[2], "last": counts[4]},
            ],
            "checkpoint_ids": [auto[n].checkpoint_id for n in (0, 2, 3, 4)],
        }
    ]
    assert last["bytes_freed"] > 3 * 300_000
    assert answer["budget_bytes"] == 10 * 1024**3 and answer["interval_seconds"] == 600
    assert answer["tiers"]["keep_all_seconds"] == 3600
    (thin,) = [e for e in events if e["action"] == "thin"]
    assert thin["runtime_id"] == rid and thin["ok"]
    assert thin["thinned"]["checkpoints"] == 4 and thin["thinned"]["rules"] == ["tiers"]
    assert thin["thinned"]["cells"] == last["runtimes"][0]["cells"]

    # a thinned checkpoint is history: restoring it is refused, the kernel untouched
    status, refused = await api(
        "POST", "restore", {"runtime_id": rid, "checkpoint_id": auto[0].checkpoint_id}
    )
    assert status == 400 and "pruned" in refused["message"]


async def test_a_budget_that_asks_for_everything_keeps_the_protected_kinds(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    assert ditto_app.service is not None and ditto_app.retention_rounds is not None
    retention = ditto_app.service.retention
    retention.gc_grace_seconds = 0
    runtime = await open_runtime("notebooks/budget.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await run(ditto_app, kernel, "%autocheckpoint on")
    await cells(ditto_app, kernel, 1, 4)
    status, named = await api("POST", "checkpoint", {"runtime_id": rid, "name": "mine"})
    assert status == 200, named
    await cells(ditto_app, kernel, 6, 9)
    auto = automatic(ditto_app, rid)
    status, child = await api("POST", "checkout", {"checkpoint_id": auto[0].checkpoint_id})
    assert status == 200, child
    await run(ditto_app, kernel, "%autocheckpoint off")
    await run(ditto_app, kernel, WRITE_A_FILE)  # no checkpoint holds it: before-restore will
    status, restored = await api(
        "POST", "restore", {"runtime_id": rid, "checkpoint_id": auto[1].checkpoint_id}
    )
    assert status == 200, restored
    status, paused = await api("POST", "pause", {"runtime_id": rid})
    assert status == 200, paused
    on_request = {
        c.name: c.checkpoint_id
        for c in ditto_app.service.store.list_checkpoints(rid)
        if c.automatic is None
    }
    assert set(on_request) == {"mine", "before-restore", "pause"}
    protected = set(on_request.values())
    on_disk = data_dir_bytes(retention.data_dir)

    retention.budget_bytes = 1  # asks for everything
    report = await retention.round()

    assert report.rules == ["tiers", "budget"] and report.over_budget
    kept = whole_ids(ditto_app, rid)
    assert protected <= kept
    assert auto[0].checkpoint_id in kept  # the checkout source
    every_automatic = [
        c for c in ditto_app.service.store.list_checkpoints(rid) if c.automatic is not None
    ]
    assert report.thinned == len(every_automatic) - 1  # all but the source
    assert data_dir_bytes(retention.data_dir) < on_disk - 3 * 300_000
    status, resumed = await api("POST", "resume", {"runtime_id": rid})
    assert status == 200, resumed  # the head (the pause checkpoint) restores whole

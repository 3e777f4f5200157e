"""Issue 22 section 6 on a real server: with its data directory on a full disk, `close`,
`GET /api/v1/runtimes` and a small checkpoint answer what happened (507 for the full disk,
never 500), and nothing is deleted; with room again, close keeps everything.

The data directory is a real 40 MiB tmpfs filled to the last byte (root only); the kernels
are real and write their captures there.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run
from tests.support.small_disk import filled, small_tmpfs

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "small", size_mib=40) as mount:
        yield mount


@pytest.fixture
def ditto_data_dir(small_disk: Path) -> Path:
    return small_disk / "ditto-data"


async def test_a_full_disk_answers_507_and_deletes_nothing(
    api: Api,
    ditto_app: DittoJupyterApp,
    open_runtime: OpenRuntime,
    small_disk: Path,
    ditto_data_dir: Path,
) -> None:
    runtime = await open_runtime(x=1)
    rid = runtime.runtime_id
    status, first = await api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, first
    await run(ditto_app, runtime.kernel_id, "x = 2")
    workspace = ditto_app.service.workspace_path(rid)
    assert workspace is not None
    (workspace / "since.txt").write_text("written after the checkpoint")
    with sqlite3.connect(ditto_data_dir / "ditto.db") as raw:  # the next commit grows the WAL
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    with filled(small_disk):
        status, listing = await api("GET")
        assert status == 200 and [r["runtime_id"] for r in listing["runtimes"]] == [rid]
        for discard in (False, True):
            status, answer = await api("POST", "close", {"runtime_id": rid, "discard": discard})
            assert (status, answer["error"]) == (507, "StorageFull"), answer
            if not discard:
                assert "discard: true" in answer["message"]
        status, answer = await api("POST", "checkpoint", {"runtime_id": rid})
        assert status in (502, 507), answer  # the kernel's capture found no room: not a 500
        status, record = await api("GET", rid)
        assert (status, record["status"]) == (200, "idle")
        assert (workspace / "since.txt").exists()
        _, rows = await api("GET", f"{rid}/checkpoints")
        assert [c["checkpoint_id"] for c in rows["checkpoints"]] == [first["checkpoint_id"]]
    status, closed = await api("POST", "close", {"runtime_id": rid})
    assert status == 200 and closed["checkpoint_id"], closed
    status, child = await api("POST", "checkout", {"checkpoint_id": closed["checkpoint_id"]})
    assert status == 200, child
    kept = ditto_app.service.workspace_path(child["runtime"]["runtime_id"])
    assert kept is not None and (kept / "since.txt").read_text() == "written after the checkpoint"


async def test_a_checkpoint_too_big_for_the_disk_answers_507_then_every_route_a_code(
    api: Api,
    ditto_app: DittoJupyterApp,
    open_runtime: OpenRuntime,
    small_disk: Path,
    ditto_data_dir: Path,
) -> None:
    """Issue 22 section 6: a 60 MB checkpoint on a 40 MiB disk is StorageFull; with the disk
    full, close, the runtime list and a small checkpoint answer a code, never 500; once
    there is room again, everything works."""
    runtime = await open_runtime(x=1)
    rid = runtime.runtime_id
    await run(ditto_app, runtime.kernel_id, "big = __import__('os').urandom(60_000_000)")
    status, answer = await api("POST", "checkpoint", {"runtime_id": rid})
    assert (status, answer["error"]) == (507, "StorageFull"), answer
    await run(ditto_app, runtime.kernel_id, "del big")
    with sqlite3.connect(ditto_data_dir / "ditto.db") as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    with filled(small_disk):
        answers = [
            await api("POST", "close", {"runtime_id": rid}),
            await api("GET"),
            await api("GET", rid),
            await api("GET", f"{rid}/checkpoints"),
            await api("POST", "checkpoint", {"runtime_id": rid}),
        ]
        for status, body in answers:
            assert status != 500, body
            if status >= 400:
                assert set(body) == {"error", "message"} and body["error"] != "InternalError"
    status, small = await api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, small
    status, closed = await api("POST", "close", {"runtime_id": rid})
    assert status == 200 and closed["checkpoint_id"], closed

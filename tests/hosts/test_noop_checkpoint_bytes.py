"""What a checkpoint after a cell that changed nothing costs on disk, and that it says so
(issue 25 sections 2 and 3), with a real kernel and SQLite.

The server's checkpoint path (`RuntimeService.checkpoint` through `KernelContextDriver`),
30 no-op checkpoints in a row: they report `NOOP_MEAN_BOUND` bytes written on average, and
the data directory's files grow by no more than they report. Each one's growth of the logs,
blobs and workspace is within its own figure, also when its commit is the first into a log
truncated to nothing (the log's header is written again then). The database files grow
when a checkpoint of the log copies pages back into them: pages that earlier commits
logged and reported, so over the run everything the files grew was reported. After a
pause, what a no-op checkpoint writes to renew the blobs' grace is counted too.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from ditto_jupyter.core.blobs.index import TOUCH_REFRESH_SECONDS
from ditto_jupyter.core.sqlite_log import checkpoint_log
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from tests.hosts.test_kernel_service import kernel_service

pytestmark = pytest.mark.slow

#: Bytes a no-op checkpoint writes on average: 5 page images of the checkpoint store's
#: 1 KiB pages (the runtime's row with its head, the record's leaf, the indexes by id, by
#: runtime and by base), 7 when the record's leaf is full (the page above it and the
#: database header too), one or two more when an index leaf splits: 5.9 KiB on average
#: over 40 (benchmarks/bench_noop_bytes.py). Schema 10 wrote 11-17 (12.2 KiB on average),
#: schema 9 14-22 (15.9 KiB).
NOOP_MEAN_BOUND = 6.5 * 1024
#: Issue 25's target for a checkpoint after a cell that changed nothing, blobs plus
#: databases.
NOOP_TARGET = 8 * 1024
#: The database files, which grow only by pages their logs held first.
DATABASES = ("ditto.db", "blobs/objects.db")
ROUNDS = 30


def file_sizes(root: Path) -> dict[Path, int]:
    """Every file under `root` and its size."""
    return {path: path.stat().st_size for path in root.rglob("*") if path.is_file()}


def growth(before: dict[Path, int], after: dict[Path, int]) -> int:
    """The bytes the files grew by (a new file by all its bytes; a shrunk one by none)."""
    return sum(max(0, size - before.get(path, 0)) for path, size in after.items())


def test_a_noop_checkpoint_writes_little_and_counts_every_byte_the_files_grew(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        host = JupyterClientHost()
        data = tmp_path / "data"
        service = kernel_service(data, host, tmp_path)
        rid = (await service.create_runtime("nb.ipynb", "nb")).runtime_id
        try:
            kernel = service.session(rid).handle_state["kernel_id"]
            await host.execute(kernel, "values = {i: str(i) for i in range(200)}\nx = 1")
            await service.checkpoint(rid)
            written: list[int] = []
            start = file_sizes(data)
            for round_ in range(ROUNDS):
                await host.execute(kernel, "x")  # a cell that changes nothing
                if round_ in (0, 1):  # the log empty, as the idle checkpoint leaves it
                    checkpoint_log(data / "ditto.db")
                before = file_sizes(data)
                result = await service.checkpoint(rid)
                after = file_sizes(data)
                for name in DATABASES:  # what a checkpoint of the log copied back
                    after.pop(data / name, None)
                grew = growth(before, after)
                assert grew <= result.bytes_written, (round_, grew, result.bytes_written)
                written.append(result.bytes_written)
            assert growth(start, file_sizes(data)) <= sum(written)
            assert sum(written) / ROUNDS <= NOOP_MEAN_BOUND < NOOP_TARGET, written
            assert min(written) <= 5 * (1024 + 24) + 32, written  # no split: 5 pages
        finally:
            await service.close(rid, discard=True)
            service.close_store()
            await host.shutdown_all()

    asyncio.run(scenario())


def age_catalogue(blob_root: Path, seconds: float) -> None:
    """Make every object of the blob catalogue look `seconds` older (as after a pause)."""
    with contextlib.closing(sqlite3.connect(blob_root / "objects.db", timeout=30)) as conn:
        conn.execute("UPDATE chunks SET touched = touched - ?", (seconds,))
        conn.execute("UPDATE manifests SET touched = touched - ?", (seconds,))
        conn.commit()


def test_a_noop_checkpoint_after_a_pause_counts_the_touches_it_writes(tmp_path: Path) -> None:
    """A minute after the last checkpoint, reusing the namespace and the workspace snapshot
    renews their rows' grace in the blob catalogue (a page of its log each): the figure
    counts them, the workspace's too (its snapshot is the same, the ref says what it cost)."""

    async def scenario() -> None:
        host = JupyterClientHost()
        data = tmp_path / "data"
        service = kernel_service(data, host, tmp_path)
        rid = (await service.create_runtime("nb.ipynb", "nb")).runtime_id
        try:
            kernel = service.session(rid).handle_state["kernel_id"]
            workspace = service.workspace_path(rid)
            assert workspace is not None
            (workspace / "notes.txt").write_text("kept as it is")
            await host.execute(kernel, "x = 1")
            first = await service.checkpoint(rid)
            for _ in range(2):
                await host.execute(kernel, "x")  # a cell that changes nothing
                age_catalogue(data / "blobs", 2 * TOUCH_REFRESH_SECONDS)
                before = file_sizes(data)
                result = await service.checkpoint(rid)
                grew = growth(before, file_sizes(data))
                assert 0 < grew <= result.bytes_written, (grew, result.bytes_written)
            snapshot = service.get_checkpoint(result.checkpoint_id).backend_ref
            parent = service.get_checkpoint(first.checkpoint_id).backend_ref
            assert snapshot is not None and parent is not None
            assert snapshot.provider_snapshot_id == parent.provider_snapshot_id
        finally:
            await service.close(rid, discard=True)
            service.close_store()
            await host.shutdown_all()

    asyncio.run(scenario())

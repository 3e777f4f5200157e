"""Every byte of a checkpoint counted (issue 25 section 2), with a real kernel and SQLite.

The server's checkpoint path (`RuntimeService.checkpoint` through `KernelContextDriver`)
on a local workspace: a checkpoint after a cell that changed nothing writes no blob and no
page of the blob catalogue, commits once to the checkpoint store, and the "written" figure
it returns is exactly what that commit appended to the store's log.
"""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from ditto_jupyter.core.blobs.index import INDEX_FILE
from ditto_jupyter.core.sqlite_log import FRAME_HEADER, LOG_HEADER, log_position
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from tests.hosts.test_kernel_service import kernel_service

pytestmark = pytest.mark.slow


def commit_frames(database: Path) -> int:
    """Commit frames in the log's current generation: one per write transaction."""
    try:
        wal = Path(f"{database}-wal").read_bytes()
    except FileNotFoundError:
        return 0
    if len(wal) < 32:
        return 0
    page_size, salts = struct.unpack_from(">I", wal, 8)[0], wal[16:24]
    commits, offset = 0, 32
    while offset + FRAME_HEADER <= len(wal) and wal[offset + 8 : offset + 16] == salts:
        commits += struct.unpack_from(">I", wal, offset + 4)[0] != 0
        offset += FRAME_HEADER + page_size
    return commits


def test_a_checkpoint_after_nothing_writes_one_store_commit_and_no_catalogue_page(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        host = JupyterClientHost()
        data = tmp_path / "data"
        service = kernel_service(data, host, tmp_path)
        store_file, catalogue = data / "ditto.db", data / "blobs" / INDEX_FILE
        rid = (await service.create_runtime("nb.ipynb", "nb")).runtime_id
        try:
            kernel = service.session(rid).handle_state["kernel_id"]
            await host.execute(kernel, "values = {i: str(i) for i in range(200)}\nx = 1")
            first = await service.checkpoint(rid)
            assert first.bytes_written > 0
            for _ in range(3):
                await host.execute(kernel, "x")  # a cell that changes nothing
                catalogue_before = log_position(catalogue)
                store_before, commits = log_position(store_file), commit_frames(store_file)
                result = await service.checkpoint(rid)
                assert log_position(catalogue) == catalogue_before  # no page, no commit
                store_after = log_position(store_file)
                if store_after.salts == store_before.salts:
                    assert commit_frames(store_file) == commits + 1
                    logged = (store_after.frames - store_before.frames) * store_after.frame_size
                else:  # the log restarted with this commit, its header written again
                    assert commit_frames(store_file) == 1
                    logged = LOG_HEADER + store_after.frames * store_after.frame_size
                assert result.bytes_written == logged > 0
                record = service.get_checkpoint(result.checkpoint_id)
                assert record.bytes_written == 0  # no blob: the record predates its commit
                assert (
                    record.context_manifest_id
                    == service.get_checkpoint(first.checkpoint_id).context_manifest_id
                )
        finally:
            await service.close(rid, discard=True)
            service.close_store()
            await host.shutdown_all()

    asyncio.run(scenario())

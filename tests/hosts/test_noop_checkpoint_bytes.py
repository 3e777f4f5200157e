"""What a checkpoint after a cell that changed nothing costs on disk, and that it says so
(issue 25 sections 2 and 3), with a real kernel and SQLite.

The server's checkpoint path (`RuntimeService.checkpoint` through `KernelContextDriver`),
30 no-op checkpoints in a row: they report `NOOP_MEAN_BOUND` bytes written on average, and
the data directory's files grow by no more than they report. Each one's growth of the logs,
blobs and workspace is within its own figure, also when its commit is the first into a log
truncated to nothing (the log's header is written again then). The database files grow
when a checkpoint of the log copies pages back into them: pages that earlier commits
logged and reported, so over the run everything the files grew was reported.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ditto_jupyter.core.sqlite_log import checkpoint_log
from ditto_jupyter.hosts.jupyter_client_host import JupyterClientHost
from tests.hosts.test_kernel_service import kernel_service

pytestmark = pytest.mark.slow

#: Bytes a no-op checkpoint writes on average: 11 page images of the checkpoint store's
#: 1 KiB pages (the database header, the runtime's row, the record's leaf, its overflow
#: page and the page above them, the head and five index leaves), and the page splits an
#: index takes now and then. Before schema 10 it was 14 pages (three more indexes), 15.9
#: KiB on average over 40. Issue 25 asks for 8 KiB: see benchmarks/RESULTS.md for why
#: this is not there yet.
NOOP_MEAN_BOUND = 13 * 1024
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
            assert sum(written) / ROUNDS <= NOOP_MEAN_BOUND, written
        finally:
            await service.close(rid, discard=True)
            service.close_store()
            await host.shutdown_all()

    asyncio.run(scenario())

"""Issue 10 section 6: the data directory is private to its owner.

ditto.db and SQLite's -wal and -shm beside it are 0600; the data directory, the blob store
and the workspaces (every one, and the folder that holds them) are 0700, whether a
workspace is new or checked out from a snapshot. A data directory left looser (by an older
version, or a copy) is tightened when it is opened again.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_directory_is_created_private(tmp_path: Path) -> None:
    root = tmp_path / "data"
    service = open_runtime_service(root, context_factory=InMemoryContextCapture)
    try:
        rid = asyncio.run(service.create_runtime("nb.ipynb")).runtime_id
        workspace = service.workspace_path(rid)
        assert workspace is not None
        (workspace / "notes.txt").write_text("mine")
        cid = asyncio.run(service.checkpoint(rid)).checkpoint_id
        child = asyncio.run(service.checkout(cid)).runtime.runtime_id
        checked_out = service.workspace_path(child)
        assert checked_out is not None and (checked_out / "notes.txt").read_text() == "mine"
        db = root / "ditto.db"
        files = [db, db.with_name("ditto.db-wal"), db.with_name("ditto.db-shm")]
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
        folders = [root, root / "blobs", root / "workspaces", workspace, checked_out]
        assert {str(f): mode(f) for f in folders} == {str(f): 0o700 for f in folders}
    finally:
        service.close_store()


def test_a_loose_data_directory_is_tightened_when_opened(tmp_path: Path) -> None:
    root = tmp_path / "data"
    open_runtime_service(root, context_factory=InMemoryContextCapture).close_store()
    loose = [root, root / "blobs", root / "workspaces"]
    for folder in loose:
        os.chmod(folder, 0o755)
    os.chmod(root / "ditto.db", 0o644)
    service = open_runtime_service(root, context_factory=InMemoryContextCapture)
    service.close_store()
    assert [mode(f) for f in loose] == [0o700, 0o700, 0o700]
    assert mode(root / "ditto.db") == 0o600


def test_a_blob_store_opened_by_a_kernel_is_private(tmp_path: Path) -> None:
    BlobStore(tmp_path / "data" / "blobs")  # a kernel's capture opens it directly
    assert mode(tmp_path / "data" / "blobs") == 0o700

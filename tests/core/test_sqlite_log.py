"""The SQLite logs of a data directory: counted per commit, bounded, truncated once idle.

Real SQLite files: the blob catalogue (`ObjectIndex`) and the checkpoint store
(`SqlCheckpointStore`), read back through their `-wal` files as SQLite writes them.
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

from ditto_jupyter.control.store import SqlCheckpointStore
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.blobs.index import INDEX_FILE
from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.core.sqlite_log import (
    AUTOCHECKPOINT_PAGES,
    FRAME_HEADER,
    JOURNAL_SIZE_LIMIT,
    log_position,
)


def commit_frames(database: Path) -> int:
    """Commit frames of the log's current generation (one per write transaction)."""
    wal = Path(f"{database}-wal").read_bytes()
    page_size = struct.unpack_from(">I", wal, 8)[0]
    salts = wal[16:24]
    commits, offset = 0, 32
    while offset + FRAME_HEADER <= len(wal) and wal[offset + 8 : offset + 16] == salts:
        commits += struct.unpack_from(">I", wal, offset + 4)[0] != 0
        offset += FRAME_HEADER + page_size
    return commits


def wal_size(database: Path) -> int:
    try:
        return os.stat(f"{database}-wal").st_size
    except FileNotFoundError:
        return 0


def session(runtime_id: str) -> SessionRecord:
    return SessionRecord(session_id=runtime_id, conversation_id="c", sender_id="s")


def test_a_write_reports_the_log_bytes_it_appended_and_nothing_when_it_changed_nothing(
    tmp_path: Path,
) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    index = blobs.index
    database = tmp_path / "blobs" / INDEX_FILE
    before = log_position(database)
    digest, written = blobs.put_chunk(b"a small chunk, kept inline in the catalogue")
    after = log_position(database)
    appended = (after.frames - before.frames) * after.frame_size
    assert appended > 0
    assert 0 < written < appended  # the chunk sits inline: its bytes are in those pages
    assert index.last_write_bytes() == appended
    with index.write() as conn:  # a transaction that changes no row writes no page
        conn.execute("UPDATE chunks SET refs = refs WHERE digest = x'00'")
    assert index.last_write_bytes() == 0 and log_position(database) == after
    assert blobs.put_chunk(b"a small chunk, kept inline in the catalogue") == (digest, 0)
    assert log_position(database) == after  # reused, touched lately: no write at all


def test_reusing_a_manifest_or_marking_it_again_writes_no_page(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    database = tmp_path / "blobs" / INDEX_FILE
    digest, _ = blobs.put_chunk(b"listed")
    manifest_id, _ = blobs.put_manifest({"chunks": [digest], "kind": "test"})
    blobs.mark_referenced([manifest_id])
    before = log_position(database)
    assert blobs.put_manifest({"chunks": [digest], "kind": "test"}) == (manifest_id, 0)
    blobs.mark_referenced([manifest_id])
    assert log_position(database) == before


def test_the_store_counts_its_commit_in_the_log(tmp_path: Path) -> None:
    database = tmp_path / "ditto.db"
    store = SqlCheckpointStore.at_path(database)
    try:
        before = log_position(database)
        commits = commit_frames(database)
        with store.transaction():
            store.insert_session(session("rt-1"))
            store.put_session(session("rt-1").model_copy(update={"metadata": {"a": 1}}))
        after = log_position(database)
        assert commit_frames(database) == commits + 1  # one transaction, one commit
        assert store.last_commit_bytes() == (after.frames - before.frames) * after.frame_size
        assert store.last_commit_bytes() > 0
    finally:
        store.close()


def test_a_runtime_replaced_unchanged_but_its_record_writes_only_its_row(
    tmp_path: Path,
) -> None:
    """put_session names only the changed columns: the indexes on the others keep their
    pages (a checkpoint replaces its runtime's record every time)."""
    database = tmp_path / "ditto.db"
    store = SqlCheckpointStore.at_path(database)
    try:
        for n in range(300):  # enough rows that each index has pages of its own
            store.insert_session(session(f"rt-{n:04}"))
        record = store.get_session("rt-0150")
        assert record is not None
        store.put_session(record.model_copy(update={"updated_at_ms": record.updated_at_ms + 1}))
        frames = store.last_commit_bytes() // log_position(database).frame_size
        assert frames <= 2  # the table's leaf (and at most one page above it)
        assert store.get_session("rt-0150") == record.model_copy(
            update={"updated_at_ms": record.updated_at_ms + 1}
        )
    finally:
        store.close()


def test_the_logs_stay_bounded_under_many_commits(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    database = tmp_path / "blobs" / INDEX_FILE
    largest = 0
    for n in range(500):  # ~2 pages a commit: 4 MB of log without the bound
        blobs.put_chunk(n.to_bytes(4, "big") * 500)
        largest = max(largest, wal_size(database))
    frame = log_position(database).frame_size
    assert largest <= JOURNAL_SIZE_LIMIT + (AUTOCHECKPOINT_PAGES + 8) * frame


def test_an_idle_log_is_checkpointed_and_truncated(tmp_path: Path) -> None:
    store = SqlCheckpointStore.at_path(tmp_path / "ditto.db")
    blobs = BlobStore(tmp_path / "blobs")
    try:
        store.insert_session(session("rt-1"))
        blobs.put_chunk(b"one chunk")
        logs = [tmp_path / "ditto.db", tmp_path / "blobs" / INDEX_FILE]
        assert all(wal_size(log) > 0 for log in logs)
        deadline = time.monotonic() + 60  # a wait for the idle checkpoint, not a timing
        while any(wal_size(log) for log in logs) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [wal_size(log) for log in logs] == [0, 0]
        assert store.get_session("rt-1") is not None  # copied back into the file
    finally:
        store.close()

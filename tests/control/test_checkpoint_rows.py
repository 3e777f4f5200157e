"""How the SQL store lays a checkpoint out (schema 11, `checkpoint_rows`), on real SQLite
(and PostgreSQL, from test_store_postgres.py): a checkpoint after a cell that changed
nothing shares its parent's base and writes a short row; a base goes with its last user;
a write that fails leaves no base behind; parts that do not make a record are named, and
what they name stays alive; such a checkpoint's commit logs a handful of pages.
"""

from __future__ import annotations

import sqlite3
import statistics
import uuid
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa

from ditto_jupyter.control.store import (
    DamagedRecord,
    SqlCheckpointStore,
    collecting_damaged_rows,
)
from ditto_jupyter.control.store.checkpoint_rows import COLUMN_FIELDS, SHARED_FIELDS
from ditto_jupyter.control.store.sql_database import PAGE_SIZE
from ditto_jupyter.core.sqlite_log import FRAME_HEADER
from ditto_jupyter.testing.contracts.store_data import (
    CONTEXT,
    SNAPSHOT,
    after_cell,
    runtime,
    thinned,
)


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.exec_driver_sql(sql)]
    finally:
        engine.dispose()


def _bases(url: str) -> int:
    (count,) = _rows(url, "SELECT count(*) FROM checkpoint_bases")[0]
    assert isinstance(count, int)
    return count


def check_checkpoints_share_bases(url: str) -> None:
    """A run of checkpoints that changed nothing keeps one base and short rows; a base no
    checkpoint uses is deleted; a failed write adds none."""
    store = SqlCheckpointStore(url)
    try:
        store.insert_session(runtime("r"))
        for n in range(10):
            store.put_checkpoint(after_cell(f"c{n}", "r", n, parent=f"c{n - 1}" if n else None))
        assert _bases(url) == 1
        for (data,) in _rows(url, "SELECT data FROM checkpoints"):
            assert isinstance(data, str) and len(data) < 160, data
            assert set(orjson.loads(data)) <= {"delta"}  # nothing its columns or base hold
        first = _rows(url, "SELECT data FROM checkpoint_bases")[0][0]
        assert isinstance(first, str)
        assert list(orjson.loads(first)) == list(SHARED_FIELDS)
        assert not set(orjson.loads(first)) & set(COLUMN_FIELDS)

        # other blobs: a base of its own, which the next checkpoint shares
        other = after_cell("c10", "r", 10, parent="c9", context_manifest_id="f" * 64)
        store.put_checkpoint(other)
        store.put_checkpoint(after_cell("c11", "r", 11, parent="c10", context_manifest_id="f" * 64))
        assert _bases(url) == 2
        # its only users thinned: that base goes, and a thinned one is shared in turn
        store.put_checkpoint(thinned(other))
        store.put_checkpoint(thinned(store.get_checkpoint("c11") or other))
        assert _bases(url) == 2
        assert store.referenced_manifests(["f" * 64, CONTEXT]) == {CONTEXT}

        with pytest.raises(RuntimeError, match="failed"), store.transaction():
            store.put_checkpoint(after_cell("c12", "r", 12, parent="c11", name="fresh"))
            store.put_checkpoint(after_cell("c13", "r", 13, context_manifest_id="0" * 64))
            raise RuntimeError("failed")
        assert _bases(url) == 2
        assert store.get_checkpoint("c12") is None
    finally:
        store.close()


def test_checkpoints_share_bases(tmp_path: Path) -> None:
    check_checkpoints_share_bases(f"sqlite:///{tmp_path / 'ditto.db'}")


def test_parts_that_do_not_make_a_record_are_named_and_keep_their_blobs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ditto.db"
    store = SqlCheckpointStore.at_path(path)
    store.insert_session(runtime("r"))
    for n in range(4):
        store.put_checkpoint(after_cell(f"c{n}", "r", n, parent=f"c{n - 1}" if n else None))
    raw = sqlite3.connect(path)
    raw.execute("UPDATE checkpoints SET data = 'not json' WHERE checkpoint_id = 'c1'")
    other = orjson.dumps({"delta": {"context_manifest_id": ["9" * 64]}}).decode()
    raw.execute("UPDATE checkpoints SET data = ? WHERE checkpoint_id = 'c2'", (other,))
    raw.commit()
    raw.close()
    try:
        with pytest.raises(DamagedRecord, match="checkpoint 'c1' is damaged: it is not JSON"):
            store.get_checkpoint("c1")
        with pytest.raises(DamagedRecord, match="'c2' is damaged: it names the blobs"):
            store.get_checkpoint("c2")
        with collecting_damaged_rows() as skipped:
            listed = store.list_checkpoints("r")
        assert [c.checkpoint_id for c in listed] == ["c0", "c3"]
        assert [row.key for row in skipped] == ["c1", "c2"]
        assert all(CONTEXT in row.text and SNAPSHOT in row.text for row in skipped)
        damaged = {row.key: row.reason for row in store.damaged_rows()}
        assert set(damaged) == {"c1", "c2"}
        assert damaged["c2"].startswith("it names the blobs")
        # what they name stays alive even if every whole checkpoint lets go of it
        store.put_checkpoint(thinned(listed[0]))
        store.put_checkpoint(thinned(listed[1]))
        assert store.referenced_manifests([CONTEXT, SNAPSHOT, "9" * 64]) == {CONTEXT, SNAPSHOT}
    finally:
        store.close()


def test_a_checkpoint_that_changed_nothing_logs_a_handful_of_pages(tmp_path: Path) -> None:
    """The store's part of a checkpoint after a cell that changed nothing (its record, the
    runtime's head and row, in one transaction, as `Checkpointing` writes them): 5 page
    images (the record's leaf, the runtime's row, the indexes by id, by runtime and by
    base), 7 or 8 when a leaf splits; 11 to 17 before schema 11."""
    store = SqlCheckpointStore.at_path(tmp_path / "ditto.db")
    frame = PAGE_SIZE + FRAME_HEADER
    try:
        store.insert_session(runtime("r"))
        head = None
        logged: list[int] = []
        for n in range(40):
            cid = uuid.uuid4().hex
            with store.transaction():
                store.put_checkpoint(after_cell(cid, "r", n, parent=head))
                store.set_head("r", cid)
                store.put_session(runtime("r", n))
            logged.append(store.last_commit_bytes())
            head = cid
        pages = [written // frame for written in logged[10:]]  # past the first leaves
        assert statistics.mean(pages) <= 6, pages
        assert min(pages) == 5 and max(pages) <= 9, pages
    finally:
        store.close()

"""`get_tuple`'s read on a SQLite store, on the DB-API: one `sqlite3` connection kept per
thread (no pool checkout, no SQLAlchemy statement handling), the checkpoint and the values
its versions name read in one statement (`json_each` over its versions), its writes in
another, in one read transaction (WAL: a snapshot, never blocked by the writer).

Rows are built with `model_construct`: they come from the store, which validated them when
they were written. A read the database refuses raises StoreError, as the store's do.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import orjson

from ditto_jupyter.control.store.interface import StoreError
from ditto_jupyter.core.models.langgraph import (
    LangGraphChannelValue,
    LangGraphTuple,
    LangGraphValue,
    LangGraphWrite,
)

_CHECKPOINT = """
SELECT c.thread, c.checkpoint_id, c.parent_checkpoint_id, c.type, c.data, c.manifest_id,
       c.metadata, c.versions
FROM langgraph_checkpoints c JOIN langgraph_threads t ON t.id = c.thread
WHERE t.runtime_id = ? AND t.thread_id = ? AND c.checkpoint_ns = ? {id}
ORDER BY c.checkpoint_id DESC LIMIT 1
"""
_WITH_VALUES = f"""
WITH c AS ({_CHECKPOINT})
SELECT c.*, b.channel, b.version, b.type, b.data, b.manifest_id
FROM c LEFT JOIN json_each(c.versions) v
LEFT JOIN langgraph_blobs b ON b.thread = c.thread AND b.checkpoint_ns = ?
  AND b.channel = v.key AND b.version = v.value
"""
_NEWEST = _WITH_VALUES.format(id="")
_ONE = _WITH_VALUES.format(id="AND c.checkpoint_id = ?")
_WRITES = """
SELECT task_id, task_path, idx, channel, type, data, manifest_id FROM langgraph_writes
WHERE thread = ? AND checkpoint_ns = ? AND checkpoint_id = ?
ORDER BY task_path, task_id, idx
"""


def _value(type_: str, data: bytes | None, manifest_id: str | None) -> LangGraphValue:
    return LangGraphValue.model_construct(
        type=type_, data=bytes(data) if data is not None else b"", manifest_id=manifest_id
    )


class SqliteLangGraphReads:
    """The newest (or one) checkpoint of a thread, read on a connection of this thread."""

    def __init__(self, path: str, busy_timeout_ms: int, shown: str) -> None:
        self._path = path
        self._timeout_s = busy_timeout_ms / 1000
        self._shown = shown
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[sqlite3.Connection] = []

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._path, timeout=self._timeout_s, isolation_level=None, check_same_thread=False
            )
            with self._lock:
                self._opened.append(conn)
            self._local.conn = conn
        return conn

    def get(
        self, runtime_id: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> LangGraphTuple | None:
        """The checkpoint with its values and writes, or None (`get_langgraph_tuple`)."""
        try:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                return self._read(conn, runtime_id, thread_id, checkpoint_ns, checkpoint_id)
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as error:
            raise StoreError(
                f"the checkpoint store {self._shown} could not be read: {error}"
            ) from None

    def _read(
        self,
        conn: sqlite3.Connection,
        runtime_id: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
    ) -> LangGraphTuple | None:
        where: tuple[Any, ...] = (runtime_id, thread_id, checkpoint_ns)
        if checkpoint_id is None:
            rows = conn.execute(_NEWEST, (*where, checkpoint_ns)).fetchall()
        else:
            rows = conn.execute(_ONE, (*where, checkpoint_id, checkpoint_ns)).fetchall()
        if not rows:
            return None
        thread, found_id, parent, type_, data, manifest_id, metadata, _ = rows[0][:8]
        values = [
            LangGraphChannelValue.model_construct(
                channel=row[8], version=row[9], value=_value(row[10], row[11], row[12])
            )
            for row in rows
            if row[8] is not None
        ]
        writes = [
            LangGraphWrite.model_construct(
                task_id=task,
                task_path=path,
                idx=int(idx),
                channel=channel,
                value=_value(w_type, w_data, w_manifest),
            )
            for task, path, idx, channel, w_type, w_data, w_manifest in conn.execute(
                _WRITES, (thread, checkpoint_ns, found_id)
            )
        ]
        return LangGraphTuple.model_construct(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=found_id,
            parent_checkpoint_id=parent,
            checkpoint=_value(type_, data, manifest_id),
            metadata=orjson.loads(metadata),
            values=values,
            writes=writes,
        )

    def close(self) -> None:
        """Close every connection this made (the store closes)."""
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            conn.close()

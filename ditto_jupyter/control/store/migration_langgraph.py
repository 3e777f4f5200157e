"""Schema step 12: the tables of LangGraph's checkpoints (issue 44 section 4).

A frozen step, as every step in `migrations`: DDL of its own, never the current table
definitions (`schema_langgraph`). It adds four tables:

- `langgraph_threads`: one row per LangGraph thread of a runtime, keyed by (runtime, thread
  id), with a small integer id the other three tables name it by (rows stay short);
- `langgraph_checkpoints`: one row per LangGraph checkpoint (its namespace and id within
  the thread), the saver's serialized checkpoint without its channel values, the channel
  versions it names (JSON), its metadata (JSON), its run id (indexed, for
  `delete_for_runs`), and when it was stored (a checkout copies what was stored by then);
- `langgraph_blobs`: one channel value per (thread, namespace, channel, version);
- `langgraph_writes`: the pending writes of a checkpoint, by (task id, index).

A value is kept inline, or, when it is large, in the blob store: the row then names the
manifest that holds it (`manifest_id`, indexed where set: garbage collection asks them).
"""

from __future__ import annotations

from sqlalchemy.engine import Connection


def create_langgraph_tables_v12(conn: Connection) -> None:
    """Create the four tables and their indexes (SQLite or PostgreSQL)."""
    sqlite = conn.dialect.name == "sqlite"
    key = "id INTEGER PRIMARY KEY" if sqlite else "id BIGSERIAL PRIMARY KEY"
    thread = "thread INTEGER NOT NULL" if sqlite else "thread BIGINT NOT NULL"
    data = "BLOB" if sqlite else "BYTEA"
    # Keys listings order by compare code points on both (PostgreSQL's own order follows
    # the database's locale): the primary keys then serve `ORDER BY ... DESC` as they are.
    ordered = "TEXT" if sqlite else 'TEXT COLLATE "C"'
    conn.exec_driver_sql(
        f"CREATE TABLE langgraph_threads ({key}, "
        "runtime_id TEXT NOT NULL REFERENCES sessions (runtime_id) "
        "DEFERRABLE INITIALLY DEFERRED, "
        f"thread_id {ordered} NOT NULL, created_at_ms BIGINT NOT NULL, "
        "UNIQUE (runtime_id, thread_id))"
    )
    conn.exec_driver_sql(
        f"CREATE TABLE langgraph_checkpoints ({thread} REFERENCES langgraph_threads (id), "
        f"checkpoint_ns {ordered} NOT NULL, checkpoint_id {ordered} NOT NULL, "
        "parent_checkpoint_id TEXT, run_id TEXT, created_at_ms BIGINT NOT NULL, "
        f"type TEXT NOT NULL, data {data}, manifest_id TEXT, "
        "versions TEXT NOT NULL, metadata TEXT NOT NULL, "
        "PRIMARY KEY (thread, checkpoint_ns, checkpoint_id))"
    )
    conn.exec_driver_sql(
        f"CREATE TABLE langgraph_blobs ({thread} REFERENCES langgraph_threads (id), "
        f"checkpoint_ns {ordered} NOT NULL, channel TEXT NOT NULL, version TEXT NOT NULL, "
        f"type TEXT NOT NULL, data {data}, manifest_id TEXT, "
        "PRIMARY KEY (thread, checkpoint_ns, channel, version))"
    )
    conn.exec_driver_sql(
        f"CREATE TABLE langgraph_writes ({thread} REFERENCES langgraph_threads (id), "
        f"checkpoint_ns {ordered} NOT NULL, checkpoint_id {ordered} NOT NULL, "
        f"task_id {ordered} NOT NULL, idx INTEGER NOT NULL, task_path {ordered} NOT NULL, "
        "channel TEXT NOT NULL, "
        f"type TEXT NOT NULL, data {data}, manifest_id TEXT, created_at_ms BIGINT NOT NULL, "
        "PRIMARY KEY (thread, checkpoint_ns, checkpoint_id, task_id, idx))"
    )
    conn.exec_driver_sql(
        "CREATE INDEX langgraph_checkpoints_by_run ON langgraph_checkpoints (run_id) "
        "WHERE run_id IS NOT NULL"
    )
    for table in ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes"):
        conn.exec_driver_sql(
            f"CREATE INDEX {table}_by_manifest ON {table} (manifest_id) "
            "WHERE manifest_id IS NOT NULL"
        )

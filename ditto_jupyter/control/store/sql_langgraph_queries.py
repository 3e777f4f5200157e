"""The SQL of `sql_langgraph`: the statements its reads run, and how a value maps onto a
row's (type, data, manifest_id) columns."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy as sa

from ditto_jupyter.control.store.schema import SESSIONS
from ditto_jupyter.control.store.schema_langgraph import BLOBS, CHECKPOINTS, THREADS, WRITES
from ditto_jupyter.core.models.langgraph import LangGraphValue

BATCH = 500
"""Keys asked about in one `IN (...)` (well below every database's limit)."""

C, B, W, T = CHECKPOINTS.c, BLOBS.c, WRITES.c, THREADS.c
RUNTIME = sa.bindparam("runtime", type_=sa.Text)
THREAD_ID = sa.bindparam("thread_id", type_=sa.Text)
KEY = sa.bindparam("key", type_=sa.Integer)
NS = sa.bindparam("ns", type_=sa.Text)
ID = sa.bindparam("id", type_=sa.Text)

STATUS = sa.select(SESSIONS.c.status).where(SESSIONS.c.runtime_id == RUNTIME)
HAS_WRITES = (
    sa.select(W.idx).where(W.thread == KEY, W.checkpoint_ns == NS, W.checkpoint_id == ID).limit(1)
)
FIND_THREAD = sa.select(T.id).where(T.runtime_id == RUNTIME, T.thread_id == THREAD_ID)
CHECKPOINT_COLUMNS = (
    T.thread_id,
    C.thread,
    C.checkpoint_ns,
    C.checkpoint_id,
    C.parent_checkpoint_id,
    C.type,
    C.data,
    C.manifest_id,
    C.versions,
    C.metadata,
)
JOINED = CHECKPOINTS.join(THREADS, T.id == C.thread)
# A thread's checkpoint found by (runtime, thread id) in one query: get_tuple's first read.
BY_NAME = (T.runtime_id == RUNTIME, T.thread_id == THREAD_ID, C.checkpoint_ns == NS)
ONE_BY_NAME = (
    sa.select(*CHECKPOINT_COLUMNS).select_from(JOINED).where(*BY_NAME, C.checkpoint_id == ID)
)
NEWEST_BY_NAME = (
    sa.select(*CHECKPOINT_COLUMNS)
    .select_from(JOINED)
    .where(*BY_NAME)
    .order_by(C.checkpoint_id.desc())
    .limit(1)
)
VALUES_OF = sa.select(B.channel, B.version, B.type, B.data, B.manifest_id).where(
    B.thread == KEY,
    B.checkpoint_ns == NS,
    sa.tuple_(B.channel, B.version).in_(sa.bindparam("pairs", expanding=True)),
)
WRITES_OF = (
    sa.select(W.task_id, W.task_path, W.idx, W.channel, W.type, W.data, W.manifest_id)
    .where(W.thread == KEY, W.checkpoint_ns == NS, W.checkpoint_id == ID)
    .order_by(W.task_path, W.task_id, W.idx)
)


def value(row: Any) -> LangGraphValue:
    data = row.data
    return LangGraphValue(
        type=row.type,
        data=bytes(data) if data is not None else b"",
        manifest_id=row.manifest_id,
    )


def stored(value: LangGraphValue) -> dict[str, Any]:
    return {
        "type": value.type,
        "data": value.data if value.manifest_id is None else None,
        "manifest_id": value.manifest_id,
    }


def batches(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), BATCH):
        yield items[start : start + BATCH]


def upserts(insert: Any) -> dict[str, Any]:
    """The upserts of `sql_langgraph`, built with the dialect's `insert`."""
    checkpoint = insert(CHECKPOINTS)
    write = insert(WRITES)
    replaced = ("task_path", "channel", "type", "data", "manifest_id", "created_at_ms")
    return {
        "thread": insert(THREADS),
        "blobs": insert(BLOBS).on_conflict_do_nothing(
            index_elements=["thread", "checkpoint_ns", "channel", "version"]
        ),
        "checkpoint": checkpoint.on_conflict_do_update(
            index_elements=["thread", "checkpoint_ns", "checkpoint_id"],
            set_={
                name: checkpoint.excluded[name]
                for name in (
                    "parent_checkpoint_id",
                    "run_id",
                    "created_at_ms",
                    "type",
                    "data",
                    "manifest_id",
                    "versions",
                    "metadata",
                )
            },
        ),
        "writes_keep": write.on_conflict_do_nothing(
            index_elements=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"]
        ),
        "writes_replace": write.on_conflict_do_update(
            index_elements=["thread", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
            set_={name: write.excluded[name] for name in replaced},
        ),
    }

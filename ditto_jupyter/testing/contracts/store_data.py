"""The records the store specs write: runtimes, checkpoints, bindings and lease holders
with fixed timestamps, so two stores (or two points in time) compare equal.

Plain functions over the models; no pytest here.
"""

from __future__ import annotations

from typing import Any

from ditto_jupyter.control.store.interface import CheckpointStore
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    BackendBinding,
    BackendCheckpointRef,
    LeaseHolder,
    RuntimeCheckpoint,
    SessionLifecycleStatus,
    SessionRecord,
    UnrestorableValue,
)

CONTEXT, SNAPSHOT, DOCUMENT = "c" * 64, "d" * 64, "e" * 64


def runtime(rid: str, count: int = 0, **changes: Any) -> SessionRecord:
    """A runtime whose kernel has run `count` cells, as a checkpoint copies it."""
    run = {"context": {"kernel_id": f"k-{rid}"}, "process": "p", "execution_count": count}
    fields: dict[str, Any] = {
        "session_id": rid,
        "conversation_id": f"{rid}.ipynb",
        "sender_id": "ana",
        "handle_state": {"kernel_id": f"k-{rid}", "checkpointed_run": run},
        "created_at_ms": 5,
        "updated_at_ms": 5 + count,
    }
    return SessionRecord(**{**fields, **changes})


def after_cell(
    cid: str, rid: str, count: int, parent: str | None = None, **changes: Any
) -> RuntimeCheckpoint:
    """A checkpoint of `rid` after cell `count`: the same blobs each time (nothing changed)."""
    fields: dict[str, Any] = {
        "checkpoint_id": cid,
        "runtime_id": rid,
        "parent_checkpoint_id": parent,
        "session": runtime(rid, count),
        "backend_ref": BackendCheckpointRef(
            backend_kind="local",
            backend_id=f"be-{rid}",
            provider_snapshot_id=SNAPSHOT,
            created_at_ms=3,
            details={"files": 2, "bytes_written": 10},
        ),
        "context_manifest_id": CONTEXT,
        "unrestorable": [UnrestorableValue(name="fh", type="file", reason="open")],
        "created_at_ms": 100 + count,
    }
    return RuntimeCheckpoint(**{**fields, **changes})


def thinned(checkpoint: RuntimeCheckpoint) -> RuntimeCheckpoint:
    """The checkpoint as a prune leaves it: no variables, no workspace snapshot."""
    return checkpoint.model_copy(
        update={"context_manifest_id": None, "backend_ref": None, "pruned": True}
    )


def session(rid: str, created: int = 1_000, **changes: Any) -> SessionRecord:
    """A session record with fixed timestamps, so two stores can be compared."""
    fields: dict[str, Any] = {
        "session_id": rid,
        "conversation_id": f"notebooks/{rid}.ipynb",
        "sender_id": "ana",
        "created_at_ms": created,
        "updated_at_ms": created,
    }
    fields.update(changes)
    return SessionRecord(**fields)


def checkpoint(
    cid: str,
    rid: str,
    created: int = 2_000,
    *,
    parent: str | None = None,
    name: str | None = None,
    **changes: Any,
) -> RuntimeCheckpoint:
    """A checkpoint of `rid` with a full set of nested fields."""
    fields: dict[str, Any] = {
        "checkpoint_id": cid,
        "runtime_id": rid,
        "parent_checkpoint_id": parent,
        "session": session(rid),
        "backend_ref": BackendCheckpointRef(
            backend_kind="local",
            backend_id=f"be-{rid}",
            provider_snapshot_id="f" * 64,
            created_at_ms=created,
            details={"files": 3},
        ),
        "context_manifest_id": "a" * 64,
        "unrestorable": [UnrestorableValue(name="fh", type="TextIOWrapper", reason="open file")],
        "bytes_written": 123,
        "created_at_ms": created,
        "name": name,
        "metadata": {"owner": "ana", "tags": ["x", 1, None]},
    }
    fields.update(changes)
    return RuntimeCheckpoint(**fields)


def binding(rid: str, backend_id: str | None = None) -> BackendBinding:
    """A local backend binding for `rid`."""
    return BackendBinding(
        runtime_id=rid,
        backend_id=backend_id or f"be-{rid}",
        kind="local",
        details={"workspace": f"/ws/{rid}"},
    )


def dump_store(store: CheckpointStore) -> dict[str, Any]:
    """Everything a store holds, as plain JSON, to compare stores and points in time."""
    sessions = store.list_sessions()
    return {
        "sessions": [s.model_dump(mode="json") for s in sessions],
        "checkpoints": [c.model_dump(mode="json") for c in store.list_checkpoints()],
        "heads": {s.session_id: store.get_head(s.session_id) for s in sessions},
        "bindings": [b.model_dump(mode="json") for b in store.list_bindings()],
        "leftovers": [left.model_dump(mode="json") for left in store.list_leftovers()],
    }


def populate(store: CheckpointStore) -> None:
    """Two runtimes, three checkpoints, heads and a binding."""
    with store.transaction():
        store.insert_session(session("rt-a", 10))
        store.insert_session(session("rt-b", 20, status=SessionLifecycleStatus.PAUSED))
        store.put_checkpoint(checkpoint("cp-a1", "rt-a", 100, name="first"))
        store.put_checkpoint(checkpoint("cp-a2", "rt-a", 200, parent="cp-a1"))
        store.put_checkpoint(checkpoint("cp-b1", "rt-b", 150, parent="cp-a1", name="first"))
        store.set_head("rt-a", "cp-a2")
        store.set_head("rt-b", "cp-b1")
        store.put_binding(binding("rt-a"))


def record(rid: str, created: int = 1_000, **changes: Any) -> SessionRecord:
    """A session record with fixed timestamps."""
    fields: dict[str, Any] = {
        "session_id": rid,
        "conversation_id": f"{rid}.ipynb",
        "sender_id": "ana",
        "created_at_ms": created,
        "updated_at_ms": created,
    }
    return SessionRecord(**{**fields, **changes})


def taken(
    cid: str, rid: str, created: int, *, automatic: bool = False, **changes: Any
) -> RuntimeCheckpoint:
    """A checkpoint of `rid`; `automatic` as %autocheckpoint takes them (cell `created`)."""
    cell = AutoCheckpointCell(execution_count=created, source=f"v = {created}")
    fields: dict[str, Any] = {
        "checkpoint_id": cid,
        "runtime_id": rid,
        "parent_checkpoint_id": None,
        "session": record(rid),
        "context_manifest_id": "a" * 64,
        "created_at_ms": created,
        "name": f"cell-{created}" if automatic else None,
        "automatic": cell if automatic else None,
    }
    return RuntimeCheckpoint(**{**fields, **changes})


def holder(owner_id: str, **changes: object) -> LeaseHolder:
    fields: dict[str, object] = {
        "owner_id": owner_id,
        "host": "node-1",
        "boot_id": "boot",
        "pid": 100,
        "pid_start": 7,
        "url": f"http://{owner_id}/",
    }
    return LeaseHolder.model_validate({**fields, **changes})

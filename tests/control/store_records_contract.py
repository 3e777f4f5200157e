"""The store contract for how checkpoints and heads are kept (part of `StoreContract`).

The SQL store keeps what a run of checkpoints share once (a base) and each one's delta,
and a runtime's head in its row (schema 11): whatever a checkpoint holds reads back as it
was put, every blob it names stays referenced whatever happens to its parent, a head holds
its checkpoint against a prune wherever it was set from, and a checkpoint stays the
runtime's that took it. The same on SQLite, memory and PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    BackendCheckpointRef,
    CheckpointDocument,
    RuntimeCheckpoint,
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


class RecordsContract:
    """How checkpoints and heads are kept; subclasses provide the `store` fixture."""

    def test_what_a_checkpoint_holds_reads_back_as_it_was_put(self, store: CheckpointStore) -> None:
        store.insert_session(runtime("r"))
        first = after_cell("c1", "r", 1, bytes_written=4096, name="start")
        rich = after_cell(
            "c2",
            "r",
            2,
            parent="c1",
            metadata={
                "tags": ["x", 1, None, True, 1.5, -0.0, 2**70, 1e300],
                "nested": {"é": {"z": "ü"}},
            },
            automatic=AutoCheckpointCell(execution_count=2, source="x = 1\n" * 40, failed=True),
            replication="local",
            document=CheckpointDocument(origin="request", manifest_id=DOCUMENT, cells=3),
        )
        later = after_cell(
            "c3", "r", 3, parent="c2", session=runtime("r", 3, metadata={"a": 1, "big": -(2**80)})
        )
        restarted = after_cell(
            "c4", "r", 4, parent="c3", session=runtime("r", 4, handle_state={"kernel_id": "n"})
        )
        made = [first, rich, later, restarted]
        for checkpoint in made:
            store.put_checkpoint(checkpoint)
        assert [store.get_checkpoint(c.checkpoint_id) for c in made] == made
        assert store.list_checkpoints("r") == made
        assert store.page_checkpoints("r", newest_first=True, limit=2) == made[:1:-1]
        assert store.find_checkpoints("c") == made
        assert store.newest_named("start", "r") == first
        assert store.checkpoints_with_snapshot(SNAPSHOT) == made
        assert store.referenced_manifests([CONTEXT, SNAPSHOT, DOCUMENT]) == {
            CONTEXT,
            SNAPSHOT,
            DOCUMENT,
        }
        store.put_checkpoint(rich)  # replaced as it is: still the same
        assert store.list_checkpoints() == made

    def test_what_a_checkpoint_names_stays_referenced_whatever_its_parent_becomes(
        self, store: CheckpointStore
    ) -> None:
        store.insert_session(runtime("r"))
        chain = [after_cell(f"c{n}", "r", n, parent=f"c{n - 1}" if n else None) for n in range(4)]
        for checkpoint in chain:
            store.put_checkpoint(checkpoint)
        store.put_checkpoint(thinned(chain[0]))  # the first, pruned
        store.put_checkpoint(thinned(chain[2]))  # one in the middle too
        assert store.referenced_manifests([CONTEXT, SNAPSHOT]) == {CONTEXT, SNAPSHOT}
        with_snapshot = store.checkpoints_with_snapshot(SNAPSHOT)
        assert [c.checkpoint_id for c in with_snapshot] == ["c1", "c3"]
        assert store.get_checkpoint("c3") == chain[3]
        assert store.get_checkpoint("c0") == thinned(chain[0])
        # delete-snapshot: every checkpoint naming it forgets it, then nothing does
        for checkpoint in with_snapshot:
            assert checkpoint.backend_ref is not None
            cleared = checkpoint.backend_ref.model_copy(update={"provider_snapshot_id": None})
            store.put_checkpoint(checkpoint.model_copy(update={"backend_ref": cleared}))
        assert store.checkpoints_with_snapshot(SNAPSHOT) == []
        assert store.referenced_manifests([CONTEXT, SNAPSHOT]) == {CONTEXT}
        store.put_checkpoint(thinned(chain[1]))
        store.put_checkpoint(thinned(chain[3]))
        assert store.referenced_manifests([CONTEXT, SNAPSHOT]) == set()
        # a checkpoint that names it again keeps it alive again
        store.put_checkpoint(after_cell("c4", "r", 4, parent="c3"))
        assert store.referenced_manifests([CONTEXT, SNAPSHOT]) == {CONTEXT, SNAPSHOT}

    def test_a_checkpoint_stays_the_runtimes_that_took_it(self, store: CheckpointStore) -> None:
        store.insert_session(runtime("r"))
        store.insert_session(runtime("o"))
        store.put_checkpoint(after_cell("c1", "r", 1))
        with pytest.raises(ValueError, match="'c1' belongs to runtime 'r'; it cannot be stored"):
            store.put_checkpoint(after_cell("c1", "o", 1))
        assert store.get_checkpoint("c1") == after_cell("c1", "r", 1)

    def test_a_head_holds_its_checkpoint_wherever_it_was_set_from(
        self, store: CheckpointStore
    ) -> None:
        store.insert_session(runtime("r"))
        store.insert_session(runtime("o"))
        for n in range(1, 6):
            cell = AutoCheckpointCell(execution_count=n)
            store.put_checkpoint(after_cell(f"a{n}", "r", n, automatic=cell))
        store.put_checkpoint(after_cell("o1", "o", 1))
        store.set_head("r", "a2")
        store.set_head("o", "a3")  # a checkpoint of r restored in o
        with store.transaction():  # set before the runtime's row and its checkpoint exist
            store.set_head("p", "a4")
            store.insert_session(runtime("p"))
        assert store.get_head("p") == "a4"
        assert store.prune_candidates("r", 0).held == {"a2", "a3", "a4"}
        store.set_head("o", "o1")  # back to its own
        store.set_head("p", None)
        store.set_head("r", "a5")
        assert store.prune_candidates("r", 0).held == {"a5"}
        with store.transaction():  # a head set then replaced before its row is there
            store.set_head("q", "a1")
            store.set_head("q", "o1")
            store.insert_session(runtime("q"))
        assert store.get_head("q") == "o1"
        assert store.prune_candidates("r", 0).held == {"a5"}

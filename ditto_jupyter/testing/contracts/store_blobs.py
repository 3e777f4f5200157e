"""The spec of `BlobReferences` (`ditto_jupyter.control.store.interface`).

Which checkpoints name which blobs: the context manifest, the backend snapshot and the
notebook document of every stored checkpoint are found by index, whatever becomes of the
checkpoints around it, and a record replaced names only what it names now.
"""

from __future__ import annotations

from ditto_jupyter.control.store.interface import BlobReferences, CheckpointStore
from ditto_jupyter.core.models import (
    BackendCheckpointRef,
)
from ditto_jupyter.testing.contracts.store_data import (
    CONTEXT,
    SNAPSHOT,
    after_cell,
    checkpoint,
    populate,
    runtime,
    thinned,
)


class BlobReferencesContract:
    """`BlobReferences`; a subclass provides a `store` fixture: a fresh, empty store per test."""

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, BlobReferences)

    def test_blob_ids_are_indexed(self, store: CheckpointStore) -> None:
        populate(store)  # every checkpoint: context "a" * 64, snapshot "f" * 64
        shared = "5" * 64
        ref = BackendCheckpointRef(
            backend_kind="local", backend_id="be", provider_snapshot_id=shared
        )
        store.put_checkpoint(checkpoint("cp-s1", "rt-a", 300, backend_ref=ref))
        store.put_checkpoint(checkpoint("cp-s2", "rt-b", 250, backend_ref=ref))
        store.put_checkpoint(
            checkpoint("cp-none", "rt-b", 260, backend_ref=None, context_manifest_id=None)
        )
        found = store.checkpoints_with_snapshot(shared)
        assert [c.checkpoint_id for c in found] == ["cp-s2", "cp-s1"]
        assert store.checkpoints_with_snapshot("nothing") == []
        asked = ["a" * 64, shared, "f" * 64, "0" * 64]
        assert store.referenced_manifests(asked) == {"a" * 64, shared, "f" * 64}
        assert store.referenced_manifests([]) == set()
        # a replaced record names what it names now
        cleared = ref.model_copy(update={"provider_snapshot_id": None})
        store.put_checkpoint(checkpoint("cp-s1", "rt-a", 300, backend_ref=cleared))
        store.put_checkpoint(checkpoint("cp-s2", "rt-b", 250, context_manifest_id="b" * 64))
        assert store.checkpoints_with_snapshot(shared) == []
        assert store.referenced_manifests([shared, "b" * 64]) == {"b" * 64}

    def test_what_a_checkpoint_names_stays_referenced_whatever_its_parent_becomes(
        self, store: CheckpointStore
    ) -> None:
        store.insert_session(runtime("r"))
        chain = [after_cell(f"c{n}", "r", n, parent=f"c{n - 1}" if n else None) for n in range(4)]
        for link in chain:
            store.put_checkpoint(link)
        store.put_checkpoint(thinned(chain[0]))  # the first, pruned
        store.put_checkpoint(thinned(chain[2]))  # one in the middle too
        assert store.referenced_manifests([CONTEXT, SNAPSHOT]) == {CONTEXT, SNAPSHOT}
        with_snapshot = store.checkpoints_with_snapshot(SNAPSHOT)
        assert [c.checkpoint_id for c in with_snapshot] == ["c1", "c3"]
        assert store.get_checkpoint("c3") == chain[3]
        assert store.get_checkpoint("c0") == thinned(chain[0])
        # delete-snapshot: every checkpoint naming it forgets it, then nothing does
        for named in with_snapshot:
            assert named.backend_ref is not None
            cleared = named.backend_ref.model_copy(update={"provider_snapshot_id": None})
            store.put_checkpoint(named.model_copy(update={"backend_ref": cleared}))
        assert store.checkpoints_with_snapshot(SNAPSHOT) == []
        assert store.referenced_manifests([CONTEXT, SNAPSHOT]) == {CONTEXT}
        store.put_checkpoint(thinned(chain[1]))
        store.put_checkpoint(thinned(chain[3]))
        assert store.referenced_manifests([CONTEXT, SNAPSHOT]) == set()
        # a checkpoint that names it again keeps it alive again
        store.put_checkpoint(after_cell("c4", "r", 4, parent="c3"))
        assert store.referenced_manifests([CONTEXT, SNAPSHOT]) == {CONTEXT, SNAPSHOT}

"""Housekeeping: delete a checkpoint's snapshot, prune automatic checkpoints, collect garbage
(in this server's blob store, and in the bucket servers share: `bucket_gc`).

None of these touch a runtime's live state. Delete-snapshot is the one operation whose
store write comes before the provider work: the store records the deletion first, so no
record ever names a deleted snapshot, and gets the id back if the provider then fails.
A prune thins rows first too, then deletes the snapshots no record names any more; a
deletion that fails is logged and recorded as left behind, never raised after the fact.
"""

from __future__ import annotations

import logging
import re

from ditto_jupyter.control.autocheckpoint_pruning import thinned
from ditto_jupyter.control.bucket_gc import BucketGcReport
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.control.store import collecting_damaged_rows
from ditto_jupyter.core.blobs import GRACE_SECONDS, BlobError, GcReport
from ditto_jupyter.core.errors import InvalidRequest, StoreUnavailable
from ditto_jupyter.core.models import (
    AutoCheckpointPruneResult,
    BackendCheckpointRef,
    RuntimeCheckpoint,
    RuntimeCheckpointSnapshotDeleteResult,
)

_HEX_ID = re.compile(r"\b[0-9a-f]{64}\b")
_log = logging.getLogger(__name__)


def _without_snapshot(checkpoint: RuntimeCheckpoint) -> RuntimeCheckpoint:
    """The checkpoint with its backend snapshot id cleared (after delete-snapshot)."""
    ref = checkpoint.backend_ref
    if ref is None:
        return checkpoint
    cleared = ref.model_copy(update={"provider_snapshot_id": None})
    return checkpoint.model_copy(update={"backend_ref": cleared})


class Housekeeping:
    """Delete-snapshot, prune and garbage collection over one service's parts."""

    def __init__(self, parts: RuntimeParts) -> None:
        self.parts = parts

    async def delete_snapshot(self, checkpoint_id: str) -> RuntimeCheckpointSnapshotDeleteResult:
        """Delete the provider snapshot a checkpoint records (see
        `RuntimeService.delete_snapshot`)."""
        parts = self.parts
        checkpoint = await off_loop(parts.checkpoint, checkpoint_id)
        ref = checkpoint.backend_ref
        if ref is None or not ref.provider_snapshot_id:
            return RuntimeCheckpointSnapshotDeleteResult(
                checkpoint_id=checkpoint_id, deleted=False, already_deleted=True
            )
        snapshot_id = ref.provider_snapshot_id
        async with parts.guard.operation(checkpoint.runtime_id):
            # The snapshot's manifests are marked first: the next collection checks them
            # again (and keeps them if a checkpoint still names them).
            parts.blobs.mark_for_collection(parts.backends.referenced_manifests(ref))
            sharing = await off_loop(self._forget_snapshot, snapshot_id)
            try:
                deleted = await parts.backends.delete_snapshot(ref)
            except BaseException:
                await off_loop(self._put_all, sharing)
                raise
        parts.request_collection()  # its chunks, in the background
        return RuntimeCheckpointSnapshotDeleteResult(
            checkpoint_id=checkpoint_id, deleted=deleted, already_deleted=not deleted
        )

    def _forget_snapshot(self, snapshot_id: str) -> list[RuntimeCheckpoint]:
        """In one transaction (on a store thread): the checkpoints recording the snapshot,
        as they were, each recorded without it now."""
        store = self.parts.store
        with store.transaction():
            sharing = [
                other
                for other in store.checkpoints_with_snapshot(snapshot_id)
                if other.backend_ref is not None
                and other.backend_ref.provider_snapshot_id == snapshot_id
            ]
            for other in sharing:
                store.put_checkpoint(_without_snapshot(other))
        return sharing

    def _put_all(self, checkpoints: list[RuntimeCheckpoint]) -> None:
        """Record these checkpoints in one transaction (on a store thread)."""
        with self.parts.store.transaction():
            for checkpoint in checkpoints:
                self.parts.store.put_checkpoint(checkpoint)

    async def prune_automatic(self, runtime_id: str, keep: int) -> AutoCheckpointPruneResult:
        """Thin a runtime's automatic checkpoints beyond the newest `keep` (see
        `autocheckpoint_pruning`): rows stay, their variables and workspace snapshots go."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise InvalidRequest(f"keep must be a whole number of at least 1, not {keep!r}")
        parts = self.parts
        await off_loop(parts.guard.session, runtime_id)
        async with parts.guard.operation(runtime_id):
            found = await off_loop(parts.store.prune_candidates, runtime_id, keep)
            pruned = [c for c in found.beyond if c.checkpoint_id not in found.held]
            held = [c.checkpoint_id for c in found.beyond if c.checkpoint_id in found.held]
            if pruned:
                # Recorded first: the next collection checks these manifests again (and
                # keeps any a checkpoint still names).
                parts.blobs.mark_for_collection([m for c in pruned for m in parts.manifests_of(c)])
                await off_loop(self._put_all, [thinned(c) for c in pruned])
                await self._delete_unnamed_snapshots(runtime_id, pruned)
        if pruned:
            parts.request_collection()  # their chunks, in the background
        return AutoCheckpointPruneResult(
            runtime_id=runtime_id,
            keep=keep,
            pruned=[c.checkpoint_id for c in pruned],
            held=held,
            whole=found.whole - len(pruned),
        )

    async def _delete_unnamed_snapshots(
        self, runtime_id: str, pruned: list[RuntimeCheckpoint]
    ) -> None:
        """Delete the provider snapshots of thinned checkpoints that no record names now."""
        dropped: dict[str, BackendCheckpointRef] = {
            c.backend_ref.provider_snapshot_id: c.backend_ref
            for c in pruned
            if c.backend_ref is not None and c.backend_ref.provider_snapshot_id
        }
        for snapshot_id, ref in dropped.items():
            if not (await off_loop(self.parts.store.checkpoints_with_snapshot, snapshot_id)):
                await self.parts.delete_snapshot(ref, runtime_id)

    def live_manifests(self) -> set[str]:
        """Blob-store manifests some checkpoint still references (reads every checkpoint:
        for checks and tests, never on a request path)."""
        with collecting_damaged_rows() as damaged:
            checkpoints = self.parts.store.list_checkpoints()
        live = {found for row in damaged for found in _HEX_ID.findall(row.text)}
        for checkpoint in checkpoints:
            live.update(self.parts.manifests_of(checkpoint))
        return live

    def gc(self, *, grace_seconds: float = GRACE_SECONDS) -> GcReport:
        """Free blob-store chunks and manifests no checkpoint references any more."""
        return self.parts.blobs.gc(self.parts.guard.referenced, grace_seconds=grace_seconds)

    def bucket_gc(self, *, grace_seconds: float = GRACE_SECONDS) -> BucketGcReport | None:
        """Delete from the shared bucket what no checkpoint references (None: no bucket);
        one server at a time collects (see `bucket_gc`)."""
        coordination = self.parts.replication.coordination
        if coordination is None:
            return None
        return coordination.collect(self.live_manifests, grace_seconds=grace_seconds)

    def gc_everywhere(self, *, grace_seconds: float = GRACE_SECONDS) -> GcReport:
        """This server's collection, then the shared bucket's (whose failure is logged:
        what it would have deleted goes at the next collection)."""
        report = self.gc(grace_seconds=grace_seconds)
        try:
            found = self.bucket_gc(grace_seconds=grace_seconds)
        except (BlobError, StoreUnavailable) as error:
            _log.warning("ditto: garbage collection of the shared bucket failed: %s", error)
        else:
            if found is not None and found.reason:
                _log.info("ditto: the shared bucket was not wholly collected: %s", found.reason)
        return report

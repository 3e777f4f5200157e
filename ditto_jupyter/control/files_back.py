"""A runtime's workspace files brought back to a checkpoint's, in place, and never lost.

Undo and restore both bring a checkpoint's files back into the live workspace
(`InPlaceRestorer`: the local workspace; an E2B sandbox cannot take a snapshot back in
place). Safely: the files as they are are snapshotted first; if bringing the checkpoint's
back, or the kernel's variables after them, fails, that snapshot is brought back. Should
even that fail, the snapshot is recorded as a checkpoint (`before-undo`, `before-restore`)
holding the head's variables and the files as they were, so no file is lost, and the error
says so. A restore that succeeds keeps that snapshot the same way when it holds files the
head does not (written since the head, by the kernel or a terminal): the restore replaced
them, and the checkpoint is where they still are. That checkpoint is made and queued for the
object store as every other is (`checkpointing.new_checkpoint`, `replicate_behind`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ditto_jupyter.backends.base import InPlaceRestorer
from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.control.checkpointing import new_checkpoint, replicate_behind
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.errors import UnsupportedBackend
from ditto_jupyter.core.models import (
    BackendCheckpointRef,
    ContextCapture,
    RuntimeCheckpoint,
    SessionRecord,
    UnrestorableValue,
    now_ms,
)

_log = logging.getLogger(__name__)


class FilesBack:
    """Bring a checkpoint's files back into a runtime's workspace (see the module)."""

    def __init__(self, parts: RuntimeParts, *, keep_name: str, operation: str) -> None:
        self.parts = parts
        self.keep_name = keep_name  # the checkpoint that keeps files a failure would lose
        self.operation = operation  # "undo", "restore": for log lines and errors

    async def in_place_backend(self, session: SessionRecord) -> DirtyTrackingBackend | None:
        """The runtime's backend when it can bring a snapshot back in place, else None."""
        backend = await self.parts.backend(session)
        if backend is None or not isinstance(backend.inner, InPlaceRestorer):
            return None
        return backend

    async def required_backend(
        self, session: SessionRecord, target: RuntimeCheckpoint
    ) -> DirtyTrackingBackend | None:
        """The runtime's backend, checked able to take the target's files back in place
        (UnsupportedBackend otherwise, before anything changes); None: it has none."""
        backend = await self.parts.backend(session)
        if backend is None:
            return None
        if not isinstance(backend.inner, InPlaceRestorer):
            raise UnsupportedBackend(
                f"runtime {session.session_id}'s files live in a {backend.kind} backend, "
                "which cannot bring a snapshot back in place, so its files cannot come back "
                f"by {self.operation}; check the checkpoint out into a new runtime instead"
            )
        if not has_snapshot(target):
            raise UnsupportedBackend(
                f"checkpoint {target.checkpoint_id[:12]} has no workspace snapshot any more "
                "(it was deleted), so its files cannot come back"
            )
        return backend

    async def move(
        self,
        session: SessionRecord,
        backend: DirtyTrackingBackend | None,
        head: RuntimeCheckpoint | None,
        target: RuntimeCheckpoint,
        variables: Callable[[], Awaitable[list[UnrestorableValue]]] | None = None,
        *,
        live: ContextCapture | None = None,
    ) -> list[UnrestorableValue]:
        """Move the runtime to `target`: its files back, then `variables()` (the server's
        restore of the kernel's variables; None when the kernel restored them itself),
        the files put back if that fails, the files it replaced kept, the snapshot's hold
        let go, and `target` made the head. What the variables could not bring back.
        `live`: the kernel's variables as they were, when the head does not hold them (an
        undo): kept with the files in the checkpoint `keep_name`, which is then made."""
        runtime_id = session.session_id
        unrestorable: list[UnrestorableValue] = []
        try:
            # a write intent from the files' snapshot until what keeps it is recorded: no
            # collection on another server deletes what the snapshot reuses (`bucket_gc`)
            async with self.parts.replication.writing():
                safety = await self.bring_back(session, backend, head, target)
                try:
                    if variables is not None:
                        unrestorable = await variables()
                except BaseException:
                    await self.put_back(session, backend, head, safety)
                    if live is not None and head is not None:  # variables half restored
                        self.keep(session, head, safety or head.backend_ref, live)
                    raise
                self.keep_replaced(session, head, target, safety, live)
        finally:
            self.parts.guard.let_go(runtime_id)
        await off_loop(self.parts.store.set_head, runtime_id, target.checkpoint_id)
        return unrestorable

    async def bring_back(
        self,
        session: SessionRecord,
        backend: DirtyTrackingBackend | None,
        head: RuntimeCheckpoint | None,
        target: RuntimeCheckpoint,
    ) -> BackendCheckpointRef | None:
        """Snapshot the files as they are, then bring the target's back; the snapshot taken
        (None without a backend). A failure puts the snapshot back first. The caller ends
        the snapshot's hold (`guard.let_go`) once the operation is over."""
        if backend is None:
            return None
        parts = self.parts
        runtime_id = session.session_id
        backend.mark_dirty()  # the kernel writes the workspace directly: a new snapshot
        safety = await parts.backends.checkpoint_backend(runtime_id=runtime_id)
        parts.guard.hold(runtime_id, parts.backends.referenced_manifests(safety))
        assert target.backend_ref is not None
        try:
            await backend.restore_snapshot(target.backend_ref)
        except BaseException:
            await self.put_back(session, backend, head, safety)
            raise
        return safety

    async def put_back(
        self,
        session: SessionRecord,
        backend: DirtyTrackingBackend | None,
        head: RuntimeCheckpoint | None,
        safety: BackendCheckpointRef | None,
    ) -> None:
        """Bring the files the operation started from back; failing that, keep them in a
        checkpoint."""
        if backend is None or safety is None:
            return
        try:
            await backend.restore_snapshot(safety)
            return
        except Exception as error:
            _log.error(
                "ditto: %s of runtime %s failed and its files could not be put back (%s); "
                "they are kept in a checkpoint named %r",
                self.operation,
                session.session_id,
                error,
                self.keep_name,
            )
        backend.mark_dirty()
        self.keep(session, head, safety)

    def keep_replaced(
        self,
        session: SessionRecord,
        head: RuntimeCheckpoint | None,
        target: RuntimeCheckpoint,
        safety: BackendCheckpointRef | None,
        live: ContextCapture | None = None,
    ) -> RuntimeCheckpoint | None:
        """After a successful bring-back: the files it replaced, kept in a checkpoint when
        neither the head nor the target holds them, or the live variables (`live`) the head
        does not hold (None: nothing was replaced unkept)."""
        if head is None:
            return None
        if live is not None:
            return self.keep(session, head, safety or head.backend_ref, live)
        if safety is None:
            return None
        held = {snapshot_id(head), snapshot_id(target)}
        if safety.provider_snapshot_id in held:
            return None
        return self.keep(session, head, safety)

    def keep(
        self,
        session: SessionRecord,
        head: RuntimeCheckpoint | None,
        safety: BackendCheckpointRef | None,
        live: ContextCapture | None = None,
    ) -> RuntimeCheckpoint | None:
        """Record the files as they were, with the head's variables, or the live ones
        (`live`) when the head does not hold them (none without a head: then the snapshot
        stays unrecorded and the log says so)."""
        runtime_id = session.session_id
        if head is None:
            _log.error(
                "ditto: runtime %s has no checkpoint to keep its files' snapshot %s beside",
                runtime_id,
                safety.provider_snapshot_id if safety is not None else None,
            )
            return None
        kept = new_checkpoint(
            self.parts,
            session.model_copy(update={"updated_at_ms": now_ms()}),
            parent_checkpoint_id=head.checkpoint_id,
            backend_ref=safety,
            context_manifest_id=live.manifest_id if live is not None else head.context_manifest_id,
            unrestorable=live.unrestorable if live is not None else head.unrestorable,
            name=self.keep_name,
            metadata={"variables_from": "live" if live is not None else head.checkpoint_id},
        )
        self.parts.store.put_checkpoint(kept)
        replicate_behind(self.parts, kept)
        return kept


def snapshot_id(checkpoint: RuntimeCheckpoint) -> str | None:
    """The workspace snapshot a checkpoint holds, if any."""
    ref = checkpoint.backend_ref
    return ref.provider_snapshot_id if ref is not None and ref.provider_snapshot_id else None


def has_snapshot(checkpoint: RuntimeCheckpoint) -> bool:
    return snapshot_id(checkpoint) is not None

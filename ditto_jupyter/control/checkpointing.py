"""Checkpointing: capture a live runtime into a checkpoint (`in_place_restore` brings one
back), and the one builder of every checkpoint record (`new_checkpoint`).

A checkpoint is taken of an idle runtime (or of a kernel that captured itself from a magic:
`precaptured`), in two halves: the provider work (the context's capture, the backend's
snapshot), then the store writes (the checkpoint, the new head, the session) in one
transaction. When the store refuses, a snapshot taken for it is discarded.

"No cell ran since the last checkpoint" is judged per kernel process: the kernel's handle,
the process the capture reports (`kernel_process`, drawn when the kernel process starts)
and its execution count (`run_mark`), never a count compared across kernels or across a
restart of one kernel. Only then is a clean remote backend's last snapshot reused. A local
workspace is snapshotted anew every time (incrementally: unchanged files by their stat):
the kernel, its threads and subprocesses, a terminal and JupyterLab's file editor all write
it directly, and a cell run without history (nbval, some clients) leaves the count as is.

A pause (`seal`) fences the context before it captures and seals it once the snapshot is
taken, before the store writes: a cell that ran meanwhile gives the pause up (SessionBusy,
the snapshot discarded, the kernel left running), and the kernel refuses cells once sealed.

Every checkpoint record is made by `new_checkpoint`, and every one recorded `local` is
queued for the object store by `replicate_behind` once its record is committed: a capture,
the files `before-undo` and `before-restore` keep (`files_back`), a lost runtime's. So none
is recorded without saying where its bytes are, and none stays off the bucket.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.provider_work import ProviderWork
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.blobs import NAMESPACE_MANIFEST_KIND, BlobError, BlobStore
from ditto_jupyter.core.errors import InvalidRequest, SessionBusy
from ditto_jupyter.core.limits import MAX_NAME_LENGTH, metadata_problem
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    BackendCheckpointRef,
    CheckpointDocument,
    ContextCapture,
    RuntimeCheckpoint,
    RuntimeCheckpointResult,
    SessionRecord,
    UnrestorableValue,
    now_ms,
)

_log = logging.getLogger(__name__)

#: handle_state key: which kernel had run how many cells at the runtime's last checkpoint.
_CHECKPOINTED_RUN = "checkpointed_run"
#: What older records kept instead: a bare count, compared across kernels. Ignored now.
_LEGACY_COUNT = "checkpointed_execution_count"
_BOOKKEEPING = (_CHECKPOINTED_RUN, _LEGACY_COUNT)


def new_checkpoint_id() -> str:
    """A fresh checkpoint id (32 hex digits; magics accept any unique prefix)."""
    return uuid.uuid4().hex


def run_mark(handle_state: Mapping[str, Any], capture: ContextCapture) -> dict[str, Any] | None:
    """Which context (its handle, e.g. the kernel id, and its process) had run how many
    cells; None: unknown, so nothing is reused on it.

    Two marks are equal only for the same kernel process at the same count: a checkout
    child or a resumed runtime has a new kernel whose count restarts, and a kernel Jupyter
    restarted under the same id is a new process, so neither matches what came before.
    """
    if capture.execution_count is None or capture.kernel_process is None:
        return None
    context = {k: v for k, v in handle_state.items() if k not in _BOOKKEEPING}
    return {
        "context": context,
        "process": capture.kernel_process,
        "execution_count": capture.execution_count,
        "cells_run": capture.cells_run,
    }


def without_bookkeeping(handle_state: Mapping[str, Any]) -> dict[str, Any]:
    """A handle state without what checkpointing keeps in it."""
    return {k: v for k, v in handle_state.items() if k not in _BOOKKEEPING}


def check_request(name: str | None, metadata: Mapping[str, Any] | None, whose: str) -> None:
    """InvalidRequest when a name or metadata breaks a limit of `core.limits` (the REST
    models check requests already; this holds in-process callers and merges to them)."""
    if name is not None and len(name) > MAX_NAME_LENGTH:
        raise InvalidRequest(
            f"the checkpoint name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}"
        )
    problem = metadata_problem(metadata) if metadata else None
    if problem is not None:
        raise InvalidRequest(f"{whose}{problem}")


def merged_metadata(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """`base` updated with `extra`, within the metadata limits (each request is within
    them, but merges could grow a runtime's metadata without end)."""
    merged = dict(base)
    merged.update(extra or {})
    if extra:
        check_request(None, merged, "merged with the runtime's own, ")
    return merged


def check_self_capture(blobs: BlobStore, runtime_id: str, capture: ContextCapture) -> None:
    """Refuse a kernel's own capture unless it can become this runtime's checkpoint.

    Its manifest must be in this blob store with a valid signature, of the
    kernel-namespace kind (so a resume can restore it), and captured for `runtime_id`.
    A restored manifest (a checkout child's first head, a resumed runtime's) names the
    runtime it was captured for; new captures name the runtime that made them.
    Manifests written before the runtime was named stay restorable but are refused here.
    """
    manifest_id = capture.manifest_id
    try:
        body = blobs.get_manifest(manifest_id)
    except (BlobError, OSError) as error:
        raise InvalidRequest(
            f"capture.manifest_id {manifest_id!r} is not a valid manifest of this "
            f"server's store ({error})"
        ) from None
    kind = body.get("kind")
    if kind != NAMESPACE_MANIFEST_KIND:
        raise InvalidRequest(
            f"capture.manifest_id {manifest_id!r} is a {kind!r} manifest, not a "
            f"{NAMESPACE_MANIFEST_KIND!r} capture of a kernel"
        )
    captured_for = body.get("runtime_id")
    if captured_for != runtime_id:
        whose = f"runtime {captured_for}" if captured_for else "no runtime"
        raise InvalidRequest(
            f"capture.manifest_id {manifest_id!r} was captured for {whose}, not for "
            f"runtime {runtime_id}"
        )


def new_checkpoint(
    parts: RuntimeParts,
    session: SessionRecord,
    *,
    parent_checkpoint_id: str | None,
    backend_ref: BackendCheckpointRef | None,
    context_manifest_id: str | None,
    unrestorable: list[UnrestorableValue],
    name: str | None,
    metadata: dict[str, Any],
    bytes_written: int = 0,
    automatic: AutoCheckpointCell | None = None,
    unique: bool = False,
) -> RuntimeCheckpoint:
    """A new checkpoint's record, not yet written: a fresh id, and where its bytes are
    (`replication`: `local` with an object store until an upload before its record says
    otherwise, None without one). Every checkpoint is made here. `unique`: the name is one
    the system numbers (`cell-3`, a pause's `pause`), made unique within the runtime
    (`cell-3-2`: a resumed kernel counts its cells from 1 again). `before-undo`,
    `before-restore` and `lost` are not: `%restore lost` takes the newest, as it should."""
    if unique and name is not None:
        name = unique_name(parts, session.session_id, name)
    return RuntimeCheckpoint(
        checkpoint_id=new_checkpoint_id(),
        runtime_id=session.session_id,
        replication=parts.replication.state_at_commit(uploaded=False),
        parent_checkpoint_id=parent_checkpoint_id,
        session=session,
        backend_ref=backend_ref,
        context_manifest_id=context_manifest_id,
        unrestorable=unrestorable,
        bytes_written=bytes_written,
        name=name,
        metadata=metadata,
        automatic=automatic,
    )


def unique_name(parts: RuntimeParts, runtime_id: str, name: str) -> str:
    """`name`, or `name-2`, `name-3`...: the first that no checkpoint of the runtime has (the
    runtime's operations are one at a time, so nothing takes it meanwhile)."""
    taken = parts.store.newest_named
    if taken(name, runtime_id) is None:
        return name
    number = 2
    while taken(f"{name}-{number}", runtime_id) is not None:
        number += 1
    return f"{name}-{number}"


def replicate_behind(parts: RuntimeParts, checkpoint: RuntimeCheckpoint) -> None:
    """Once a checkpoint's record is committed: queue its blobs for the object store,
    unless they were uploaded before it (`replicated`; nothing without an object store)."""
    if checkpoint.replication == "local":
        parts.replication.upload_soon(checkpoint.checkpoint_id, parts.manifests_of(checkpoint))


def snapshot_bytes(ref: BackendCheckpointRef | None) -> int:
    """The bytes a backend's snapshot reports it put on disk (a local workspace's blobs and
    the catalogue's log beyond them); 0 when it reports none."""
    details = ref.details if ref is not None else {}
    counted = [details.get("bytes_written"), details.get("database_bytes")]
    return sum(n for n in counted if isinstance(n, int) and n > 0)


class Checkpointing:
    """Checkpoint a live runtime; restore a checkpoint into one in place."""

    def __init__(self, parts: RuntimeParts) -> None:
        self.parts = parts

    async def checkpoint(
        self,
        runtime_id: str,
        name: str | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        precaptured: ContextCapture | None = None,
        automatic: AutoCheckpointCell | None = None,
        document: CheckpointDocument | None = None,
    ) -> RuntimeCheckpointResult:
        """Capture an idle runtime (see `RuntimeService.checkpoint`)."""
        if precaptured is None:  # the kernel's automatic checkpoints first, then this one
            await self.parts.guard.settle(runtime_id)
        async with self.parts.guard.operation(runtime_id):
            checkpoint, session, written = await self.checkpoint_live(
                runtime_id, name, metadata, precaptured, automatic=automatic, document=document
            )
        return RuntimeCheckpointResult(
            checkpoint_id=checkpoint.checkpoint_id,
            runtime=await self.parts.guard.public(session),
            # the head it followed, read in the operation's slot: nothing else moved it
            previous_checkpoint_id=checkpoint.parent_checkpoint_id,
            bytes_written=written,
        )

    async def checkpoint_live(
        self,
        runtime_id: str,
        name: str | None,
        metadata: dict[str, Any] | None,
        precaptured: ContextCapture | None,
        *,
        automatic: AutoCheckpointCell | None = None,
        seal: bool = False,
        pause: bool = False,
        document: CheckpointDocument | None = None,
        unique_name: bool = False,
    ) -> tuple[RuntimeCheckpoint, SessionRecord, int]:
        """Checkpoint an idle live runtime and make it the head (checkpoint, pause, close).

        The caller holds the runtime's operation slot. When the store refuses the new
        records, a snapshot taken for them is discarded and the store is unchanged.
        `seal` (a pause the server captures): the context is fenced before its capture and
        sealed before the store writes; SessionBusy, and nothing recorded, when a cell ran
        since.
        With an object store, the blobs are uploaded before the records are written when
        the deployment says so or for a `pause` (an upload that fails fails the
        checkpoint, which is then not recorded), else queued for upload once they are.
        `document` is the notebook stored for it already (`checkpoint_documents`), if any.
        `unique_name`: the name is the system's (a pause's default): made unique, as an
        automatic checkpoint's is (`new_checkpoint`).
        Also returned: every byte the checkpoint put on disk (the capture's blobs and the
        catalogue's log beyond them, the workspace snapshot's, and what the store's commit
        and the catalogue's reference marks appended to their logs).
        """
        parts = self.parts
        check_request(name, metadata, "")
        session = await off_loop(parts.guard.live_session, runtime_id)
        if precaptured is None:
            await parts.guard.require_idle(session)
        else:
            check_self_capture(self.parts.blobs, runtime_id, precaptured)
        fencing = seal and precaptured is None
        try:
            async with parts.replication.writing(), parts.provider_work(runtime_id) as work:
                if precaptured is not None:  # taken before the intent: a collection may
                    await asyncio.to_thread(  # have deleted what it reuses in between
                        parts.replication.require_backed, [precaptured.manifest_id]
                    )
                if fencing:
                    await parts.context.fence(session)
                checkpoint, session, capture = await self._take_checkpoint(
                    session,
                    name,
                    metadata,
                    precaptured,
                    automatic=automatic,
                    unique_name=unique_name,
                )
                parent = checkpoint.parent_checkpoint_id
                before = await off_loop(parts.store.get_checkpoint, parent) if parent else None
                previous_ref = before.backend_ref if before is not None else None
                checkpoint = checkpoint.model_copy(update={"document": document})
                ref = checkpoint.backend_ref
                work.undo_with(
                    f"discarding the snapshot of a checkpoint of runtime {runtime_id}",
                    lambda: parts.discard_new_ref(runtime_id, ref),
                )
                if fencing:
                    await self._seal(work, session)
                manifests = parts.manifests_of(checkpoint)
                parts.guard.hold(runtime_id, manifests)
                uploaded = parts.replication.must_wait(pause=pause)
                if uploaded:
                    await parts.replication.upload(manifests)
                checkpoint = checkpoint.model_copy(
                    update={"replication": parts.replication.state_at_commit(uploaded=uploaded)}
                )
                recorded, live = checkpoint, session

                def record() -> int:  # on a store thread: a store that waits stops no loop
                    with work.commit():
                        parts.store.put_checkpoint(recorded)
                        parts.store.set_head(runtime_id, recorded.checkpoint_id)
                        parts.store.put_session(live)
                    return parts.store.last_commit_bytes()

                after_commit = await off_loop(record)
            replicate_behind(parts, checkpoint)
            # What the parent names was marked when it was recorded (a mark is a hint: an
            # unmarked manifest is checked against the store instead), so a checkpoint
            # that changed nothing makes no transaction of the blob catalogue here.
            named = set(parts.manifests_of(before)) if before is not None else set()
            fresh = [manifest for manifest in manifests if manifest not in named]
            try:
                if fresh:
                    parts.blobs.mark_referenced(fresh)
                    after_commit += parts.blobs.index.last_write_bytes()
            except BlobError as error:  # a hint only: garbage collection asks the store
                _log.warning(
                    "ditto: could not mark the manifests of checkpoint %s as referenced (%s); "
                    "garbage collection checks the store for them instead",
                    checkpoint.checkpoint_id,
                    error,
                )
        finally:
            parts.guard.let_go(runtime_id)
        written = capture.bytes_written + capture.database_bytes + after_commit
        if checkpoint.backend_ref != previous_ref:  # a snapshot reused wrote nothing now
            written += snapshot_bytes(checkpoint.backend_ref)
        return checkpoint, session, written

    async def _seal(self, work: ProviderWork, session: SessionRecord) -> None:
        """Seal the context being paused (undone if the pause fails after), or SessionBusy
        when a cell ran since its fence."""
        parts = self.parts
        if not await parts.context.seal(session):
            raise SessionBusy(
                f"runtime {session.session_id} ran a cell while it was being paused, so it was "
                "not paused: it keeps running with that cell's work"
            )
        work.undo_with(
            f"letting the kernel of runtime {session.session_id} run cells again",
            lambda: parts.context.unseal(session),
        )

    async def _take_checkpoint(
        self,
        session: SessionRecord,
        name: str | None,
        metadata: dict[str, Any] | None,
        precaptured: ContextCapture | None,
        *,
        automatic: AutoCheckpointCell | None,
        unique_name: bool = False,
    ) -> tuple[RuntimeCheckpoint, SessionRecord, ContextCapture]:
        """Capture context and backend; nothing is written to the store here.

        A remote backend's last snapshot is reused only when it is clean and this same
        kernel process has run no cell since the last checkpoint; a local workspace is
        snapshotted anew (see the module docstring).
        """
        parts = self.parts
        capture = precaptured or await parts.context.capture(session)
        parts.guard.hold(session.session_id, [capture.manifest_id])
        backend = await parts.backend(session)
        mark = run_mark(session.handle_state, capture)
        ref: BackendCheckpointRef | None = None
        if backend is not None:
            ran_code = mark is None or session.handle_state.get(_CHECKPOINTED_RUN) != mark
            if ran_code or backend.local_path is not None:
                backend.mark_dirty()  # running a cell counts as exec for dirty tracking
            ref = await parts.backends.checkpoint_backend(runtime_id=session.session_id)
        handle_state = without_bookkeeping(session.handle_state)
        if mark is not None:
            handle_state[_CHECKPOINTED_RUN] = mark
        session = session.model_copy(
            update={"handle_state": handle_state, "updated_at_ms": now_ms()}
        )
        checkpoint = await off_loop(  # a unique name reads the store
            new_checkpoint,
            parts,
            session,
            parent_checkpoint_id=await off_loop(parts.store.get_head, session.session_id),
            backend_ref=ref,
            context_manifest_id=capture.manifest_id,
            unrestorable=capture.unrestorable,
            bytes_written=capture.bytes_written,
            name=name,
            metadata=dict(metadata or {}),
            automatic=automatic,
            unique=unique_name or automatic is not None,
        )
        return checkpoint, session, capture

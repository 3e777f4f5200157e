"""The notebook document of a checkpoint: stored with it, answered later by a front end,
read back.

A checkpoint's document is stored before the checkpoint is recorded (`save`), as
content-addressed cells (`documents.DocumentStore`). Where it comes from is the caller's
choice (the server's session mapping decides: the request's document, else the saved file
while a front end may still answer): it is recorded with its origin and, while a front end's
answer is still accepted, the time the wait ends (`awaiting_until_ms`). An answer in time
replaces the document once (`answer`); later, twice, or for a checkpoint that never waited
is a `Conflict`. Without a server nothing sends one: the checkpoint holds no document.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from ditto_jupyter.control.documents import DocumentStore, check_document
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.blobs import BlobError
from ditto_jupyter.core.errors import CheckpointNotFound, Conflict, DittoError
from ditto_jupyter.core.models import (
    CheckpointDocument,
    CheckpointDocumentResult,
    DocumentOrigin,
    NotebookDocument,
    RuntimeCheckpoint,
)

_log = logging.getLogger(__name__)


class CheckpointDocuments:
    """Store, replace and read the notebook documents of one service's checkpoints."""

    def __init__(self, parts: RuntimeParts) -> None:
        self.parts = parts
        self.store = DocumentStore(parts.blobs)
        self._answering = asyncio.Lock()

    async def save(
        self,
        document: NotebookDocument | None,
        origin: DocumentOrigin,
        *,
        awaiting_until_ms: int | None = None,
    ) -> CheckpointDocument | None:
        """Store a document for a checkpoint about to be taken; what the checkpoint records.

        None when there is no document and no front end will be asked for one. The stored
        manifest is garbage until a checkpoint names it (collection keeps it for its grace
        period). InvalidRequest when the document is not one a checkpoint can hold.
        """
        if document is None:
            if awaiting_until_ms is None:
                return None
            return CheckpointDocument(origin="none", awaiting_until_ms=awaiting_until_ms)
        check_document(document)
        saved = await asyncio.to_thread(self.store.save, document)
        return CheckpointDocument(
            origin=origin,
            manifest_id=saved.manifest_id,
            cells=saved.cells,
            awaiting_until_ms=awaiting_until_ms,
        )

    async def answer(
        self, runtime_id: str, checkpoint_id: str, document: NotebookDocument
    ) -> CheckpointDocumentResult:
        """A front end's document for a checkpoint that waits for one: recorded once.

        CheckpointNotFound unless the checkpoint is `runtime_id`'s, word for word as for an
        id that does not exist (so another runtime's, or another user's, gives nothing
        away); Conflict when it does not wait for a document (any more). The checkpoint's
        other fields never change.
        """
        parts = self.parts
        found = await off_loop(parts.checkpoint, checkpoint_id)
        if found.runtime_id != runtime_id:
            raise CheckpointNotFound(f"no checkpoint with id {checkpoint_id!r}")
        self._refuse_unless_awaiting(found)
        stored = await self.save(document, "front_end")
        assert stored is not None
        hold = f"document:{checkpoint_id}"
        async with self._answering:  # two answers at once: one is recorded, one refused
            parts.guard.hold(hold, [stored.manifest_id])
            try:
                current = await off_loop(self._record_answer, checkpoint_id, stored)
                self._mark_referenced(stored)
            finally:
                parts.guard.let_go(hold)
            replaced = current.document_manifest_id
            if replaced is not None and replaced != stored.manifest_id:
                self._mark_for_collection(replaced)
        return CheckpointDocumentResult(
            checkpoint_id=checkpoint_id, runtime_id=runtime_id, document=stored.info()
        )

    def _record_answer(self, checkpoint_id: str, stored: CheckpointDocument) -> RuntimeCheckpoint:
        """Record the document the checkpoint awaits, in one transaction (on a store
        thread); the checkpoint as it was before."""
        with self.parts.store.transaction():
            current = self.parts.checkpoint(checkpoint_id)
            self._refuse_unless_awaiting(current)
            document = current.model_copy(update={"document": stored})
            self.parts.store.put_checkpoint(document)
        return current

    @staticmethod
    def _refuse_unless_awaiting(checkpoint: RuntimeCheckpoint) -> None:
        document = checkpoint.document
        if document is None or document.awaiting_until_ms is None:
            raise Conflict(
                f"checkpoint {checkpoint.checkpoint_id} does not wait for a document: "
                "its document was recorded when it was taken"
            )
        if not document.awaiting():
            raise Conflict(
                f"checkpoint {checkpoint.checkpoint_id} no longer waits for a document: "
                "one was recorded already, or the wait ended"
            )

    def _mark_referenced(self, document: CheckpointDocument) -> None:
        if document.manifest_id is None:
            return
        try:
            self.parts.blobs.mark_referenced([document.manifest_id])
        except BlobError as error:  # a hint only: garbage collection asks the store
            _log.warning("ditto: could not mark document %s referenced: %s", document, error)

    def _mark_for_collection(self, manifest_id: str) -> None:
        """The document a front end's answer replaced: the next collection checks it."""
        try:
            self.parts.blobs.mark_for_collection([manifest_id])
        except BlobError as error:  # it stays until a collection finds it unreferenced
            _log.warning("ditto: could not mark document %s for collection: %s", manifest_id, error)

    async def save_for(self, record: DocumentToRecord | None) -> CheckpointDocument | None:
        """Store what a checkpoint is to hold (see `save`)."""
        if record is None:
            return None
        return await self.save(
            record.document, record.origin, awaiting_until_ms=record.awaiting_until_ms
        )

    def document(self, checkpoint: RuntimeCheckpoint) -> dict[str, Any]:
        """The nbformat 4 document a checkpoint holds; CheckpointNotFound when none."""
        manifest_id = checkpoint.document_manifest_id
        if manifest_id is None:
            raise CheckpointNotFound(
                f"checkpoint {checkpoint.checkpoint_id} holds no notebook document"
            )
        try:
            return self.store.document(manifest_id)
        except DittoError:
            raise
        except BlobError as error:
            raise CheckpointNotFound(
                f"the notebook document of checkpoint {checkpoint.checkpoint_id} cannot be "
                f"read: {error}"
            ) from None


@dataclass(frozen=True)
class DocumentToRecord:
    """The document a checkpoint is to hold, where it came from, and until when a front
    end's answer may replace it (None: the record is final)."""

    document: NotebookDocument | None
    origin: DocumentOrigin
    awaiting_until_ms: int | None = None

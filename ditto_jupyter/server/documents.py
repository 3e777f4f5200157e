"""The notebook documents of the server's checkpoints: which document a checkpoint holds,
the front end's answer, and the checkout child's notebook written from it.

Which document a checkpoint holds (the mechanism of issue 23, as `notebook-api.md` says):

- the request's own `document` (the side panel and the toolbar send the notebook as the
  user sees it, unsaved edits included): recorded as it is, final;
- otherwise (a magic, `%autocheckpoint`, the CLI, a script): the saved file, read through
  the contents manager, recorded at once, and the checkpoint *awaits* a front end for
  `wait_seconds`: its event says `document: "pending"`, and the JupyterLab that has the
  notebook open answers with the notebook as it sees it (`POST .../checkpoint/document`),
  which replaces the saved file once. When no answer comes, the saved file stays (or no
  document, for a runtime with no notebook file) and a `document` event says so.

Checkout writes the child's notebook from the checkpoint's document through the contents
manager (so the child shows exactly the cells as they were: sources, outputs, execution
counts); a checkpoint with no document falls back to a copy of today's file, and the
answer says so (`notebook_source`, `notebook_note`).
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from typing import TYPE_CHECKING, Any, Literal

from jupyter_server.utils import ensure_async
from nbformat.v4.rwbase import strip_transient
from pydantic import ValidationError
from tornado.web import HTTPError

from ditto_jupyter.control.checkpoint_documents import DocumentToRecord
from ditto_jupyter.control.documents import check_document
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import (
    CheckpointContents,
    CheckpointDocumentResult,
    NotebookDocument,
    RuntimeCheckpoint,
    now_ms,
)

if TYPE_CHECKING:
    from ditto_jupyter.server.sessions import RuntimeSessions

_log = logging.getLogger(__name__)

#: How long a checkpoint waits for a front end's document by default (seconds).
DEFAULT_WAIT_SECONDS = 10.0

NotebookSource = Literal["checkpoint", "current_file"]


def sibling_notebook_path(path: str, suffix: str) -> str:
    """`dir/name.ipynb` -> `dir/name-<suffix>.ipynb` (the checkout's notebook copy)."""
    directory, name = posixpath.split(path.strip("/"))
    stem, dot, ext = name.rpartition(".")
    new_name = f"{stem}-{suffix}.{ext}" if dot and stem else f"{name}-{suffix}"
    return posixpath.join(directory, new_name) if directory else new_name


class SessionDocuments:
    """The document side of the session mapping's checkpoints and checkouts."""

    def __init__(self, sessions: RuntimeSessions, wait_seconds: float = DEFAULT_WAIT_SECONDS):
        self.sessions = sessions
        self.wait_seconds = wait_seconds
        self._waits: set[asyncio.TimerHandle] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # the ended waits' events

    # ---- reading the saved notebook -----------------------------------------------------

    async def saved_document(self, path: str) -> NotebookDocument | None:
        """The notebook file at `path` as the contents manager reads it (None when there
        is none, or it is not an nbformat 4 notebook)."""
        if not path.endswith(".ipynb"):
            return None
        contents: Any = self.sessions.contents_manager
        try:
            if not await ensure_async(contents.file_exists(path)):
                return None
            model = await ensure_async(contents.get(path, content=True, type="notebook"))
        except HTTPError as error:
            _log.warning("ditto: cannot read notebook %s for a checkpoint: %s", path, error)
            return None
        try:
            # the contents manager marks cells trusted or not as it reads them: that is
            # the server's view of the file, not part of the notebook (nbformat strips it)
            content = strip_transient(model["content"])  # type: ignore[no-untyped-call]
            document = NotebookDocument.model_validate(dict(content), strict=False)
        except (ValidationError, KeyError, TypeError, AttributeError) as error:
            _log.warning("ditto: notebook %s is not an nbformat 4 document: %s", path, error)
            return None
        try:
            check_document(document)
        except InvalidRequest as error:
            _log.warning("ditto: notebook %s cannot be held by a checkpoint: %s", path, error)
            return None
        return document

    async def for_checkpoint(
        self, runtime_id: str, document: NotebookDocument | None
    ) -> DocumentToRecord:
        """The document a new checkpoint of `runtime_id` holds (see the module)."""
        if document is not None:
            return DocumentToRecord(document, "request")
        session = await off_loop(self.sessions.service.find_session, runtime_id)
        saved = await self.saved_document(session.conversation_id) if session else None
        until = now_ms() + int(self.wait_seconds * 1000) if self.wait_seconds > 0 else None
        return DocumentToRecord(saved, "saved_file" if saved else "none", until)

    def awaiting(self, runtime_id: str, checkpoint_id: str) -> None:
        """A checkpoint awaits a front end's document: when the wait ends unanswered, a
        `document` event says what it holds."""
        loop = asyncio.get_running_loop()

        def ended() -> None:
            self._waits.discard(handle)
            task = loop.create_task(self._wait_ended(runtime_id, checkpoint_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        handle = loop.call_later(self.wait_seconds + 0.05, ended)
        self._waits.add(handle)

    async def _wait_ended(self, runtime_id: str, checkpoint_id: str) -> None:
        try:
            checkpoint = await off_loop(self.sessions.service.store.get_checkpoint, checkpoint_id)
        except Exception as error:  # the store is unreachable: the event is skipped, said so
            _log.warning("ditto: no document event for checkpoint %s: %s", checkpoint_id, error)
            return
        document = checkpoint.document if checkpoint is not None else None
        if document is None or document.origin == "front_end":
            return  # answered (that answer had its event), or gone
        with self.sessions.events.operation("document", runtime_id) as event:
            event.checkpoint_id = checkpoint_id
            event.document = document.origin

    def close(self) -> None:
        """Cancel the waits still running (the server stops)."""
        for handle in self._waits:
            handle.cancel()
        self._waits.clear()
        for task in self._tasks:
            task.cancel()

    # ---- answers and reads --------------------------------------------------------------

    async def record(
        self, runtime_id: str, checkpoint_id: str, document: NotebookDocument, user: str
    ) -> CheckpointDocumentResult:
        """A front end's answer to a pending checkpoint: its document, recorded once."""
        sessions = self.sessions
        with sessions.events.operation("document", runtime_id) as event:
            await sessions.ensure_runtime(runtime_id, user)
            event.checkpoint_id = checkpoint_id
            result = await sessions.service.record_document(runtime_id, checkpoint_id, document)
            event.document = result.document.source
        return result

    async def document(self, runtime_id: str, reference: str, user: str) -> NotebookDocument:
        """The notebook document a checkpoint (id, prefix or name) holds."""
        checkpoint = await self.sessions.find_checkpoint(reference, runtime_id, user)
        await self.sessions.service.make_local(checkpoint)  # taken on another server, maybe
        found = await off_loop(self.sessions.service.checkpoint_document, checkpoint.checkpoint_id)
        return NotebookDocument.model_validate(found, strict=False)

    async def contents(self, runtime_id: str, reference: str, user: str) -> CheckpointContents:
        """What a checkpoint (id, prefix or name) holds."""
        checkpoint = await self.sessions.find_checkpoint(reference, runtime_id, user)
        await self.sessions.service.make_local(checkpoint)  # taken on another server, maybe
        return await off_loop(self.sessions.service.checkpoint_contents, checkpoint.checkpoint_id)

    # ---- the checkout child's notebook --------------------------------------------------

    async def _is_file(self, path: str) -> bool:
        try:
            return bool(await ensure_async(self.sessions.contents_manager.file_exists(path)))
        except HTTPError:
            return False

    async def _is_folder(self, path: str) -> bool:
        try:
            return bool(await ensure_async(self.sessions.contents_manager.dir_exists(path)))
        except HTTPError:
            return False

    async def child_target(self, source: str, suggested: str) -> tuple[str, str | None]:
        """Where a checkout child's notebook goes when the caller named no path: beside
        `source` (`suggested`), or at the root when `source`'s folder no longer exists (a
        note for the answer says so)."""
        folder = posixpath.dirname(suggested.strip("/"))
        if not folder or await self._is_folder(folder):
            return suggested, None
        target = posixpath.basename(suggested)
        return target, (
            f"the folder {folder} of {source} no longer exists, so the child's notebook is "
            f"written at the root: {target}"
        )

    async def write_child_notebook(
        self, checkpoint: RuntimeCheckpoint, target: str
    ) -> tuple[bool, NotebookSource | None, str | None]:
        """Write a checkout child's notebook at `target` (when it is a notebook path that
        does not exist yet): from the checkpoint's document, else a copy of today's file,
        else none (today's file is missing or unreadable: the note says so).

        Returns (written, how, a note for the answer); InvalidRequest when writing fails.
        """
        source = checkpoint.session.conversation_id
        if not target.endswith(".ipynb") or await self._is_file(target):
            return False, None, None
        contents: Any = self.sessions.contents_manager
        if checkpoint.document_manifest_id is not None:
            document = await off_loop(
                self.sessions.service.checkpoint_document, checkpoint.checkpoint_id
            )
            model = {"type": "notebook", "format": "json", "content": document}
            try:
                await ensure_async(contents.save(model, target))
            except HTTPError as error:
                raise InvalidRequest(
                    f"cannot write the notebook {target!r}: {error.log_message}"
                ) from error
            return True, "checkpoint", None
        held = f"checkpoint {checkpoint.checkpoint_id[:12]} holds no notebook document"
        if not source.endswith(".ipynb"):
            return False, None, None
        if not await self._is_file(source):
            note = f"{held} and {source} does not exist, so the child has no notebook file"
            return False, None, note
        try:
            await ensure_async(contents.copy(source, target))
        except HTTPError as error:
            _log.warning("ditto: cannot copy notebook %s for a checkout: %s", source, error)
            note = (
                f"{held} and today's {source} cannot be read ({error.log_message}), so the "
                "child is checked out without a notebook file"
            )
            return False, None, note
        note = f"{held}, so the child's notebook is a copy of {source} as it is now, not as it was"
        return True, "current_file", note

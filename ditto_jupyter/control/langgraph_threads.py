"""LangGraph's checkpoints in the store: the threads of each runtime (issue 44 section 4).

`LangGraphThreads` is what the saver in a kernel (`ditto_jupyter.langgraph`) reaches: in
process without a server, through the `self/langgraph/...` routes under one. Every call
names the runtime whose threads it reads or writes; a thread is (runtime, thread id). The
runtime's owner owns its threads: the routes prove the caller is the runtime's kernel (its
runtime token) or its owner, so another user's threads answer as unknown ones.

How the runtime's life reaches its threads:

- pause and resume keep the runtime id, and so its threads: the resumed kernel's saver
  goes on where the paused one stopped;
- a checkout's child gets a copy of every thread of its source as it stood when the
  checkpoint was taken: the LangGraph checkpoints and writes stored at or before the
  checkpoint's time, and the values they name (`copy_on_checkout`, in the transaction
  that records the child). What the source stores later is not the child's, nor the
  other way round;
- close keeps them, readable by the owner, as the runtime's checkpoints are kept.

Values are opaque here: each is kept inline, or in the blob store when the kernel wrote it
there (a `langgraph-value` manifest written for the same runtime, checked on put).
Garbage collection keeps every manifest a stored value names (`referenced`). With an
object store, such a manifest and its chunks are queued for upload once the row naming it
is committed, as a checkpoint's blobs are (`Replication.upload_soon`).

A closed runtime's threads are kept, read-only: every write to them is refused
(RuntimeClosed, 409 on the routes), in the store's write transaction.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ditto_jupyter.control.store.interface import CheckpointStore
from ditto_jupyter.control.store.langgraph_rows import (
    LangGraphRows,
    langgraph_rows_of,
    metadata_matches,
)
from ditto_jupyter.core.blobs import BlobError, BlobStore
from ditto_jupyter.core.errors import InvalidRequest, RuntimeNotFound, UnsupportedBackend
from ditto_jupyter.core.models.fields import now_ms
from ditto_jupyter.core.models.langgraph import (
    LANGGRAPH_VALUE_KIND,
    LangGraphChanged,
    LangGraphCheckpoint,
    LangGraphCursor,
    LangGraphListResult,
    LangGraphThreadList,
    LangGraphTuple,
    LangGraphValue,
    LangGraphWrite,
)

if TYPE_CHECKING:
    from ditto_jupyter.control.replication import Replication

_log = logging.getLogger(__name__)

#: Rows a filtered listing reads from the store at a time while it fills a page.
_SCAN = 200


class LangGraphThreads:
    """The LangGraph threads of the runtimes of one store (see the module)."""

    def __init__(
        self, store: CheckpointStore, blobs: BlobStore, replication: Replication | None = None
    ) -> None:
        self._store = store
        self._rows = langgraph_rows_of(store)
        self._blobs = blobs
        self._replication = replication

    @property
    def rows(self) -> LangGraphRows:
        """The store's LangGraph rows; UnsupportedBackend when this store keeps none."""
        if self._rows is None:
            raise UnsupportedBackend(
                f"this deployment's store ({type(self._store).__name__}) keeps no LangGraph "
                "threads: use the SQLite or PostgreSQL store"
            )
        return self._rows

    def _refusal(self, runtime_id: str, error: ValueError) -> Exception:
        """What a store's ValueError means to the caller: an unknown runtime, or a request
        that cannot be done."""
        if self._store.get_session(runtime_id) is None:
            return RuntimeNotFound(f"no runtime with id {runtime_id!r}")
        return InvalidRequest(str(error))

    def _check_values(self, runtime_id: str, values: Iterable[LangGraphValue]) -> list[str]:
        """InvalidRequest unless each value kept in the blob store is a `langgraph-value`
        manifest written for this runtime (and stored); those manifests."""
        manifests: list[str] = []
        for value in values:
            if value.manifest_id is None:
                continue
            manifests.append(value.manifest_id)
            try:
                body = self._blobs.get_manifest(value.manifest_id)
            except BlobError as error:
                raise InvalidRequest(
                    f"value manifest {value.manifest_id} cannot be read from the blob store: "
                    f"{error}"
                ) from None
            if body.get("kind") != LANGGRAPH_VALUE_KIND or body.get("runtime_id") != runtime_id:
                raise InvalidRequest(
                    f"manifest {value.manifest_id} is not a LangGraph value of runtime "
                    f"{runtime_id!r}"
                )
        return manifests

    def _replicate(self, runtime_id: str, manifests: list[str]) -> None:
        """Queue the values a committed row names for the object store (when there is one):
        they are uploaded behind the write, as a checkpoint's blobs are."""
        if manifests and self._replication is not None:
            # one queue entry per set of manifests (an entry of the same key is ignored)
            named = hashlib.sha256(",".join(sorted(set(manifests))).encode()).hexdigest()
            self._replication.upload_soon(f"langgraph-{runtime_id}-{named}", manifests)

    # ---- what a saver does ----------------------------------------------------------------

    def put(self, runtime_id: str, checkpoint: LangGraphCheckpoint) -> LangGraphChanged:
        """Store a checkpoint and the values new in it (`BaseCheckpointSaver.put`)."""
        manifests = self._check_values(
            runtime_id, [checkpoint.checkpoint, *(item.value for item in checkpoint.values)]
        )
        try:
            had_writes = self.rows.put_langgraph_checkpoint(runtime_id, checkpoint, now_ms=now_ms())
        except ValueError as error:
            raise self._refusal(runtime_id, error) from None
        self._replicate(runtime_id, manifests)
        return LangGraphChanged(rows=1 + len(checkpoint.values), had_writes=had_writes)

    def put_writes(
        self,
        runtime_id: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[LangGraphWrite],
        *,
        replace: bool,
    ) -> LangGraphChanged:
        """Store a task's pending writes (`BaseCheckpointSaver.put_writes`)."""
        manifests = self._check_values(runtime_id, (write.value for write in writes))
        try:
            rows = self.rows.put_langgraph_writes(
                runtime_id,
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                writes,
                replace=replace,
                now_ms=now_ms(),
            )
        except ValueError as error:
            raise self._refusal(runtime_id, error) from None
        self._replicate(runtime_id, manifests)
        return LangGraphChanged(rows=rows)

    def get(
        self, runtime_id: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> LangGraphTuple | None:
        """One checkpoint, or the namespace's newest (`get_tuple`); None when unknown."""
        return self.rows.get_langgraph_tuple(runtime_id, thread_id, checkpoint_ns, checkpoint_id)

    def list(
        self,
        runtime_id: str,
        *,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        filter: dict[str, object] | None = None,
        before: str | None = None,
        after: LangGraphCursor | None = None,
        limit: int,
    ) -> LangGraphListResult:
        """One page of the runtime's checkpoints, newest first, whose metadata matches
        `filter` (`BaseCheckpointSaver.list`); `next` says where the next page starts."""
        found: list[LangGraphTuple] = []
        cursor = after
        while len(found) < limit:
            scan = limit - len(found) if not filter else _SCAN
            page = self.rows.page_langgraph_tuples(
                runtime_id,
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint_id,
                before=before,
                after=cursor,
                limit=scan,
            )
            for item in page:
                cursor = _cursor_of(item)
                if metadata_matches(item.metadata, filter):
                    found.append(item)
                    if len(found) == limit:
                        return LangGraphListResult(tuples=found, next=cursor)
            if len(page) < scan:
                return LangGraphListResult(tuples=found, next=None)
        return LangGraphListResult(tuples=found, next=cursor)

    def _freeing(self, runtime_id: str, thread_ids: Sequence[str] | None) -> set[str]:
        """The manifests these threads' values name now: after a deletion, garbage
        collection checks them again (those still named stay)."""
        return self.rows.langgraph_thread_manifests(runtime_id, thread_ids)

    def _let_go(self, manifests: set[str]) -> None:
        if manifests:
            self._blobs.mark_for_collection(manifests)

    def delete_thread(self, runtime_id: str, thread_id: str) -> LangGraphChanged:
        """Delete a thread of the runtime (`delete_thread`; an unknown one: nothing)."""
        manifests = self._freeing(runtime_id, [thread_id])
        deleted = self.rows.delete_langgraph_thread(runtime_id, thread_id)
        self._let_go(manifests)
        return LangGraphChanged(rows=deleted)

    def copy_thread(
        self, runtime_id: str, source_thread_id: str, target_thread_id: str
    ) -> LangGraphChanged:
        """Copy a thread into a new thread of the same runtime (`copy_thread`)."""
        if source_thread_id == target_thread_id:
            raise InvalidRequest("a thread cannot be copied into itself")
        try:
            copied = self.rows.copy_langgraph_thread(
                runtime_id, source_thread_id, runtime_id, target_thread_id, now_ms=now_ms()
            )
        except ValueError as error:
            raise self._refusal(runtime_id, error) from None
        return LangGraphChanged(rows=copied)

    def prune(self, runtime_id: str, thread_ids: Sequence[str], strategy: str) -> LangGraphChanged:
        """Keep each namespace's newest checkpoint, or delete them all (`prune`)."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidRequest(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        if strategy == "keep_latest":
            self._refuse_delta_channels(runtime_id, thread_ids)
        manifests = self._freeing(runtime_id, thread_ids)
        deleted = self.rows.prune_langgraph_threads(
            runtime_id, thread_ids, keep_latest=strategy == "keep_latest"
        )
        self._let_go(manifests)
        return LangGraphChanged(rows=deleted)

    def _refuse_delta_channels(self, runtime_id: str, thread_ids: Sequence[str]) -> None:
        """InvalidRequest when a thread's newest checkpoint counts `DeltaChannel` updates: a
        delta channel's value is rebuilt from older checkpoints, which keep_latest drops."""
        for thread_id in thread_ids:
            newest = self.rows.page_langgraph_tuples(
                runtime_id,
                thread_id=thread_id,
                checkpoint_ns=None,
                checkpoint_id=None,
                before=None,
                after=None,
                limit=1,
            )
            if newest and newest[0].metadata.get("counters_since_delta_snapshot"):
                raise InvalidRequest(
                    f"thread {thread_id!r} uses a DeltaChannel, whose value keep_latest would "
                    "lose: nothing was pruned"
                )

    def delete_for_runs(self, runtime_id: str, run_ids: Sequence[str]) -> LangGraphChanged:
        """Delete the runtime's checkpoints made by these runs (`delete_for_runs`)."""
        manifests = self._freeing(runtime_id, None) if run_ids else set()
        deleted = self.rows.delete_langgraph_runs(runtime_id, run_ids)
        self._let_go(manifests)
        return LangGraphChanged(rows=deleted)

    # ---- what the control plane and the runtime's owner see -------------------------------

    def threads(self, runtime_id: str) -> LangGraphThreadList:
        """The runtime's threads, for its owner (the REST listing)."""
        if self._rows is None:
            return LangGraphThreadList(runtime_id=runtime_id, threads=[])
        return LangGraphThreadList(
            runtime_id=runtime_id, threads=self._rows.langgraph_threads(runtime_id)
        )

    def referenced(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these manifests a stored LangGraph value names (garbage collection)."""
        if self._rows is None or not manifest_ids:
            return set()
        return self._rows.langgraph_manifests(manifest_ids)


def copy_on_checkout(
    store: CheckpointStore, source_runtime_id: str, child_runtime_id: str, stored_by_ms: int
) -> int:
    """Give a checkout's child a copy of each LangGraph thread of its source, as it stood
    at `stored_by_ms` (the checkpoint's time), under the same thread ids; how many
    checkpoints. Called inside the transaction that records the child."""
    rows = langgraph_rows_of(store)
    if rows is None:
        return 0
    copied = 0
    for thread in rows.langgraph_threads(source_runtime_id):
        copied += rows.copy_langgraph_thread(
            source_runtime_id,
            thread.thread_id,
            child_runtime_id,
            thread.thread_id,
            stored_by_ms=stored_by_ms,
            now_ms=now_ms(),
        )
    if copied:
        _log.info(
            "ditto: checkout %s got %d LangGraph checkpoints of %s",
            child_runtime_id,
            copied,
            source_runtime_id,
        )
    return copied


def _cursor_of(item: LangGraphTuple) -> LangGraphCursor:
    return LangGraphCursor(
        checkpoint_id=item.checkpoint_id,
        thread_id=item.thread_id,
        checkpoint_ns=item.checkpoint_ns,
    )

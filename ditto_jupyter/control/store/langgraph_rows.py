"""The store's role for LangGraph's checkpoints: `LangGraphRows` (issue 44 section 4).

A role of its own, beside the eight of `interface`, and not part of `CheckpointStore`: a
store of another make need not keep LangGraph threads (the saver then says the store
has none). The SQL store plays it (`sql_langgraph`); its spec is
`ditto_jupyter.testing.contracts.LangGraphRowsContract`.

Every call names the runtime whose threads it reads or writes: a thread is (runtime,
thread id), so another runtime's thread of the same id is another thread, and a runtime's
owner is the owner of its threads. Values are opaque: the store keeps their type and
bytes, or the blob-store manifest that holds them, and never reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from ditto_jupyter.core.models.langgraph import (
    LangGraphCheckpoint,
    LangGraphCursor,
    LangGraphThreadSummary,
    LangGraphTuple,
    LangGraphWrite,
)


@runtime_checkable
class LangGraphRows(Protocol):
    """The LangGraph threads of each runtime: checkpoints, channel values, pending writes."""

    def put_langgraph_checkpoint(
        self, runtime_id: str, checkpoint: LangGraphCheckpoint, *, now_ms: int
    ) -> bool:
        """Store (or replace) a checkpoint and the channel values new in it, in one
        transaction; the thread is made on first use. A value already stored at that
        (namespace, channel, version) is kept (a version names one value). Whether pending
        writes of that checkpoint were stored already.

        Every write of this role refuses a closed runtime's threads (RuntimeClosed, nothing
        changed): they are kept, read-only, as its checkpoints are."""
        ...

    def put_langgraph_writes(
        self,
        runtime_id: str,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: Sequence[LangGraphWrite],
        *,
        replace: bool,
        now_ms: int,
    ) -> int:
        """Store pending writes of a checkpoint; one already stored at the same (task id,
        idx) is replaced when `replace`, else kept. How many rows were written."""
        ...

    def get_langgraph_tuple(
        self, runtime_id: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None
    ) -> LangGraphTuple | None:
        """The checkpoint (the namespace's newest when `checkpoint_id` is None) with its
        values and writes, or None."""
        ...

    def page_langgraph_tuples(
        self,
        runtime_id: str,
        *,
        thread_id: str | None,
        checkpoint_ns: str | None,
        checkpoint_id: str | None,
        before: str | None,
        after: LangGraphCursor | None,
        limit: int,
    ) -> list[LangGraphTuple]:
        """The runtime's checkpoints, newest first (checkpoint id, then thread id, then
        namespace, each descending), narrowed by each argument given, from just after
        `after`, at most `limit`."""
        ...

    def delete_langgraph_thread(self, runtime_id: str, thread_id: str) -> int:
        """Delete a thread and everything in it; how many rows (0: unknown thread)."""
        ...

    def copy_langgraph_thread(
        self,
        source_runtime_id: str,
        source_thread_id: str,
        target_runtime_id: str,
        target_thread_id: str,
        *,
        stored_by_ms: int | None = None,
        now_ms: int,
    ) -> int:
        """Copy a thread's checkpoints (those stored at or before `stored_by_ms`, when
        given), their writes and the values they name into the target thread; how many
        checkpoints. ValueError when the target thread has checkpoints already."""
        ...

    def prune_langgraph_threads(
        self, runtime_id: str, thread_ids: Sequence[str], *, keep_latest: bool
    ) -> int:
        """Keep only each namespace's newest checkpoint of each thread (`keep_latest`), or
        none; values no kept checkpoint names go too. How many checkpoints went."""
        ...

    def delete_langgraph_runs(self, runtime_id: str, run_ids: Sequence[str]) -> int:
        """Delete the runtime's checkpoints whose run id is one of `run_ids`, with their
        writes and the values no other checkpoint names; how many checkpoints."""
        ...

    def langgraph_threads(self, runtime_id: str) -> list[LangGraphThreadSummary]:
        """The runtime's threads, by thread id."""
        ...

    def langgraph_runtimes_with_threads(self, runtime_ids: Sequence[str]) -> set[str]:
        """Which of these runtimes have at least one thread."""
        ...

    def langgraph_thread_manifests(
        self, runtime_id: str, thread_ids: Sequence[str] | None
    ) -> set[str]:
        """The blob-store manifests the values of these threads of the runtime name (None:
        of all its threads): a deletion hands them to garbage collection to check again."""
        ...

    def langgraph_manifests(self, manifest_ids: Sequence[str]) -> set[str]:
        """Which of these blob-store manifests a stored value names (garbage collection
        keeps them)."""
        ...


def langgraph_rows_of(store: object) -> LangGraphRows | None:
    """The store as `LangGraphRows`, or None when it does not keep LangGraph threads."""
    return store if isinstance(store, LangGraphRows) else None


def langgraph_manifests_named(store: object, manifest_ids: Sequence[str]) -> set[str]:
    """Which of these manifests a LangGraph value of the store names (none when the store
    keeps no LangGraph threads): garbage collection keeps them."""
    rows = langgraph_rows_of(store)
    return rows.langgraph_manifests(manifest_ids) if rows is not None and manifest_ids else set()


def named_values(versions: dict[str, str]) -> set[tuple[str, str]]:
    """The (channel, version) pairs a checkpoint's versions name."""
    return set(versions.items())


def metadata_matches(metadata: dict[str, object], wanted: dict[str, object] | None) -> bool:
    """Whether `metadata` holds every key of `wanted` with an equal value (a listing's
    filter, as LangGraph's savers read it: top-level keys, JSON equality)."""
    if not wanted:
        return True
    return all(key in metadata and metadata[key] == value for key, value in wanted.items())


def unique(values: Iterable[str]) -> list[str]:
    """The values in their first order, each once."""
    return list(dict.fromkeys(values))

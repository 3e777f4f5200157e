"""`DittoSaver`: LangGraph's `BaseCheckpointSaver` over ditto-jupyter's store.

A graph compiled with `checkpointer=DittoSaver()` in a notebook keeps its checkpoints in
the runtime's LangGraph threads: the same database as the runtime's own checkpoints
(SQLite, or PostgreSQL in a deployment), large values in the same blob store, readable by
the runtime's owner only, copied into a checkout's child. See docs/langgraph.md.

As LangGraph's Postgres saver does, a checkpoint is stored without its channel values, and
each channel's value once per version (versions carry a random suffix, so a fork from an
older checkpoint never reuses a version for another value). Values are serialized here, in
the kernel, with the saver's serializer (`serde`); the control plane keeps their bytes.
The async methods run the sync ones on a worker thread.

`get_tuple` of a thread's newest checkpoint is answered from the kernel's cache once the
store has been read for it (`cache`: the kernel is the only writer of its runtime's
threads); `put` returns only once the store has committed (LangGraph's
`durability="sync"` relies on it), then tells the cache.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ditto_jupyter.core.models.langgraph import (
    MAX_LANGGRAPH_PAGE,
    LangGraphChannelValue,
    LangGraphCheckpoint,
    LangGraphCursor,
    LangGraphTuple,
    LangGraphWrite,
)
from ditto_jupyter.langgraph.cache import (
    UNKNOWN,
    CachedCheckpoint,
    CachedWrite,
    cache_of,
)
from ditto_jupyter.langgraph.values import EMPTY, ValueCodec

_T = TypeVar("_T")


class DittoSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in this runtime's threads (see the module).

    `DittoSaver()` serves the runtime of the kernel it runs in: under a Jupyter server its
    REST API, without one the in-process control plane the magics use. `control` names
    another runtime control (a `ServerControl` or `LocalControl`), as tests do.
    """

    def __init__(self, *, control: object | None = None, serde: SerializerProtocol | None = None):
        super().__init__(serde=serde)
        from ditto_jupyter.langgraph.connect import connect

        self._threads, blobs = connect(control)
        self._values = ValueCodec(self.serde, blobs, self._threads.runtime_id)
        self._cache = cache_of(self._threads.runtime_id, self._threads.place)

    def _writing(self, thread_ids: list[str] | None, write: Callable[[], _T]) -> _T:
        """Run a write; when it fails (the store may or may not have it), the cache
        forgets the threads it names (None: all)."""
        try:
            return write()
        except BaseException:
            self._cache.forget(thread_ids)
            raise

    @property
    def runtime_id(self) -> str:
        """The runtime whose threads this saver reads and writes."""
        return self._threads.runtime_id

    # ---- versions ---------------------------------------------------------------------

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next version of a channel: a counter then a random suffix (as LangGraph's
        Postgres saver does), so a fork never gives an existing version another value."""
        if current is None:
            number = 0
        elif isinstance(current, (int, float)):
            number = int(current)
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # ---- writing ----------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and the channel values new in it."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = str(configurable.get("checkpoint_ns", ""))
        body: dict[str, Any] = dict(checkpoint)
        channel_values: dict[str, Any] = body.pop("channel_values", {})
        new = list(new_versions.items())
        serialized = [self.serde.dumps_typed(body)] + [
            self.serde.dumps_typed(channel_values[channel])
            if channel in channel_values
            else (EMPTY, b"")
            for channel, _ in new
        ]
        placed = self._values.place_all(serialized)
        versions = {
            channel: str(version) for channel, version in checkpoint["channel_versions"].items()
        }
        stored_metadata = dict(get_serializable_checkpoint_metadata(config, metadata))
        stored = LangGraphCheckpoint(
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=configurable.get("checkpoint_id"),
            checkpoint=placed[0],
            versions=versions,
            metadata=stored_metadata,
            values=[
                LangGraphChannelValue(channel=channel, version=str(version), value=value)
                for (channel, version), value in zip(new, placed[1:], strict=True)
            ],
        )
        had_writes = self._writing([thread_id], lambda: self._threads.put(stored))
        self._cache.put(
            thread_id,
            checkpoint_ns,
            CachedCheckpoint(
                checkpoint_id=checkpoint["id"],
                parent_checkpoint_id=configurable.get("checkpoint_id"),
                body=serialized[0],
                values={},
                versions=versions,
                metadata=orjson.dumps(stored_metadata),
                writes=(),
            ),
            {
                channel: (str(version), value)
                for (channel, version), value in zip(new, serialized[1:], strict=True)
            },
            had_writes=had_writes,
        )
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes, linked to the config's checkpoint."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = str(configurable.get("checkpoint_ns", ""))
        checkpoint_id = str(configurable["checkpoint_id"])
        serialized = [self.serde.dumps_typed(value) for _, value in writes]
        values = self._values.place_all(serialized)
        # Special writes (errors, interrupts) replace what a task wrote before.
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        indexed = [
            (WRITES_IDX_MAP.get(channel, idx), channel) for idx, (channel, _) in enumerate(writes)
        ]
        self._writing(
            [thread_id],
            lambda: self._threads.put_writes(
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                [
                    LangGraphWrite(
                        task_id=task_id, task_path=task_path, idx=idx, channel=channel, value=value
                    )
                    for (idx, channel), value in zip(indexed, values, strict=True)
                ],
                replace=replace,
            ),
        )
        cached: list[CachedWrite] = [
            (task_id, task_path, idx, channel, value)
            for (idx, channel), value in zip(indexed, serialized, strict=True)
        ]
        self._cache.put_writes(
            thread_id, checkpoint_ns, checkpoint_id, cached, replace_existing=replace
        )

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread of this runtime."""
        try:
            self._threads.delete_thread(str(thread_id))
        finally:
            self._cache.forget([str(thread_id)])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints and writes into a new thread of this runtime."""
        try:
            self._threads.copy_thread(str(source_thread_id), str(target_thread_id))
        finally:
            self._cache.forget([str(target_thread_id)])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: each namespace's newest checkpoint stays; `delete`: none does."""
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread ids, not a str")
        threads = [str(thread) for thread in thread_ids]
        try:
            self._threads.prune(threads, strategy)
        finally:
            self._cache.forget(threads)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete this runtime's checkpoints made by these runs, with their writes."""
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run ids, not a str")
        if run_ids:
            try:
                self._threads.delete_for_runs([str(run) for run in run_ids])
            finally:
                self._cache.forget(None)

    # ---- reading ----------------------------------------------------------------------

    def _tuple(self, found: LangGraphTuple) -> CheckpointTuple:
        decode = self._values.decode
        return _checkpoint_tuple(
            found.thread_id,
            found.checkpoint_ns,
            found.checkpoint_id,
            found.parent_checkpoint_id,
            decode(found.checkpoint),
            {item.channel: decode(item.value) for item in found.values if item.value.type != EMPTY},
            found.metadata,
            [(write.task_id, write.channel, decode(write.value)) for write in found.writes],
        )

    def _cached_tuple(
        self, thread_id: str, checkpoint_ns: str, cached: CachedCheckpoint
    ) -> CheckpointTuple:
        loads = self.serde.loads_typed
        return _checkpoint_tuple(
            thread_id,
            checkpoint_ns,
            cached.checkpoint_id,
            cached.parent_checkpoint_id,
            loads(cached.body),
            {
                channel: loads(value)
                for channel, (_, value) in cached.values.items()
                if value[0] != EMPTY
            },
            orjson.loads(cached.metadata),
            [(task, channel, loads(value)) for task, _, _, channel, value in cached.writes],
        )

    def _to_cache(self, found: LangGraphTuple) -> CachedCheckpoint:
        """A stored checkpoint as the cache keeps it (its values' bytes at hand)."""
        serialized = self._values.serialized
        return CachedCheckpoint(
            checkpoint_id=found.checkpoint_id,
            parent_checkpoint_id=found.parent_checkpoint_id,
            body=serialized(found.checkpoint),
            values={item.channel: (item.version, serialized(item.value)) for item in found.values},
            versions={item.channel: item.version for item in found.values},
            metadata=orjson.dumps(found.metadata),
            writes=tuple(
                (w.task_id, w.task_path, w.idx, w.channel, serialized(w.value))
                for w in found.writes
            ),
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The config's checkpoint, or its namespace's newest; None when there is none.
        The newest is answered from the kernel's cache once known there (see `cache`)."""
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        checkpoint_ns = str(configurable.get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)
        cached = self._cache.lookup(thread_id, checkpoint_ns)
        if cached is None:  # known to have no checkpoint
            return None
        if cached is not UNKNOWN and checkpoint_id in (None, cached.checkpoint_id):
            return self._cached_tuple(thread_id, checkpoint_ns, cached)
        generation = self._cache.generation()
        found = self._threads.get(thread_id, checkpoint_ns, checkpoint_id)
        if checkpoint_id is None:
            newest = self._to_cache(found) if found is not None else None
            self._cache.fill(thread_id, checkpoint_ns, newest, generation)
        return self._tuple(found) if found is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """This runtime's checkpoints, newest first: of the config's thread (and namespace,
        and checkpoint id, when it names them), whose metadata matches `filter`, older than
        `before`, at most `limit`."""
        configurable = config["configurable"] if config else {}
        thread_id = configurable.get("thread_id")
        checkpoint_ns = configurable.get("checkpoint_ns")
        before_id = get_checkpoint_id(before) if before else None
        left = limit
        after: LangGraphCursor | None = None
        while left is None or left > 0:
            page = self._threads.list(
                thread_id=str(thread_id) if thread_id is not None else None,
                checkpoint_ns=str(checkpoint_ns) if checkpoint_ns is not None else None,
                checkpoint_id=configurable.get("checkpoint_id"),
                filter=filter,
                before=before_id,
                after=after,
                limit=min(left, MAX_LANGGRAPH_PAGE) if left is not None else MAX_LANGGRAPH_PAGE,
            )
            for found in page.tuples:
                yield self._tuple(found)
            if left is not None:
                left -= len(page.tuples)
            if page.next is None:
                return
            after = page.next

    # ---- async: the same calls on a worker thread --------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)


def _checkpoint_tuple(
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str | None,
    checkpoint: Any,
    channel_values: dict[str, Any],
    metadata: dict[str, Any],
    pending_writes: list[tuple[str, str, Any]],
) -> CheckpointTuple:
    """LangGraph's tuple of a stored checkpoint, read from the store or the cache."""
    checkpoint["channel_values"] = channel_values
    where = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    return CheckpointTuple(
        config={"configurable": {**where, "checkpoint_id": checkpoint_id}},
        checkpoint=checkpoint,
        metadata=CheckpointMetadata(**metadata),  # type: ignore[typeddict-item]
        parent_config=(
            {"configurable": {**where, "checkpoint_id": parent_checkpoint_id}}
            if parent_checkpoint_id
            else None
        ),
        pending_writes=pending_writes,
    )

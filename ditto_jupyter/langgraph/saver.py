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
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

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
from ditto_jupyter.langgraph.values import EMPTY, ValueCodec


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
        self._threads.put(
            LangGraphCheckpoint(
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                checkpoint_id=checkpoint["id"],
                parent_checkpoint_id=configurable.get("checkpoint_id"),
                checkpoint=placed[0],
                versions={
                    channel: str(version)
                    for channel, version in checkpoint["channel_versions"].items()
                },
                metadata=dict(get_serializable_checkpoint_metadata(config, metadata)),
                values=[
                    LangGraphChannelValue(channel=channel, version=str(version), value=value)
                    for (channel, version), value in zip(new, placed[1:], strict=True)
                ],
            )
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
        values = self._values.encode_all([value for _, value in writes])
        self._threads.put_writes(
            str(configurable["thread_id"]),
            str(configurable.get("checkpoint_ns", "")),
            str(configurable["checkpoint_id"]),
            [
                LangGraphWrite(
                    task_id=task_id,
                    task_path=task_path,
                    idx=WRITES_IDX_MAP.get(channel, idx),
                    channel=channel,
                    value=value,
                )
                for idx, ((channel, _), value) in enumerate(zip(writes, values, strict=True))
            ],
            # Special writes (errors, interrupts) replace what a task wrote before.
            replace=all(channel in WRITES_IDX_MAP for channel, _ in writes),
        )

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread of this runtime."""
        self._threads.delete_thread(str(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints and writes into a new thread of this runtime."""
        self._threads.copy_thread(str(source_thread_id), str(target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: each namespace's newest checkpoint stays; `delete`: none does."""
        if isinstance(thread_ids, str):
            raise TypeError("thread_ids must be a sequence of thread ids, not a str")
        self._threads.prune([str(thread) for thread in thread_ids], strategy)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete this runtime's checkpoints made by these runs, with their writes."""
        if isinstance(run_ids, str):
            raise TypeError("run_ids must be a sequence of run ids, not a str")
        if run_ids:
            self._threads.delete_for_runs([str(run) for run in run_ids])

    # ---- reading ----------------------------------------------------------------------

    def _tuple(self, found: LangGraphTuple) -> CheckpointTuple:
        checkpoint = self._values.decode(found.checkpoint)
        checkpoint["channel_values"] = {
            item.channel: self._values.decode(item.value)
            for item in found.values
            if item.value.type != EMPTY
        }
        where = {"thread_id": found.thread_id, "checkpoint_ns": found.checkpoint_ns}
        return CheckpointTuple(
            config={"configurable": {**where, "checkpoint_id": found.checkpoint_id}},
            checkpoint=checkpoint,
            metadata=CheckpointMetadata(**found.metadata),  # type: ignore[typeddict-item]
            parent_config=(
                {"configurable": {**where, "checkpoint_id": found.parent_checkpoint_id}}
                if found.parent_checkpoint_id
                else None
            ),
            pending_writes=[
                (write.task_id, write.channel, self._values.decode(write.value))
                for write in found.writes
            ],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The config's checkpoint, or its namespace's newest; None when there is none."""
        configurable = config["configurable"]
        found = self._threads.get(
            str(configurable["thread_id"]),
            str(configurable.get("checkpoint_ns", "")),
            get_checkpoint_id(config),
        )
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

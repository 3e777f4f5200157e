"""LangGraph's checkpoints as the store keeps them and the `self/langgraph/...` routes carry
them (issue 44 section 4).

The saver in the kernel (`ditto_jupyter.langgraph`) serializes every value with LangGraph's
own serializer; the control plane never reads a value, it keeps its serializer type and
bytes (`LangGraphValue`), inline or in the blob store (a manifest the kernel wrote). A
checkpoint is kept without its channel values (each channel's value is kept once per
version, `LangGraphChannelValue`), with the versions it names, its metadata (JSON, which
`list`'s filters read) and its pending writes (`LangGraphWrite`).

Bytes are raw in Python and base64 in JSON. Every request names its runtime and carries
the kernel's runtime token, as every `self/...` request does.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from ditto_jupyter.core.models.fields import (
    RequestId,
    RequestMetadata,
    RequestText,
    StrictModel,
)

#: Bytes of a value kept inline in its row; a larger one goes to the blob store.
MAX_INLINE_VALUE_BYTES = 64 * 1024
#: Channels one checkpoint may name, and writes one `put_writes` may carry.
MAX_LANGGRAPH_ITEMS = 4096
#: Characters of a channel name, a version, a task id or path, a namespace, a serde type.
MAX_LANGGRAPH_NAME_LENGTH = 1024
#: Checkpoints a listing answers at most per request (the saver asks page after page).
MAX_LANGGRAPH_PAGE = 200
#: Threads or runs one prune or delete names at most.
MAX_LANGGRAPH_TARGETS = 1000
#: The manifest kind of a value kept in the blob store.
LANGGRAPH_VALUE_KIND = "langgraph-value"

#: A LangGraph name (thread id, namespace, channel, version, task): at most 1024 characters.
LangGraphName = Annotated[str, Field(max_length=MAX_LANGGRAPH_NAME_LENGTH)]
#: A LangGraph thread id: not empty.
ThreadId = Annotated[str, Field(min_length=1, max_length=MAX_LANGGRAPH_NAME_LENGTH)]
#: A blob-store manifest id (BLAKE3, 64 hex digits).
ManifestId = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def _from_base64(value: object) -> object:
    """A value's bytes as a request carries them: base64 text (JSON), or bytes (Python)."""
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error:
            raise PydanticCustomError("base64", "bytes must be base64 text") from None
    return value


#: Bytes: raw in Python, base64 text in JSON (in requests and answers alike).
Base64Data = Annotated[
    bytes,
    BeforeValidator(_from_base64),
    PlainSerializer(lambda data: base64.b64encode(data).decode("ascii"), when_used="json"),
    WithJsonSchema({"type": "string", "contentEncoding": "base64"}),
]


class LangGraphValue(StrictModel):
    """One serialized value: LangGraph's serializer type and its bytes, inline (`data`) or in
    the blob store (`manifest_id`: a `langgraph-value` manifest of this runtime's)."""

    type: LangGraphName
    data: Annotated[Base64Data, Field(max_length=MAX_INLINE_VALUE_BYTES)] = b""
    manifest_id: ManifestId | None = None

    @model_validator(mode="after")
    def _one_place(self) -> LangGraphValue:
        if self.manifest_id is not None and self.data:
            raise ValueError(
                "a value is inline (data) or in the blob store (manifest_id), not both"
            )
        return self


class LangGraphChannelValue(StrictModel):
    """The value of one channel at one version."""

    channel: LangGraphName
    version: LangGraphName
    value: LangGraphValue


class LangGraphWrite(StrictModel):
    """One pending write of a task: its channel, its value, and where it sorts."""

    task_id: LangGraphName
    task_path: LangGraphName = ""
    idx: int
    channel: LangGraphName
    value: LangGraphValue


class LangGraphCheckpoint(StrictModel):
    """A LangGraph checkpoint as the saver puts it: where it is (thread, namespace, id), its
    parent, its serialized body without channel values, the channel versions it names, its
    metadata, and the channel values new in it."""

    thread_id: ThreadId
    checkpoint_ns: LangGraphName = ""
    checkpoint_id: LangGraphName = Field(min_length=1)
    parent_checkpoint_id: LangGraphName | None = None
    checkpoint: LangGraphValue
    versions: dict[LangGraphName, LangGraphName] = Field(max_length=MAX_LANGGRAPH_ITEMS)
    metadata: RequestMetadata
    values: list[LangGraphChannelValue] = Field(
        default_factory=list, max_length=MAX_LANGGRAPH_ITEMS
    )

    @property
    def run_id(self) -> str | None:
        """The run that made it (its metadata's `run_id`), which `delete_for_runs` names."""
        run = self.metadata.get("run_id")
        return run if isinstance(run, str) and run else None


class LangGraphTuple(StrictModel):
    """A stored checkpoint as `get_tuple` and `list` answer it: the checkpoint, its channel
    values at the versions it names, and its pending writes in `writes_sort_key` order."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: LangGraphValue
    metadata: dict[str, Any]
    values: list[LangGraphChannelValue]
    writes: list[LangGraphWrite]


class LangGraphCursor(StrictModel):
    """Where a listing goes on from: the last checkpoint it answered (listings are newest
    first: by checkpoint id, then thread, then namespace, each descending)."""

    checkpoint_id: str
    thread_id: str
    checkpoint_ns: str


class LangGraphThreadSummary(StrictModel):
    """One LangGraph thread of a runtime, as the runtime's owner sees it listed."""

    thread_id: str
    checkpoints: int
    latest_checkpoint_id: str | None
    created_at_ms: int


class LangGraphThreadList(StrictModel):
    """GET /api/v1/runtimes/{runtime_id}/langgraph/threads: the runtime's LangGraph threads,
    by thread id."""

    runtime_id: str
    threads: list[LangGraphThreadSummary]


# ---- the self/langgraph/... routes: a kernel's saver ---------------------------------------


class _SelfLangGraph(StrictModel):
    """What every `self/langgraph/...` request carries: the runtime, and the kernel's token."""

    runtime_id: RequestId
    runtime_token: RequestText


class LangGraphPutRequest(_SelfLangGraph):
    """POST /api/v1/runtimes/self/langgraph/put: store a checkpoint in one of the runtime's
    threads (made on first use). Each value kept in the blob store must be a
    `langgraph-value` manifest written for this runtime."""

    checkpoint: LangGraphCheckpoint


class LangGraphWritesRequest(_SelfLangGraph):
    """POST /api/v1/runtimes/self/langgraph/writes: pending writes of one task, linked to a
    checkpoint. `replace`: writes already stored at the same (task, idx) are replaced (else
    kept, so a repeated call stores nothing twice)."""

    thread_id: ThreadId
    checkpoint_ns: LangGraphName = ""
    checkpoint_id: LangGraphName = Field(min_length=1)
    writes: list[LangGraphWrite] = Field(max_length=MAX_LANGGRAPH_ITEMS)
    replace: bool = False


class LangGraphGetRequest(_SelfLangGraph):
    """POST /api/v1/runtimes/self/langgraph/get: one checkpoint of a thread (its newest in
    the namespace when `checkpoint_id` is not given)."""

    thread_id: ThreadId
    checkpoint_ns: LangGraphName = ""
    checkpoint_id: LangGraphName | None = None


class LangGraphGetResult(StrictModel):
    """The checkpoint asked for, or null when the thread (or that checkpoint) is unknown."""

    found: LangGraphTuple | None


class LangGraphListRequest(_SelfLangGraph):
    """POST /api/v1/runtimes/self/langgraph/list: the runtime's checkpoints, newest first,
    in one thread (or all) and one namespace (or all), those whose metadata holds every
    key of `filter` with an equal value, before the checkpoint id `before`, from just after
    `after` (the previous page's last), at most `limit`."""

    thread_id: ThreadId | None = None
    checkpoint_ns: LangGraphName | None = None
    checkpoint_id: LangGraphName | None = None
    filter: RequestMetadata | None = None
    before: LangGraphName | None = None
    after: LangGraphCursor | None = None
    limit: int = Field(default=MAX_LANGGRAPH_PAGE, ge=1, le=MAX_LANGGRAPH_PAGE)


class LangGraphListResult(StrictModel):
    """One page of a listing; `next` is where the next page starts (null: no more)."""

    tuples: list[LangGraphTuple]
    next: LangGraphCursor | None


class LangGraphDeleteThreadRequest(_SelfLangGraph):
    """POST /api/v1/runtimes/self/langgraph/delete-thread: every checkpoint, value and write
    of one thread of the runtime (an unknown thread: nothing happens)."""

    thread_id: ThreadId


class LangGraphCopyThreadRequest(_SelfLangGraph):
    """POST /api/v1/runtimes/self/langgraph/copy-thread: copy every checkpoint, value and
    write of one thread into another thread of the same runtime (which must have none)."""

    source_thread_id: ThreadId
    target_thread_id: ThreadId


class LangGraphPruneRequest(_SelfLangGraph):
    """POST /api/v1/runtimes/self/langgraph/prune: `keep_latest` keeps the newest checkpoint
    of each namespace of each thread (with its writes and the values it names); `delete`
    removes the threads' checkpoints."""

    thread_ids: list[ThreadId] = Field(max_length=MAX_LANGGRAPH_TARGETS)
    strategy: Literal["keep_latest", "delete"] = "keep_latest"


class LangGraphDeleteRunsRequest(_SelfLangGraph):
    """POST /api/v1/runtimes/self/langgraph/delete-runs: the runtime's checkpoints made by
    these runs (their metadata's `run_id`), with their writes."""

    run_ids: list[LangGraphName] = Field(max_length=MAX_LANGGRAPH_TARGETS)


class LangGraphChanged(StrictModel):
    """What a write to the runtime's LangGraph rows changed: rows written or deleted; for
    a put, whether the checkpoint had pending writes stored already (the kernel's cache
    then reads it back from the store, `ditto_jupyter.langgraph.cache`)."""

    rows: int
    had_writes: bool = False

"""A value of LangGraph's as the store keeps it: serialized by the saver's serializer, then
inline in its row, or in the blob store when it is large.

A value over `MAX_INLINE_VALUE_BYTES`, or one that would take a request's inline bytes
past `INLINE_BUDGET_BYTES`, is written by the kernel into the runtime's blob store (the
same store and the same one write path as its namespace captures): its chunks and a signed
`langgraph-value` manifest naming the runtime, all of one call's values in one bulk write.
The row names the manifest; reading it back checks its signature and every chunk's hash.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobStore
from ditto_jupyter.core.models.langgraph import (
    LANGGRAPH_VALUE_KIND,
    MAX_INLINE_VALUE_BYTES,
    LangGraphValue,
)

#: Inline bytes one request carries at most (the rest go to the blob store): a request
#: stays well inside the server's body limit once base64 has grown it by a third.
INLINE_BUDGET_BYTES = 1024 * 1024
#: What LangGraph's savers store for a channel that has a version but no value.
EMPTY = "empty"


class ValueCodec:
    """Serialize values for one runtime's rows, and read them back."""

    def __init__(self, serde: SerializerProtocol, blobs: BlobStore, runtime_id: str) -> None:
        self.serde = serde
        self.blobs = blobs
        self.runtime_id = runtime_id

    def encode_all(self, values: Sequence[Any]) -> list[LangGraphValue]:
        """Each value serialized, inline or in the blob store (one bulk write for all)."""
        return self.place_all([self.serde.dumps_typed(value) for value in values])

    def place_all(self, serialized: Sequence[tuple[str, bytes]]) -> list[LangGraphValue]:
        """Serialized values kept inline while they fit, the others in the blob store."""
        placed: list[LangGraphValue | None] = []
        large: list[tuple[int, str, bytes]] = []
        inline = 0
        for type_, data in serialized:
            if len(data) <= MAX_INLINE_VALUE_BYTES and inline + len(data) <= INLINE_BUDGET_BYTES:
                inline += len(data)
                placed.append(LangGraphValue(type=type_, data=data))
            else:
                large.append((len(placed), type_, data))
                placed.append(None)
        if large:
            with self.blobs.bulk_write() as bulk:
                for index, type_, data in large:
                    view = memoryview(data)
                    chunks = [
                        bulk.put_chunk(view[start : start + CHUNK_SIZE])[0]
                        for start in range(0, len(view), CHUNK_SIZE)
                    ]
                    manifest_id = bulk.put_manifest(
                        {
                            "kind": LANGGRAPH_VALUE_KIND,
                            "runtime_id": self.runtime_id,
                            "size": len(data),
                            "chunks": chunks,
                        }
                    )
                    placed[index] = LangGraphValue(type=type_, manifest_id=manifest_id)
                bulk.commit()
        return [value for value in placed if value is not None]

    def serialized(self, value: LangGraphValue) -> tuple[str, bytes]:
        """The value's serializer type and bytes (read from the blob store when there)."""
        if value.manifest_id is None:
            return value.type, value.data
        body = self.blobs.get_manifest(value.manifest_id)
        return value.type, self.blobs.get_bytes(body["chunks"])

    def decode(self, value: LangGraphValue) -> Any:
        """The value back, as the saver's serializer reads it."""
        return self.serde.loads_typed(self.serialized(value))

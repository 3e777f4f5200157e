"""A checkpoint's notebook document in the blob store: cell by cell, content-addressed.

One document is one signed manifest:

    {"kind": "notebook-document", "version": 1, "nbformat": 4, "nbformat_minor": 5,
     "metadata": [chunk ids of the notebook's metadata as JSON], "cell_count": n,
     "cells": [[cell chunks, large-value chunks], ...], "parts": [part id], "manifests":
     [part id], "chunks": [every chunk the manifest itself lists]}

Each cell is stored as the JSON of `{"cell": ..., "large": [...]}` (sorted keys), split into
1 MiB chunks named by their BLAKE3 hash: an unchanged cell is the same chunks, written once.
Large values (an output's image or long text, an attachment: over `LARGE_VALUE` bytes as
JSON) are taken out of the cell and stored as chunks of their own, the cell keeping their
path and chunk names: a cell whose image did not change names the same image chunks, and
two cells with the same plot share them. A document of more than `INLINE_MAX` cells keeps
its cells in *parts* (signed child manifests `{"kind": "notebook-document-part", "cells":
[...], "chunks": [...]}`), cut after a cell whose id's CRC-32 is 0 modulo `PART_SPREAD` or
after `PART_MAX` cells: cell ids do not change when a cell is edited, so a checkpoint after
one cell ran writes that cell's chunks, one part and a short top manifest.

Reading gives the document back exactly as it was stored (`document`), or its cells as
stored records for comparing without loading their large values (`stored_cells`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobError, BlobStore, BulkWrite
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import NotebookDocument

DOCUMENT_KIND = "notebook-document"
PART_KIND = "notebook-document-part"
VERSION = 1
#: A value in a cell bigger than this (bytes of its JSON) is stored as chunks of its own.
LARGE_VALUE = 4 * 1024
#: Stored cell records kept in memory (they never change: a cell's chunks name its content).
RECORD_CACHE = 8192
#: Up to this many cells stay inline in the top manifest.
INLINE_MAX = 16
#: A part ends after about one cell in this many (chosen by the cell's id) ...
PART_SPREAD = 8
#: ... and after this many at most.
PART_MAX = 32

Path = list[str | int]


@dataclass(frozen=True)
class StoredCell:
    """One cell as a manifest lists it: the chunks of its record, and of its large values."""

    chunks: tuple[str, ...]
    large: tuple[str, ...]

    def entry(self) -> list[list[str]]:
        """The manifest form of this cell."""
        return [list(self.chunks), list(self.large)]

    @classmethod
    def from_entry(cls, raw: Any) -> StoredCell:
        """A cell entry read back from a manifest."""
        chunks, large = raw
        return cls(tuple(str(c) for c in chunks), tuple(str(c) for c in large))


@dataclass(frozen=True)
class SavedDocument:
    """What storing a document did: its manifest, its cell count, the bytes it added."""

    manifest_id: str
    cells: int
    bytes_written: int


@dataclass(frozen=True)
class LoadedDocument:
    """A stored document's manifest, read and checked: its format and cells as stored."""

    manifest_id: str
    nbformat: int
    nbformat_minor: int
    metadata: tuple[str, ...]
    cells: list[StoredCell]


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as error:  # nested too deep, or an integer beyond 64 bits
        raise InvalidRequest(f"the document cannot be stored as JSON: {error}") from None


def _is_large(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) > LARGE_VALUE // 4 and len(value.encode("utf-8")) > LARGE_VALUE
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return sum(len(line) for line in value) > LARGE_VALUE // 4 and len(_dumps(value)) > (
            LARGE_VALUE
        )
    return False


def _large_values(cell: dict[str, Any]) -> Iterator[tuple[Path, Any]]:
    """Where a cell's large values are: output data and stream text, attachments."""
    outputs = cell.get("outputs")
    if isinstance(outputs, list):
        for index, output in enumerate(outputs):
            if not isinstance(output, dict):
                continue
            data = output.get("data")
            if isinstance(data, dict):
                for mime, value in data.items():
                    if _is_large(value):
                        yield ["outputs", index, "data", mime], value
            if _is_large(output.get("text")):
                yield ["outputs", index, "text"], output["text"]
    attachments = cell.get("attachments")
    if isinstance(attachments, dict):
        for name, bundle in attachments.items():
            if isinstance(bundle, dict):
                for mime, value in bundle.items():
                    if _is_large(value):
                        yield ["attachments", name, mime], value


def replaced_at(node: Any, path: Path, value: Any) -> Any:
    """A copy of `node` with the value at `path` replaced (copies only along the path)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        copy = dict(node)
        copy[head] = replaced_at(node[head], rest, value)
        return copy
    assert isinstance(node, list) and isinstance(head, int)
    copy_list = list(node)
    copy_list[head] = replaced_at(node[head], rest, value)
    return copy_list


#: Stores (or only names) a byte string as chunks: (their names, the bytes they added).
ChunkPut = Callable[[bytes], tuple[list[str], int]]


def _put_bytes(bulk: BulkWrite, data: bytes) -> tuple[list[str], int]:
    """Store `data` as fixed-size chunks; (their names, the bytes they added)."""
    view = memoryview(data)
    chunks: list[str] = []
    written = 0
    for offset in range(0, max(len(view), 1), CHUNK_SIZE):
        digest, added = bulk.put_chunk(view[offset : offset + CHUNK_SIZE])
        chunks.append(digest)
        written += added
    return chunks, written


def _name_bytes(data: bytes) -> tuple[list[str], int]:
    """The chunk names `data` would be stored under (nothing is stored)."""
    view = memoryview(data)
    names = [
        BlobStore.digest(view[offset : offset + CHUNK_SIZE])
        for offset in range(0, max(len(view), 1), CHUNK_SIZE)
    ]
    return names, 0


def _stored_record(cell: dict[str, Any], put: ChunkPut) -> tuple[StoredCell, dict[str, Any], int]:
    """A cell as stored (its chunks, its record without its large values) and the bytes
    storing it added; `put` stores (or only names) each byte string."""
    written = 0
    stripped: Any = cell
    large: list[dict[str, Any]] = []
    large_chunks: list[str] = []
    for path, value in list(_large_values(cell)):
        chunks, added = put(_dumps(value))
        written += added
        large.append({"path": path, "chunks": chunks})
        large_chunks += chunks
        stripped = replaced_at(stripped, path, None)
    record = {"cell": stripped, "large": large}
    chunks, added = put(_dumps(record))
    stored = StoredCell(tuple(chunks), tuple(dict.fromkeys(large_chunks)))
    return stored, record, written + added


@dataclass(frozen=True)
class CellView:
    """A cell as comparisons see it: its stored chunks (equal chunks, equal cell) and its
    record (the cell, its large values named by their chunks, not loaded)."""

    key: tuple[str, ...]
    record: dict[str, Any]


def cell_views(document: NotebookDocument) -> list[CellView]:
    """The cells of a document that is not stored, as a stored copy would show them."""
    views = []
    for cell in document.cells:
        stored, record, _ = _stored_record(cell, _name_bytes)
        views.append(CellView(stored.chunks, record))
    return views


def _part_key(cell: dict[str, Any], stored: StoredCell) -> bytes:
    """What chooses a part boundary after a cell: its id (stable across edits), else its
    first chunk's name."""
    cell_id = cell.get("id")
    return (cell_id if isinstance(cell_id, str) and cell_id else stored.chunks[0]).encode()


def split_into_parts(keys: list[bytes], cells: list[StoredCell]) -> list[list[StoredCell]]:
    """Cells cut into parts at boundaries their keys choose."""
    parts: list[list[StoredCell]] = []
    current: list[StoredCell] = []
    for key, cell in zip(keys, cells, strict=True):
        current.append(cell)
        if zlib.crc32(key) % PART_SPREAD == 0 or len(current) >= PART_MAX:
            parts.append(current)
            current = []
    if current:
        parts.append(current)
    return parts


def _chunks_of(cells: list[StoredCell]) -> list[str]:
    listed: dict[str, None] = {}
    for cell in cells:
        listed.update(dict.fromkeys(cell.chunks))
        listed.update(dict.fromkeys(cell.large))
    return list(listed)


class DocumentStore:
    """Stores notebook documents in a blob store, and reads them back."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self._records: dict[tuple[str, ...], dict[str, Any]] = {}

    # ---- writing ----------------------------------------------------------------------

    def save(self, document: NotebookDocument) -> SavedDocument:
        """Store a document (one bulk write: a failure leaves the blob store as it was)."""
        with self.blobs.bulk_write() as bulk:
            written = 0
            cells: list[StoredCell] = []
            keys: list[bytes] = []
            for cell in document.cells:
                stored, added = self._put_cell(bulk, cell)
                cells.append(stored)
                keys.append(_part_key(cell, stored))
                written += added
            metadata, added = _put_bytes(bulk, _dumps(document.metadata))
            written += added
            part_ids: list[str] = []
            if len(cells) > INLINE_MAX:
                part_ids = [
                    bulk.put_manifest(
                        {
                            "kind": PART_KIND,
                            "version": VERSION,
                            "cells": [cell.entry() for cell in part],
                            "chunks": _chunks_of(part),
                        }
                    )
                    for part in split_into_parts(keys, cells)
                ]
            inline = [] if part_ids else cells
            body: dict[str, Any] = {
                "kind": DOCUMENT_KIND,
                "version": VERSION,
                "nbformat": document.nbformat,
                "nbformat_minor": document.nbformat_minor,
                "metadata": metadata,
                "cell_count": len(cells),
                "cells": [cell.entry() for cell in inline],
                "chunks": list(dict.fromkeys([*metadata, *_chunks_of(inline)])),
            }
            if part_ids:
                body["parts"] = body["manifests"] = part_ids
            manifest_id = bulk.put_manifest(body)
            written += bulk.commit()
        return SavedDocument(manifest_id=manifest_id, cells=len(cells), bytes_written=written)

    def _put_cell(self, bulk: BulkWrite, cell: dict[str, Any]) -> tuple[StoredCell, int]:
        stored, _, written = _stored_record(cell, lambda data: _put_bytes(bulk, data))
        return stored, written

    # ---- reading ----------------------------------------------------------------------

    def load(self, manifest_id: str) -> LoadedDocument:
        """A document's manifest and its parts, every signature checked (BlobError when it
        is not a notebook document)."""
        body = self.blobs.get_manifest(manifest_id)
        if body.get("kind") != DOCUMENT_KIND or body.get("version") != VERSION:
            raise BlobError(f"manifest {manifest_id} is not a notebook document")
        entries = list(body.get("cells", []))
        for part_id in body.get("parts") or []:
            part = self.blobs.get_manifest(part_id)
            if part.get("kind") != PART_KIND:
                raise BlobError(f"manifest {part_id} is not a part of document {manifest_id}")
            entries.extend(part["cells"])
        return LoadedDocument(
            manifest_id=manifest_id,
            nbformat=int(body["nbformat"]),
            nbformat_minor=int(body["nbformat_minor"]),
            metadata=tuple(str(c) for c in body["metadata"]),
            cells=[StoredCell.from_entry(entry) for entry in entries],
        )

    def stored_cell(self, cell: StoredCell) -> dict[str, Any]:
        """A cell's stored record: `{"cell": the cell without its large values, "large":
        [{"path", "chunks"}]}` (compared as it is: equal large values, equal chunks). It is
        shared with later readers: never change it."""
        cached = self._records.get(cell.chunks)
        if cached is not None:
            return cached
        record = orjson.loads(self.blobs.get_bytes(cell.chunks))
        if not isinstance(record, dict) or not isinstance(record.get("cell"), dict):
            raise BlobError(f"cell chunks {cell.chunks[0]} do not hold a stored cell")
        if len(self._records) >= RECORD_CACHE:
            self._records.clear()
        self._records[cell.chunks] = record
        return record

    def cell(self, cell: StoredCell) -> dict[str, Any]:
        """One cell exactly as it was stored, its large values put back."""
        record = self.stored_cell(cell)
        restored: Any = record["cell"]
        for value in record.get("large", []):
            restored = replaced_at(
                restored, list(value["path"]), orjson.loads(self.blobs.get_bytes(value["chunks"]))
            )
        assert isinstance(restored, dict)
        return restored

    def views(self, manifest_id: str) -> list[CellView]:
        """The cells of a stored document as comparisons see them (large values unread)."""
        return [
            CellView(cell.chunks, self.stored_cell(cell)) for cell in self.load(manifest_id).cells
        ]

    def document(self, manifest_id: str) -> dict[str, Any]:
        """The nbformat 4 document a manifest holds, exactly as it was stored."""
        loaded = self.load(manifest_id)
        return {
            "nbformat": loaded.nbformat,
            "nbformat_minor": loaded.nbformat_minor,
            "metadata": orjson.loads(self.blobs.get_bytes(loaded.metadata)),
            "cells": [self.cell(cell) for cell in loaded.cells],
        }

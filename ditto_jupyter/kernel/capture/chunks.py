"""Chunk I/O of a capture: chunks by BLAKE3 name, a fingerprint memo, one commit.

A buffer (a numpy array's memory) is cut into fixed-size chunks: written into in place, its
unchanged chunks stay where they were. A big pickle stream is cut where its content says
(FastCDC, `content_cuts`): a value pickled again with a few bytes inserted or removed (a
model added to a dict of fitted models) keeps the chunks before and after the change, where
fixed boundaries would shift every chunk after it. Such an entry lists each chunk's length
(`cuts`).

A per-process memo maps an XXH3-128 fingerprint of a chunk to its BLAKE3 name: an unchanged
buffer is fingerprinted (fast), never re-hashed or re-written. The memo learns from every
capture once it is recorded, and from every restored manifest (whose fingerprints it signs),
so the first checkpoint after a resume is incremental too. BLAKE3, zstd and file I/O release
the GIL, so a big buffer's chunks are hashed, written and read on two threads.

A capture is one bulk write of the kernel's blob store (`core.blobs.BulkWrite`): its chunks
are staged, synced once and recorded with its manifests in one commit. A capture that fails
leaves the store as it was, at once: the chunks it wrote go with it. No other capture can
have named them, because the memo learns a capture's chunks only once it is recorded.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import blake3
import fastcdc

from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobError, BlobStore, BulkWrite
from ditto_jupyter.kernel.capture.manifest import stored_entries

try:  # a fast non-cryptographic fingerprint; BLAKE3 stands in when xxhash is missing
    import xxhash

    def _fingerprint(data: memoryview) -> str:
        return xxhash.xxh3_128_hexdigest(data)

except ImportError:  # pragma: no cover - depends on the environment

    def _fingerprint(data: memoryview) -> str:
        return blake3.blake3(data).hexdigest()[:32]


#: Streams longer than this are cut by content (shorter ones are one or two chunks anyway).
CONTENT_DEFINED_MIN = CHUNK_SIZE
#: FastCDC's bounds for those chunks: at most CHUNK_SIZE, as every chunk.
_CDC_MIN, _CDC_AVERAGE, _CDC_MAX = CHUNK_SIZE // 4, CHUNK_SIZE // 2, CHUNK_SIZE


def content_cuts(data: bytes) -> list[int]:
    """The lengths of the chunks `data` is cut into where its content says (FastCDC)."""
    return [
        chunk.length
        for chunk in fastcdc.fastcdc(
            data, min_size=_CDC_MIN, avg_size=_CDC_AVERAGE, max_size=_CDC_MAX
        )
    ]


class LiveBufferChanged(BlobError):
    """A buffer changed between a deferred capture's fingerprint and its copy."""


# ---- the fingerprint memo -------------------------------------------------------------

_MEMO_LIMIT = 1 << 21
_memo_lock = threading.Lock()
_chunk_memo: dict[str, str] = {}  # fingerprint -> BLAKE3 chunk name
_seeded: set[str] = set()  # manifests (captured or restored here) the memo has learned


def _remember_chunk(fingerprint: str, digest: str) -> None:
    with _memo_lock:
        if len(_chunk_memo) >= _MEMO_LIMIT:
            _chunk_memo.clear()
            _seeded.clear()
        _chunk_memo[fingerprint] = digest


def remember_manifest(manifest_id: str, body: dict[str, Any]) -> None:
    """Learn the fingerprints of a manifest's chunks (once per manifest and process)."""
    with _memo_lock:
        if manifest_id in _seeded:
            return
        _seeded.add(manifest_id)
    for stored in stored_entries(body):
        for fingerprint, digest in zip(stored["fps"], stored["chunks"], strict=True):
            _remember_chunk(fingerprint, digest)


#: Chunks a deferred writer has taken (a view or a copy) and will write, by fingerprint.
#: A later deferred capture of the same bytes (`d3 = {"ref": arr}` run straight after
#: `arr = ...`) takes the chunk's name from that write, which the write-behind finishes
#: first, instead of copying and writing the chunk again.
_in_flight: set[str] = set()


def _take_flight(fingerprint: str) -> bool:
    """Register a chunk this writer will write; False when another writer is writing it."""
    with _memo_lock:
        if fingerprint in _in_flight:
            return False
        _in_flight.add(fingerprint)
        return True


def _land(fingerprints: list[str]) -> None:
    """The chunks a writer registered are written (the memo knows them) or never will be."""
    with _memo_lock:
        _in_flight.difference_update(fingerprints)


def knows_manifest(manifest_id: str) -> bool:
    """Whether the memo has learned this manifest's chunks already."""
    return manifest_id in _seeded


def forget_chunks() -> None:
    """Empty the memo (a chunk it named has been collected since)."""
    with _memo_lock:
        _chunk_memo.clear()
        _seeded.clear()


# ---- threads --------------------------------------------------------------------------


@functools.cache
def _pool() -> ThreadPoolExecutor:
    """Two writer threads (started on first use): BLAKE3, zstd and file writes release the
    GIL, so new chunks of a big buffer are hashed and written in parallel."""
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="ditto-chunks")


@functools.cache
def _reading_pool() -> ThreadPoolExecutor:
    """One thread (started on first use) that fingerprints and reads beside the caller,
    apart from the writers: a cell's snapshot never queues behind a write-behind."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="ditto-reads")


def fingerprint_chunks(parts: list[memoryview]) -> list[str]:
    """Fingerprints of chunks; a big buffer's second half is done on a writer thread."""
    if len(parts) < 8 or (os.cpu_count() or 1) < 2:
        return [_fingerprint(part) for part in parts]
    half = len(parts) // 2
    rest = _reading_pool().submit(lambda: [_fingerprint(part) for part in parts[half:]])
    return [_fingerprint(part) for part in parts[:half]] + rest.result()


# ---- writing --------------------------------------------------------------------------

#: A chunk's bytes and the size of the items they hold (the store's codec hint).
_Part = tuple[bytes | memoryview, int]


def _put_chunk(bulk: BulkWrite, chunk: _Part) -> tuple[str, int]:
    part, itemsize = chunk
    return bulk.put_chunk(part, blake3.blake3(part).hexdigest(), itemsize=itemsize)


class ChunkWriter:
    """Stores byte views as fixed-size chunks, skipping the ones already stored, in one bulk
    write of `blobs`: `put_manifest` then `commit` record them; `abort` drops them.

    With `defer`, `store` only fingerprints: the chunks the memo does not know are kept as
    views of live memory until `detach` copies them (before the next cell can change them),
    and written by `write_pending`, which fills in their names. Entries returned by `store`
    are complete once it has run.
    """

    def __init__(self, blobs: BlobStore, *, defer: bool = False) -> None:
        self.blobs = blobs
        self.defer = defer
        self.bytes_written = 0
        self._bulk = blobs.bulk_write()
        self._mine: dict[str, str] = {}  # fingerprint -> name of the chunks this writer wrote
        self._pending: list[tuple[list[str | None], int, str, _Part]] = []
        self._live: list[int] = []  # pending chunks still read from live (mutable) memory
        self._flying: list[str] = []  # fingerprints registered in _in_flight by this writer
        self._awaited: list[tuple[list[str | None], int, str]] = []  # written by another
        self._detaching = threading.Lock()  # the next cell and the write-behind may both copy
        self._refused: LiveBufferChanged | None = None

    def _known(self, fingerprint: str) -> str | None:
        """The name of a chunk this writer wrote, or that the memo knows."""
        return self._mine.get(fingerprint) or _chunk_memo.get(fingerprint)

    def store(
        self, data: memoryview, itemsize: int = 1, *, by_content: bool = False
    ) -> dict[str, Any]:
        """Store one byte string; its manifest entry `{"size", "chunks", "fps"}` (and
        `cuts`, the chunks' lengths, when they were cut by content).

        `itemsize` is the size of the items the bytes hold (8 for float64), a hint for the
        store's codec; `by_content`: a pickle stream, cut where its content says when big."""
        view = data.cast("B") if data.format != "B" or data.ndim != 1 else data
        cuts: list[int] | None = None
        if by_content and len(view) > CONTENT_DEFINED_MIN and isinstance(view.obj, bytes):
            cuts = content_cuts(view.obj)
            ends = list(itertools.accumulate(cuts))
            parts = [view[end - length : end] for end, length in zip(ends, cuts, strict=True)]
        else:
            parts = [
                view[offset : offset + CHUNK_SIZE] for offset in range(0, len(view), CHUNK_SIZE)
            ]
        prints = fingerprint_chunks(parts)
        digests: list[str | None] = [self._known(fingerprint) for fingerprint in prints]
        if self.defer:
            immutable = isinstance(view.obj, bytes)
            for index, (part, digest) in enumerate(zip(parts, digests, strict=True)):
                if digest is not None:
                    continue
                fingerprint = prints[index]
                if not _take_flight(fingerprint):  # an earlier write (or this one) has it
                    self._awaited.append((digests, index, fingerprint))
                    continue
                self._flying.append(fingerprint)
                if not immutable:
                    self._live.append(len(self._pending))
                self._pending.append((digests, index, fingerprint, (part, itemsize)))
            return _entry(len(view), digests, prints, cuts)
        missing: dict[str, _Part] = {}
        for part, fingerprint, digest in zip(parts, prints, digests, strict=True):
            if digest is None:
                missing.setdefault(fingerprint, (part, itemsize))
        if missing:
            learned = self._put(list(missing.values()), list(missing))
            digests = [learned.get(f, d) for d, f in zip(digests, prints, strict=True)]
        return _entry(len(view), [str(d) for d in digests], prints, cuts)

    def _put(self, parts: list[_Part], prints: list[str]) -> dict[str, str]:
        """Stage chunks (two threads for many, unless deferred: a write-behind leaves the
        other core to the kernel's next cell); their names by fingerprint."""
        if not self.defer and len(parts) >= 4 and (os.cpu_count() or 1) > 1:
            futures = [_pool().submit(_put_chunk, self._bulk, part) for part in parts]
            try:
                results = [future.result() for future in futures]
            except BaseException:  # stop the others before the caller drops the write
                for future in futures:
                    future.cancel()
                wait(futures)
                raise
        else:
            results = [_put_chunk(self._bulk, part) for part in parts]
        learned = {}
        for fingerprint, (digest, written) in zip(prints, results, strict=True):
            self.bytes_written += written
            learned[fingerprint] = digest
        self._mine.update(learned)
        return learned

    def detach(self) -> None:
        """Copy the pending chunks still read from live memory, and let go of it.

        Raises LiveBufferChanged when a copy no longer has the fingerprint it was taken
        with: something (a thread, a widget's callback) wrote into the buffer since; every
        later call raises it again. Safe to call from two threads: one copies.
        """
        with self._detaching:
            if self._refused is not None:
                raise self._refused
            changed = 0
            for position in self._live:
                digests, index, fingerprint, (part, itemsize) = self._pending[position]
                copy = bytes(part)
                self._pending[position] = (digests, index, fingerprint, (copy, itemsize))
                changed += _fingerprint(memoryview(copy)) != fingerprint
            self._live.clear()
            if changed:
                self._pending.clear()
                self.release()
                self._refused = LiveBufferChanged(
                    f"{changed} chunk(s) of a buffer changed while the checkpoint was being "
                    "written (by a thread or a widget's callback)"
                )
                raise self._refused

    def write_pending(self) -> None:
        """Stage what deferred `store` calls kept (`detach` first), and fill in their
        entries' chunk names, also of the chunks an earlier writer wrote (in order, on the
        same write-behind: it has finished); BlobError when that write failed."""
        self.detach()
        unique: dict[str, _Part] = {}
        for _, _, fingerprint, data in self._pending:
            unique.setdefault(fingerprint, data)
        learned = self._put(list(unique.values()), list(unique)) if unique else {}
        for digests, index, fingerprint, _ in self._pending:
            digests[index] = learned[fingerprint]
        self._pending.clear()
        for digests, index, fingerprint in self._awaited:
            digest = self._known(fingerprint)
            if digest is None:
                raise BlobError(
                    "a chunk this checkpoint shares with the one before was not written: "
                    "that checkpoint failed"
                )
            digests[index] = digest
        self._awaited.clear()

    def put_manifest(self, body: dict[str, Any]) -> str:
        """Sign a manifest listing this writer's chunks, for `commit`; its id."""
        return self._bulk.put_manifest(body)

    @property
    def log_overhead(self) -> int:
        """What the blob catalogue's log took beyond the data (see `BulkWrite.commit`)."""
        return self._bulk.log_overhead

    def commit(self) -> int:
        """Sync and record every chunk and manifest of this writer at once; the bytes of
        the new manifest documents. Then the memo learns the chunks (no capture can name
        one of them before), and the chunks in flight are landed. On failure, `abort`."""
        try:
            written = self._bulk.commit()
        except BaseException:
            self.abort()
            raise
        for fingerprint, digest in self._mine.items():
            _remember_chunk(fingerprint, digest)
        self.release()
        return written

    def abort(self) -> None:
        """Drop everything this writer staged (the files go at once; nothing was recorded)
        and land its chunks in flight: a later capture writes them itself."""
        self._bulk.abort()
        self._pending.clear()
        self.release()

    def release(self) -> None:
        """Let go of the chunks this writer registered as in flight (written, failed or
        dropped): a later capture no longer waits for this writer to write them."""
        _land(self._flying)
        self._flying.clear()


# ---- reading --------------------------------------------------------------------------


def read_chunks(blobs: BlobStore, reads: list[tuple[str, memoryview]]) -> None:
    """Read and check chunks into their targets; a long run is split over a writer thread
    (reads and BLAKE3 release the GIL)."""
    if len(reads) < 8 or (os.cpu_count() or 1) < 2:
        for digest, target in reads:
            blobs.read_chunk_into(digest, target)
        return
    half = len(reads) // 2

    def second_half() -> None:
        for digest, target in reads[half:]:
            blobs.read_chunk_into(digest, target)

    rest = _reading_pool().submit(second_half)
    try:
        for digest, target in reads[:half]:
            blobs.read_chunk_into(digest, target)
    finally:
        rest.result()


def _entry(
    size: int, chunks: list[Any], prints: list[str], cuts: list[int] | None
) -> dict[str, Any]:
    """A stored byte string's manifest entry (`chunks` may still be filled in later)."""
    entry: dict[str, Any] = {"size": size, "chunks": chunks, "fps": prints}
    if cuts is not None:
        entry["cuts"] = cuts
    return entry

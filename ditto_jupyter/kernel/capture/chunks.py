"""Chunk I/O of a capture: fixed-size chunks by BLAKE3 name, a fingerprint memo, one sync.

A per-process memo maps an XXH3-128 fingerprint of a chunk to its BLAKE3 name: an unchanged
buffer is fingerprinted (fast), never re-hashed or re-written. The memo learns from every
capture and every restored manifest (whose fingerprints it signs), so the first checkpoint
after a resume is incremental too. BLAKE3, zstd and file I/O release the GIL, so a big
buffer's chunks are hashed, written and read on two threads. A capture writes without
per-file fsync and makes everything durable with one `syncfs` before it returns (Linux;
elsewhere every file is fsynced by the store).
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import blake3

from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobError, BlobStore
from ditto_jupyter.kernel.capture.manifest import stored_entries

try:  # a fast non-cryptographic fingerprint; BLAKE3 stands in when xxhash is missing
    import xxhash

    def _fingerprint(data: memoryview) -> str:
        return xxhash.xxh3_128_hexdigest(data)

except ImportError:  # pragma: no cover - depends on the environment

    def _fingerprint(data: memoryview) -> str:
        return blake3.blake3(data).hexdigest()[:32]


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

_thread_stores = threading.local()


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


def _store_for_thread(blobs: BlobStore) -> BlobStore:
    """This thread's own BlobStore on the same root (a store's zstd compressor is not
    thread-safe)."""
    if threading.current_thread() is threading.main_thread():
        return blobs
    stores: dict[tuple[str, bool], BlobStore] = _thread_stores.__dict__.setdefault("stores", {})
    key = (str(blobs.root), blobs.durable)
    store = stores.get(key)
    if store is None:
        store = stores[key] = BlobStore(blobs.root, durable=blobs.durable)
    return store


def fingerprint_chunks(parts: list[memoryview]) -> list[str]:
    """Fingerprints of chunks; a big buffer's second half is done on a writer thread."""
    if len(parts) < 8 or (os.cpu_count() or 1) < 2:
        return [_fingerprint(part) for part in parts]
    half = len(parts) // 2
    rest = _reading_pool().submit(lambda: [_fingerprint(part) for part in parts[half:]])
    return [_fingerprint(part) for part in parts[:half]] + rest.result()


# ---- writing --------------------------------------------------------------------------


def _load_libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):  # not Linux
        return None


_start_writeback = _load_libc_function("sync_file_range")
_SYNC_FILE_RANGE_WRITE = 2


def _begin_writeback(store: BlobStore, digest: str) -> None:
    """Start writing a new chunk to disk now, so the final sync has little left to do."""
    try:
        fd = os.open(store.chunk_file(digest), os.O_RDONLY)
    except OSError:
        return
    try:
        _start_writeback(fd, ctypes.c_longlong(0), ctypes.c_longlong(0), _SYNC_FILE_RANGE_WRITE)
    finally:
        os.close(fd)


#: A chunk's bytes and the size of the items they hold (the store's codec hint).
_Part = tuple[bytes | memoryview, int]


def _put_chunk(blobs: BlobStore, chunk: _Part) -> tuple[str, int]:
    store = _store_for_thread(blobs)
    part, itemsize = chunk
    digest, written = store.put_chunk(part, blake3.blake3(part).hexdigest(), itemsize=itemsize)
    if store is not blobs:
        store.flush()  # a durable store's directory fsyncs happen where it wrote
    if written and not store.durable and _start_writeback is not None:
        _begin_writeback(store, digest)
    return digest, written


class ChunkWriter:
    """Stores byte views as fixed-size chunks, skipping the ones already stored.

    With `defer`, `store` only fingerprints: the chunks the memo does not know are kept as
    views of live memory until `detach` copies them (before the next cell can change them),
    and written by `write_pending`, which fills in their names. Entries returned by `store`
    are complete once it has run.
    """

    def __init__(self, blobs: BlobStore, *, defer: bool = False) -> None:
        self.blobs = blobs
        self.defer = defer
        self.bytes_written = 0
        self._pending: list[tuple[list[str | None], int, str, _Part]] = []
        self._live: list[int] = []  # pending chunks still read from live (mutable) memory
        self._flying: list[str] = []  # fingerprints registered in _in_flight by this writer
        self._awaited: list[tuple[list[str | None], int, str]] = []  # written by another
        self._detaching = threading.Lock()  # the next cell and the write-behind may both copy
        self._refused: LiveBufferChanged | None = None

    def store(self, data: memoryview, itemsize: int = 1) -> dict[str, Any]:
        """Store one byte string; its manifest entry `{"size", "chunks", "fps"}`.

        `itemsize` is the size of the items the bytes hold (8 for float64), a hint for the
        store's codec."""
        view = data.cast("B") if data.format != "B" or data.ndim != 1 else data
        parts = [view[offset : offset + CHUNK_SIZE] for offset in range(0, len(view), CHUNK_SIZE)]
        prints = fingerprint_chunks(parts)
        digests: list[str | None] = [_chunk_memo.get(fingerprint) for fingerprint in prints]
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
            return {"size": len(view), "chunks": digests, "fps": prints}
        missing: dict[str, _Part] = {}
        for part, fingerprint, digest in zip(parts, prints, digests, strict=True):
            if digest is None:
                missing.setdefault(fingerprint, (part, itemsize))
        if missing:
            learned = self._put(list(missing.values()), list(missing))
            digests = [learned.get(f, d) for d, f in zip(digests, prints, strict=True)]
        return {"size": len(view), "chunks": [str(d) for d in digests], "fps": prints}

    def _put(self, parts: list[_Part], prints: list[str]) -> dict[str, str]:
        """Write chunks (two threads for many, unless deferred: a write-behind leaves the
        other core to the kernel's next cell); their names by fingerprint."""
        if not self.defer and len(parts) >= 4 and (os.cpu_count() or 1) > 1:
            results = list(_pool().map(lambda p: _put_chunk(self.blobs, p), parts))
        else:
            results = [_put_chunk(self.blobs, part) for part in parts]
        learned = {}
        for fingerprint, (digest, written) in zip(prints, results, strict=True):
            self.bytes_written += written
            learned[fingerprint] = digest
            _remember_chunk(fingerprint, digest)
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
        """Write what deferred `store` calls kept (`detach` first), and fill in their
        entries' chunk names, also of the chunks an earlier writer wrote (in order, on the
        same write-behind: it has finished); BlobError when that write failed."""
        try:
            self.detach()
            unique: dict[str, _Part] = {}
            for _, _, fingerprint, data in self._pending:
                unique.setdefault(fingerprint, data)
            learned = self._put(list(unique.values()), list(unique)) if unique else {}
            for digests, index, fingerprint, _ in self._pending:
                digests[index] = learned[fingerprint]
            self._pending.clear()
        finally:
            self.release()
        for digests, index, fingerprint in self._awaited:
            digest = _chunk_memo.get(fingerprint)
            if digest is None:
                raise BlobError(
                    "a chunk this checkpoint shares with the one before was not written: "
                    "that checkpoint failed"
                )
            digests[index] = digest
        self._awaited.clear()

    def release(self) -> None:
        """Let go of the chunks this writer registered as in flight (written, failed or
        dropped): a later capture no longer waits for this writer to write them."""
        _land(self._flying)
        self._flying.clear()


_syncfs = _load_libc_function("syncfs")  # None off Linux: write through the durable store
_twins: dict[str, BlobStore] = {}


def write_store(blobs: BlobStore) -> tuple[BlobStore, bool]:
    """The store a capture writes through, and whether it must sync the filesystem after.

    A durable store fsyncs every chunk file, which costs more than the capture itself for a
    big new array (50 chunks, 50 fsyncs). With `syncfs` a capture writes its chunks and its
    manifest without fsync and makes them durable with one filesystem sync before returning:
    the same guarantee when it returns, and a crash in between leaves at worst a manifest
    whose chunks fail their hash check (refused on restore, never registered).
    """
    if not blobs.durable or _syncfs is None:
        return blobs, False
    key = str(blobs.root)
    twin = _twins.get(key)
    if twin is None:
        twin = _twins[key] = BlobStore(blobs.root, durable=False)
    return twin, True


def sync_filesystem(root: Path) -> None:
    """Make everything written under `root` durable with one `syncfs`."""
    fd = os.open(root, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise BlobError(f"could not sync the blob store at {root}: {os.strerror(error)}")
    finally:
        os.close(fd)


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

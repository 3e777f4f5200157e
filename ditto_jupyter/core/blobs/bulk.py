"""The blob store's one write path: chunks and the manifests listing them, committed at once.

`BlobStore.bulk_write()` gives a `BulkWrite`. Its `put_chunk` (safe from any thread) stores
nothing yet: a small chunk waits in memory for the catalogue, a big one is staged in the
chunk storage (a temporary file on local disk). `put_manifest` signs a manifest and waits
too. `commit` then:

1. syncs every staged chunk once (one `syncfs`, or a few fsyncs);
2. in one catalogue transaction, names the staged chunks (renames, create-only), records
   every chunk and manifest and the references between them, and commits durably. A
   manifest stored already is reused, unless a chunk of its closure has no bytes left
   anywhere (a bounded cache evicted it and collection deleted the bucket's copy): then
   the commit fails with BlobNotFound, and the writer stores the chunks' bytes again.

So a manifest is recorded only once every chunk it lists is durable under its name, and a
write that fails at any point (a full disk, a chunk collected meanwhile) leaves the store as
it was: nothing was recorded, the staged files go at once, and names it had published are
taken back unless another writer has recorded them since. Nothing it did needs the grace
period of garbage collection to be undone.

What is stored already is reused without a write: its `touched` is refreshed only when it
is older than `TOUCH_REFRESH_SECONDS` (a tenth of the grace period, so reuse keeps it well
inside the grace), so a commit that reuses everything changes no page and writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ditto_jupyter.core.blobs import codec
from ditto_jupyter.core.blobs.errors import BlobError, BlobNotFound
from ditto_jupyter.core.blobs.index import SMALL_OBJECT_LIMIT, TOUCH_REFRESH_SECONDS, key_of
from ditto_jupyter.core.blobs.storage import ChunkBatch

if TYPE_CHECKING:
    import sqlite3

    from ditto_jupyter.core.blobs.store import BlobStore

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SignedManifest:
    """A manifest ready to record: its id, stored document and what it references."""

    manifest_id: str
    document: bytes
    chunks: list[str]
    children: list[str]


class BulkWrite:
    """Chunks and manifests written together and recorded in one commit (see the module).

    Use it as a context manager: leaving it discards whatever is not committed (after a
    failed `commit` too) and ends the write. `put_chunk` and `has_chunk` may run on several
    threads at once; `put_manifest` and `commit` run after them, on one.
    """

    def __init__(self, store: BlobStore, *, durable: bool | None = None) -> None:
        self._store = store
        self._durable = store.durable if durable is None else durable
        self._lock = threading.Lock()
        self._batch: ChunkBatch | None = None
        self._inline: dict[str, bytes] = {}  # small chunks: name -> stored form
        self._staged: dict[str, int] = {}  # big chunks staged in the batch: name -> size
        self._found: set[str] = set()  # chunks stored already when they were put
        self._manifests: dict[str, SignedManifest] = {}
        self._aborted = False
        #: Bytes the catalogue's log took beyond the data, over this write's commits.
        self.log_overhead = 0

    def __enter__(self) -> BulkWrite:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.abort()

    @property
    def staged_files(self) -> int:
        """Chunks staged in the chunk storage and not committed yet."""
        batch = self._batch
        return len(batch) if batch is not None else 0

    # ---- staging ------------------------------------------------------------------------

    def put_chunk(
        self, data: bytes | memoryview, digest: str | None = None, *, itemsize: int = 1
    ) -> tuple[str, int]:
        """Stage one chunk unless it is stored or staged already; (its name, the bytes it
        adds). `itemsize` is a codec hint (see `codec.encode`)."""
        name = digest or codec.digest(data)
        self._store.chunk_file(name)  # refuses what is not a chunk id
        with self._lock:
            if name in self._inline or name in self._staged or name in self._found:
                return name, 0
        if self._store.has_chunk(name):
            with self._lock:
                self._found.add(name)
            return name, 0
        tag, payload = codec.encode(data, itemsize)
        size = len(tag) + len(payload)
        with self._lock:
            if self._aborted:
                raise BlobError("this blob write was dropped; nothing more can be put in it")
            if name in self._inline or name in self._staged:
                return name, 0
            if size < SMALL_OBJECT_LIMIT:
                self._inline[name] = tag + bytes(payload)
                return name, size
            self._staged[name] = size
            if self._batch is None:
                self._batch = self._store.storage.batch(durable=self._durable)
            batch = self._batch
        try:
            batch.add(name, (tag, payload))
        except BaseException:
            with self._lock:
                self._staged.pop(name, None)
            raise
        return name, size

    def put_stored(self, name: str, stored: bytes) -> str | None:
        """Stage a chunk's stored form as it is (fetched from a replica: a small one checked
        against its name already, a big one at its first read), even when the catalogue
        lists it: the bytes are not here. Returns the file a big chunk is staged in now, which
        may be read until the commit (None: a small chunk, kept in memory until then, or a
        chunk this write has staged already)."""
        self._store.chunk_file(name)  # refuses what is not a chunk id
        with self._lock:
            if self._aborted:
                raise BlobError("this blob write was dropped; nothing more can be put in it")
            if name in self._inline or name in self._staged:
                return None
            if len(stored) < SMALL_OBJECT_LIMIT:
                self._inline[name] = stored
                return None
            self._staged[name] = len(stored)
            if self._batch is None:
                self._batch = self._store.storage.batch(durable=self._durable)
            batch = self._batch
        try:
            batch.add(name, (stored,))
        except BaseException:
            with self._lock:
                self._staged.pop(name, None)
            raise
        return batch.staged(name)

    def has_chunk(self, digest: str) -> bool:
        """Whether the chunk is stored, or staged by this write."""
        with self._lock:
            if digest in self._inline or digest in self._staged or digest in self._found:
                return True
        return self._store.has_chunk(digest)

    def put_manifest(self, body: dict[str, Any]) -> str:
        """Sign a manifest for the commit; its id. Every chunk it lists under "chunks" must
        be stored or staged by then, and every manifest under "manifests" stored or staged
        before it."""
        signed = self._store.sign_manifest(body)
        self._manifests.setdefault(signed.manifest_id, signed)
        return signed.manifest_id

    # ---- committing ---------------------------------------------------------------------

    def commit(self) -> int:
        """Make everything staged durable and record it at once; the bytes of the manifest
        documents it added. `log_overhead` is then what the catalogue's log took beyond
        those and the small chunks held inline (page images of the rows around them, frame
        headers): the data plus it is what the write put on disk. On failure nothing is
        recorded: chunks stay staged (a caller may stage a corrected manifest and commit
        again), manifests are dropped."""
        with self._lock:
            batch, inline, staged = self._batch, dict(self._inline), dict(self._staged)
            found = set(self._found)
        manifests = list(self._manifests.values())
        self._manifests.clear()
        if not (inline or staged or found or manifests):
            return 0
        if batch is not None:
            batch.sync()
        index = self._store.index
        written = 0
        try:
            with index.write(durable=self._durable) as conn:
                if batch is not None:
                    batch.publish()
                now = time.time()
                stale = now - TOUCH_REFRESH_SECONDS
                conn.executemany(
                    "INSERT INTO chunks (digest, refs, touched, size, data) "
                    "VALUES (?, 0, ?, ?, ?) ON CONFLICT (digest) DO UPDATE SET "
                    "touched = excluded.touched, data = coalesce(chunks.data, excluded.data)",
                    [(key_of(n), now, len(d), d) for n, d in inline.items()]
                    + [(key_of(n), now, size, None) for n, size in staged.items()],
                )
                conn.executemany(
                    "UPDATE chunks SET touched = ? WHERE digest = ? AND touched < ?",
                    [(now, key_of(n), stale) for n in found],
                )
                new = set(inline) | set(staged)
                committed = {signed.manifest_id for signed in manifests}
                for signed in manifests:
                    written += self._record(conn, signed, now, new, committed)
            logged = index.last_write_bytes()
            inline_bytes = sum(len(d) for d in inline.values())
            self.log_overhead += max(0, logged - written - inline_bytes)
        except BaseException:
            with self._lock:
                self._found.clear()  # a chunk found stored may be what was collected
            if batch is not None and batch.published:
                self._take_back(batch)
            raise
        with self._lock:
            self._batch = None
            self._inline.clear()
            self._staged.clear()
            self._found.clear()
        if batch is not None:
            batch.close(committed=True)
        return written

    def _record(
        self,
        conn: sqlite3.Connection,
        signed: SignedManifest,
        now: float,
        new: set[str],
        committed: set[str],
    ) -> int:
        """Inside the commit: record one manifest and the references it holds; its bytes
        (0 when it was stored already). A manifest stored already is reused only when the
        bytes of its closure are still somewhere (see `BlobStore.unbacked_chunks`); its
        children in this commit were checked as they were recorded."""
        key = key_of(signed.manifest_id)
        stored = conn.execute("SELECT touched FROM manifests WHERE id = ?", (key,)).fetchone()
        if stored is not None:
            if float(stored[0]) < now - TOUCH_REFRESH_SECONDS:
                conn.execute("UPDATE manifests SET touched = ? WHERE id = ?", (now, key))
            lost = self._store.unbacked_chunks(
                [child for child in signed.children if child not in committed],
                chunks=signed.chunks,
                staged=new,
            )
            if lost:
                raise BlobNotFound(
                    f"manifest {signed.manifest_id} is stored, but chunk {lost[0]} it lists "
                    "is neither on this machine nor known to be in the object store (evicted, "
                    f"then collected there; {len(lost)} such chunk(s)): write its bytes again"
                )
            return 0
        storage = self._store.storage
        for name in signed.chunks:
            found = conn.execute(
                "UPDATE chunks SET refs = refs + 1, touched = ? WHERE digest = ? "
                "RETURNING data IS NULL",
                (now, key_of(name)),
            ).fetchone()
            if found is None or (found[0] and name not in new and not storage.exists(name)):
                raise BlobNotFound(f"manifest references chunk {name}, which is not stored")
        conn.executemany(
            "UPDATE manifests SET refs = refs + 1 WHERE id = ?",
            [(key_of(child),) for child in signed.children],
        )
        conn.execute(
            "INSERT INTO manifests (id, refs, touched, unchecked, document) VALUES (?, 0, ?, 1, ?)",
            (key, now, signed.document),
        )
        return len(signed.document)

    def _take_back(self, batch: ChunkBatch) -> None:
        """After a failed commit: take back the chunk names it published, except those
        another writer has recorded since (in a transaction of their own, so no writer
        can record one in between)."""
        try:
            with self._store.index.write() as conn:
                recorded = {
                    name
                    for name in batch.published
                    if conn.execute(
                        "SELECT 1 FROM chunks WHERE digest = ?", (key_of(name),)
                    ).fetchone()
                }
                batch.unpublish(recorded)
        except BlobError as exc:  # the names stay listed in the batch for gc to clear
            _log.warning("could not take back the chunks of a failed blob write: %s", exc)

    def abort(self) -> None:
        """Discard whatever is not committed (staged files go now), and end the write."""
        with self._lock:
            self._aborted = True
            batch, self._batch = self._batch, None
            self._inline.clear()
            self._staged.clear()
            self._found.clear()
        self._manifests.clear()
        if batch is not None:
            batch.close(committed=False)

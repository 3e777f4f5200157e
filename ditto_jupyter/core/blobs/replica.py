"""The blob store's copy in an object store: upload a manifest's closure, fetch it back.

Bucket layout, under the replica's prefix:

    chunks/<blake3 hex>      a chunk's stored form (codec tag + payload), as on local disk
    manifests/<blake3 hex>   a manifest's signed document, as in the catalogue

Every object is content-addressed and written create-only (`ObjectStore.put_new`), so
uploads of the same object from several threads, retries or servers are harmless. A
manifest is put only after every chunk and child manifest it lists: a manifest in the
bucket vouches for its whole closure, which is what `replicated` means.

`upload` reads a closure from the local store (what this server or its kernels wrote) and
puts what the ledger does not know is there. `fetch` makes a closure local: manifests the
local catalogue lacks are fetched and verified against the deployment's shared signing
secret (a manifest the secret does not sign is refused, so a bucket writer cannot make a
restore load anything), chunks with no local copy are fetched, and everything is recorded
in the local store in one bulk write (without a sync: the bucket holds the durable copy).
Both move chunks on a pool of threads.

A fetch is two steps, `stage` then `StagedFetch.commit`, so that a restore can read what
lands before anything is recorded: `stage` may write an arrival log (`arrivals`) naming
each manifest as it is verified and each chunk as it is staged, in the order the manifests
list them (the order a restore reads them); a kernel restoring meanwhile reads from it.
The fetch is recorded (`commit`) only once that restore is over, or dropped (`abort`),
which leaves the local store as it was.

A fetched chunk is checked against its name once, when it is first read (every read of a
chunk checks it: the kernel's restore, the workspace's copy), not also as it arrives: on
a resume that check is a third of the fetch. A copy that fails it is dropped from this
machine (`BlobStore.checking`), so the next fetch brings it again; small chunks, kept in
the catalogue rather than in files of their own, are checked as they arrive.

Nothing is deleted from the bucket here: with several servers on one bucket only the
shared checkpoint store can say an object is garbage there (`control.bucket_gc`, which
also keeps uploads and fetches in flight from being collected under, and makes the ledger
forget what it deletes).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ditto_jupyter.core.blobs import codec
from ditto_jupyter.core.blobs.arrivals import ArrivalLog
from ditto_jupyter.core.blobs.errors import (
    BlobError,
    BlobNotFound,
    ManifestRefused,
    ManifestSignatureError,
    NotReplicated,
    ObjectMissing,
)
from ditto_jupyter.core.blobs.index import SMALL_OBJECT_LIMIT, key_of
from ditto_jupyter.core.blobs.object_store import ObjectStore, ObjectStoreLocation
from ditto_jupyter.core.blobs.prefix_owner import PrefixOwner
from ditto_jupyter.core.blobs.replica_ledger import ObjectKind, ReplicaLedger
from ditto_jupyter.core.blobs.replicated_chunks import ReplicatedChunks, chunk_key

if TYPE_CHECKING:
    from ditto_jupyter.core.blobs.bulk import BulkWrite
    from ditto_jupyter.core.blobs.store import BlobStore

#: Threads moving chunks to and from the bucket.
WORKERS = 8
_BATCH = 500
_log = logging.getLogger(__name__)


def manifest_key(manifest_id: str) -> str:
    """The key of a manifest in the bucket."""
    return f"manifests/{manifest_id}"


@dataclass
class Transfer:
    """What one upload or fetch moved."""

    chunks: int = 0
    chunk_bytes: int = 0
    manifests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_chunk(self, size: int) -> None:
        """Count one chunk moved (from any thread)."""
        with self._lock:
            self.chunks += 1
            self.chunk_bytes += size


class FetchCancelled(BlobError):
    """A fetch given up by its caller before it was over (nothing of it is recorded)."""


@dataclass
class _Closure:
    """Manifests in upload order (children first) and every chunk they list."""

    manifests: list[str] = field(default_factory=list)
    chunks: dict[str, None] = field(default_factory=dict)
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: A fetch's chunks, each with the manifest that lists it (for a missing one's error).
    listed_by: dict[str, str] = field(default_factory=dict)


class BucketReplica:
    """A blob store's replica in one bucket (see the module)."""

    def __init__(self, store: BlobStore, *, workers: int = WORKERS) -> None:
        storage = store.storage
        if not isinstance(storage, ReplicatedChunks) or storage.bucket is None:
            raise BlobError("a bucket replica needs a blob store on ReplicatedChunks storage")
        self.store = store
        self.storage: ReplicatedChunks = storage
        self.bucket: ObjectStore = storage.bucket
        self.ledger: ReplicaLedger = storage.ledger
        #: This deployment's claim on the prefix, checked before the first request of an
        #: upload, a fetch or a collection (`prefix_owner`).
        self.owner = PrefixOwner(self.bucket, store.key_id())
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="ditto-replica")

    @property
    def location(self) -> ObjectStoreLocation:
        """Where the replica lives."""
        return self.bucket.location

    def close(self) -> None:
        """Stop the transfer threads (after the transfers in progress)."""
        self._pool.shutdown(wait=True)

    # ---- state ------------------------------------------------------------------------

    def replicated(self, manifest_ids: Sequence[str]) -> bool:
        """Whether this server knows every one of these manifests is in the bucket."""
        wanted = set(manifest_ids)
        return not wanted or self.ledger.known(ObjectKind.MANIFEST, wanted) == wanted

    def confirm_in_bucket(self, chunks: Sequence[str]) -> list[str]:
        """Ask the bucket about chunks this server has neither the bytes of nor a record
        that the bucket holds (its ledger forgot at a collection): those the bucket has are
        recorded as there; the ones it lacks, returned, have no bytes anywhere."""
        wanted = list(dict.fromkeys(chunks))
        if wanted:
            self.owner.ensure()
        found = list(self._pool.map(lambda name: self.bucket.exists(chunk_key(name)), wanted))
        present = [name for name, there in zip(wanted, found, strict=True) if there]
        self.ledger.record(ObjectKind.CHUNK, present)
        return [name for name, there in zip(wanted, found, strict=True) if not there]

    # ---- upload -----------------------------------------------------------------------

    def upload(self, manifest_ids: Iterable[str]) -> Transfer:
        """Put these manifests, with everything they list, in the bucket; what it took.

        ObjectStoreUnavailable when the bucket refuses; what was put before that is
        recorded as there, and nothing else.
        """
        moved = Transfer()
        roots = list(dict.fromkeys(manifest_ids))
        roots = [m for m in roots if m not in self.ledger.known(ObjectKind.MANIFEST, roots)]
        if not roots:
            return moved
        self.owner.ensure()
        closure = self._local_closure(roots)
        chunks = list(closure.chunks)
        needed = [c for c in chunks if c not in self.ledger.known(ObjectKind.CHUNK, chunks)]

        def put_chunk(name: str) -> str:
            stored = self.store.stored_chunk(name)
            if self.bucket.put_new(chunk_key(name), stored):
                moved.add_chunk(len(stored))
            return name

        self._run_all(put_chunk, needed, lambda done: self.ledger.record(ObjectKind.CHUNK, done))
        for manifest_id in closure.manifests:
            if self.bucket.put_new(
                manifest_key(manifest_id), self.store.manifest_document(manifest_id)
            ):
                moved.manifests += 1
            self.ledger.record(ObjectKind.MANIFEST, [manifest_id])
        self.storage.cache.use(chunks)
        return moved

    def _local_closure(self, roots: Sequence[str]) -> _Closure:
        """The closure of `roots` in the local store, less manifests known replicated."""
        closure = _Closure()
        seen: set[str] = set()

        def visit(manifest_id: str) -> None:
            if manifest_id in seen:
                return
            seen.add(manifest_id)
            body = self.store.get_manifest(manifest_id)
            children = list(dict.fromkeys(body.get("manifests", [])))
            known = self.ledger.known(ObjectKind.MANIFEST, children) if children else set()
            for child in children:
                if child not in known:
                    visit(child)
            closure.chunks.update(dict.fromkeys(body.get("chunks", [])))
            closure.manifests.append(manifest_id)

        for root in roots:
            visit(root)
        return closure

    # ---- fetch ------------------------------------------------------------------------

    def fetch(self, manifest_ids: Iterable[str], *, replicated: bool = False) -> Transfer:
        """Make these manifests and everything they list local; what was fetched.

        `replicated`: their checkpoint is recorded replicated, so they were in the bucket.
        NotReplicated names a manifest the bucket does not have yet (never replicated
        from the server that took it); ObjectMissing one it had and lost since, or a
        chunk a manifest in the bucket lists that is gone; ManifestRefused a manifest
        that fails its signature or its id; ObjectStoreUnavailable when the bucket
        refuses. Whatever failed, the local store is as it was before.
        """
        staged = self.stage(manifest_ids, replicated=replicated)
        try:
            return staged.commit()
        finally:
            staged.abort()  # nothing left to drop once committed

    def stage(
        self,
        manifest_ids: Iterable[str],
        *,
        log: ArrivalLog | None = None,
        cancelled: threading.Event | None = None,
        replicated: bool = False,
    ) -> StagedFetch:
        """Fetch these manifests and what they list into a bulk write, not yet recorded;
        `log` is told each manifest and chunk as it lands, then `done` or `failed`. Set
        `cancelled` to give the fetch up (FetchCancelled). The errors, and `replicated`,
        are `fetch`'s; on one, nothing stays staged."""
        moved = Transfer()
        roots = list(dict.fromkeys(manifest_ids))
        staged = StagedFetch(self, _Closure(), [], moved)
        try:
            if roots:
                staged.closure = self._remote_closure(roots, moved, log, replicated)
                chunks = list(staged.closure.chunks)
                staged.missing = self._without_local_copy(chunks)
                fetching = set(staged.missing)  # the others are read now: not to be evicted
                self.storage.cache.use([c for c in chunks if c not in fetching])
            if log is not None:
                log.announce(staged.missing)
            if staged.missing or staged.closure.bodies:
                staged.bulk = self.store.bulk_write(durable=False)
                self._stage_chunks(staged, log, cancelled)
            if cancelled is not None and cancelled.is_set():
                raise FetchCancelled("the fetch was given up")
            if log is not None:
                log.done()
        except BaseException as error:
            if log is not None:
                log.failed(error)
            staged.abort()
            raise
        return staged

    def _stage_chunks(
        self, staged: StagedFetch, log: ArrivalLog | None, cancelled: threading.Event | None
    ) -> None:
        """Fetch the chunks `staged` misses into its bulk write on the pool, telling `log`
        as each lands. At the first failure `log` is told at once, and the chunks not
        started yet are not fetched. A chunk the bucket lacks is ObjectMissing: the
        manifest in the bucket that lists it was put after it."""
        bulk, names, moved = staged.bulk, staged.missing, staged.moved
        assert bulk is not None
        listed_by = staged.closure.listed_by
        if names:
            self.owner.ensure()
        stop = cancelled or threading.Event()
        failures: list[BaseException] = []
        lock = threading.Lock()

        def get_chunk(name: str) -> str:
            if stop.is_set():
                raise FetchCancelled("the fetch was given up")
            try:
                try:
                    stored = self.bucket.get(chunk_key(name))
                except BlobNotFound:
                    raise self._missing_chunk(name, listed_by.get(name)) from None
                if len(stored) < SMALL_OBJECT_LIMIT:  # kept inline: checked now
                    codec.decode(name, stored)  # refuses what does not match its name
                file = bulk.put_stored(name, stored)
                if log is not None:
                    log.chunk(name, file=file, stored=None if file else stored)
            except BaseException as error:
                with lock:
                    first = not failures
                    failures.append(error)
                stop.set()
                if first and log is not None:
                    log.failed(error)  # a restore waiting on it learns now, not at the end
                raise
            moved.add_chunk(len(stored))
            return name

        self._run_all(get_chunk, names, lambda done: None)

    def _remote_closure(
        self,
        roots: Sequence[str],
        moved: Transfer,
        log: ArrivalLog | None = None,
        replicated: bool = False,
    ) -> _Closure:
        """The closure of `roots`: local manifests read here, the others fetched and
        verified (kept in `bodies`, to record; told to `log`). `replicated`: the roots
        were in the bucket (so were the children of any manifest fetched from it)."""
        closure = _Closure()
        seen: set[str] = set()

        def visit(manifest_id: str, vouched: bool) -> None:
            if manifest_id in seen:
                return
            seen.add(manifest_id)
            fetched = not self.store.has_manifest(manifest_id)
            if fetched:
                body = self._fetch_manifest(manifest_id, vouched, log)
                closure.bodies[manifest_id] = body
                moved.manifests += 1
            else:
                body = self.store.get_manifest(manifest_id)
            for child in dict.fromkeys(body.get("manifests", [])):
                visit(child, vouched or fetched)
            for chunk in body.get("chunks", []):
                closure.chunks.setdefault(chunk, None)
                closure.listed_by.setdefault(chunk, manifest_id)
            closure.manifests.append(manifest_id)

        for root in roots:
            visit(root, replicated)
        return closure

    def _fetch_manifest(
        self, manifest_id: str, vouched: bool, log: ArrivalLog | None
    ) -> dict[str, Any]:
        """A manifest from the bucket, verified (told to `log`); `vouched`: it was there.
        NotReplicated, ObjectMissing or ManifestRefused, each naming it, otherwise."""
        self.owner.ensure()
        try:
            document = self.bucket.get(manifest_key(manifest_id))
        except BlobNotFound:
            if vouched:
                raise ObjectMissing(
                    f"manifest {manifest_id} is missing from the object store "
                    f"{self.location}: it was there (its checkpoint is recorded replicated, "
                    "or a manifest in the bucket lists it), so it was deleted since, by a "
                    "collector or by hand; no server can restore it from the bucket"
                ) from None
            raise NotReplicated(
                f"manifest {manifest_id} is neither in this server's blob store nor "
                f"in the object store {self.location}: the server that wrote it has "
                "not replicated it (yet)"
            ) from None
        try:
            body = self.store.verified_body(manifest_id, document)
        except ManifestSignatureError as error:
            raise ManifestRefused(
                f"the object store {self.location} holds a manifest {manifest_id} that this "
                f"deployment refuses ({error}): it was damaged or replaced there, or signed "
                "with another deployment's secret; nothing of it was loaded"
            ) from None
        if log is not None:
            log.manifest(manifest_id, document)
        return body

    def _missing_chunk(self, name: str, manifest_id: str | None) -> ObjectMissing:
        """The error of a chunk the bucket lacks though a manifest there lists it."""
        listed = f", which manifest {manifest_id} lists," if manifest_id else ""
        return ObjectMissing(
            f"chunk {name}{listed} is missing from the object store {self.location}, and "
            "this server has no copy: it was deleted from the bucket after it was put there "
            "(a manifest goes up only after all it lists), by a collector or by hand; no "
            "server can restore it from the bucket"
        )

    def _without_local_copy(self, chunks: Sequence[str]) -> list[str]:
        """Those of `chunks` whose bytes are not on this machine (no row, or a file gone)."""
        inline: set[str] = set()
        in_files: set[str] = set()
        for start in range(0, len(chunks), _BATCH):
            batch = chunks[start : start + _BATCH]
            marks = ",".join("?" * len(batch))
            rows = self.store.index.read(
                f"SELECT digest, data IS NULL FROM chunks WHERE digest IN ({marks})",
                tuple(key_of(c) for c in batch),
            )
            for key, in_file in rows:
                assert isinstance(key, bytes)
                (in_files if in_file else inline).add(key.hex())
        return [
            c
            for c in chunks
            if c not in inline and not (c in in_files and self.storage.is_cached(c))
        ]

    # ---- threads ----------------------------------------------------------------------

    def _run_all(
        self,
        work: Callable[[str], str],
        names: Sequence[str],
        record: Callable[[list[str]], None],
    ) -> None:
        """Run `work` on every name on the pool; `record` the ones done, then raise the
        first failure, if any. After a failure no work that has not started yet starts: an
        object store that stops answering fails the whole transfer within one request's
        bound, not one bound per round of the pool's threads."""
        if not names:
            return
        stop = threading.Event()

        def guarded(name: str) -> str:
            if stop.is_set():
                raise _NotStarted(name)
            try:
                return work(name)
            except BaseException:
                stop.set()
                raise

        futures: list[Future[str]] = [self._pool.submit(guarded, name) for name in names]
        done: list[str] = []
        failure: BaseException | None = None
        for future in futures:
            try:
                done.append(future.result())
            except _NotStarted:
                continue
            except BaseException as error:  # the others still finish: record them
                failure = failure or error
        record(done)
        if failure is not None:
            raise failure


class _NotStarted(Exception):
    """A transfer's work left undone because another of its works failed first."""


@dataclass
class StagedFetch:
    """A fetch staged by `BucketReplica.stage`: `commit` records it, `abort` drops it."""

    replica: BucketReplica
    closure: _Closure
    missing: list[str]
    moved: Transfer
    bulk: BulkWrite | None = None

    def commit(self) -> Transfer:
        """Record the fetched manifests and chunks in the local store (in one bulk write)
        and in the ledger; what was fetched. On failure nothing is recorded."""
        replica, bulk = self.replica, self.bulk
        if bulk is not None:
            for manifest_id in self.closure.manifests:  # children before parents
                body = self.closure.bodies.get(manifest_id)
                if body is not None:
                    bulk.put_manifest(body)
            bulk.commit()
            self.bulk = None
            bulk.abort()  # ends the write (nothing is left staged)
            replica.ledger.record(ObjectKind.CHUNK, self.missing)
            replica.ledger.record(ObjectKind.MANIFEST, self.closure.bodies)
        replica.storage.cache.use(self.missing)
        return self.moved

    def abort(self) -> None:
        """Drop what is staged and not committed: the local store stays as it was."""
        bulk, self.bulk = self.bulk, None
        if bulk is not None:
            bulk.abort()

"""`BlobStore`: content-addressed chunks and signed manifests, one object per root.

It ties the parts of the package together: the catalogue (`index`), the chunk storage
(`storage`, local disk unless told otherwise), the codecs (`codec`), the one write path
(`bulk`), garbage collection (`gc`) and the import of the old layout (`legacy`). Every
write goes through a `BulkWrite`; `put_chunk`, `put_bytes` and `put_manifest` are bulk
writes of their own. One store serves every thread of a process.

The store `reading_arrivals(log)` gives waits for a manifest or chunk it lacks in the
arrival log of a fetch still under way (`arrivals`): a kernel restores a checkpoint while
its server fetches it from the object store.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import hmac
import logging
import os
import secrets
import threading
import weakref
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import zstandard

from ditto_jupyter.core.blobs import codec
from ditto_jupyter.core.blobs.arrivals import Arrivals
from ditto_jupyter.core.blobs.bulk import BulkWrite, SignedManifest
from ditto_jupyter.core.blobs.codec import CHUNK_SIZE, CODEC_RAW, CODEC_ZSTD, MIN_GAIN
from ditto_jupyter.core.blobs.errors import (
    BlobError,
    BlobIntegrityError,
    BlobNotFound,
    ManifestSignatureError,
    os_failure,
    place_of,
)
from ditto_jupyter.core.blobs.gc import GcReport, ReferenceCheck, collect
from ditto_jupyter.core.blobs.index import INDEX_FILE, ObjectIndex, hex_of, key_of
from ditto_jupyter.core.blobs.legacy import import_legacy_layout
from ditto_jupyter.core.blobs.local_disk import LocalDiskChunks
from ditto_jupyter.core.blobs.replica_ledger import open_ledger
from ditto_jupyter.core.blobs.replicated_chunks import ReplicatedChunks
from ditto_jupyter.core.blobs.storage import ChunkStorage
from ditto_jupyter.core.private import private_dir

#: The `kind` of a kernel-namespace manifest (a checkpoint's variables).
NAMESPACE_MANIFEST_KIND = "kernel-namespace"
#: Default grace period of garbage collection: anything written or reused this recently
#: is kept, so a capture that has written its blobs but is not recorded yet is safe.
GRACE_SECONDS = 600.0
#: Manifests documents this big or bigger are stored zstd-compressed when that helps.
MANIFEST_COMPRESS_MIN = 1024
_HEX = frozenset("0123456789abcdef")
#: Ids asked about in one `IN (...)` (well below SQLite's limit of variables).
_BATCH = 500
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredBytes:
    """Chunks that hold one byte string, and how many new bytes storing it wrote."""

    chunks: list[str]
    size: int
    bytes_written: int


def parsed_document(document: bytes) -> Any:
    """What a stored manifest document holds, trusting nothing (None: not JSON). Only
    `verified_body` makes a body of it that may be loaded."""
    try:
        if document[:1] == CODEC_ZSTD:
            document = zstandard.ZstdDecompressor().decompress(document[1:])
        return orjson.loads(document)
    except (orjson.JSONDecodeError, zstandard.ZstdError):
        return None


def _canonical(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _is_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


class BlobStore:
    """Content-addressed chunks and signed manifests in one directory."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        durable: bool = True,
        create_secret: bool = True,
        storage: ChunkStorage | None = None,
    ) -> None:
        """Open (or create) the store in `root`; with `create_secret=False` a store with no
        secret is a BlobError instead of getting a new one (`ditto doctor` only reads).
        `storage` is where big chunks live (the local disk under `root` by default)."""
        self.root = Path(root)
        self.place = place_of(self.root)
        self._create_secret = create_secret
        self.durable = durable
        self._legacy_manifests = self.root / "manifests"
        self._tmp = self.root / "tmp"
        try:
            private_dir(self.root)
        except OSError as exc:
            raise os_failure(exc, self.place, f"creating {self.root}") from None
        self.storage: ChunkStorage = storage or default_storage(self.root, self.place)
        self._secret = self._load_or_create_secret()
        self._arrivals: Arrivals | None = None  # a fetch under way this reader waits for
        self.index = _shared_index(self.root / INDEX_FILE)
        if self._legacy_manifests.is_dir():
            import_legacy_layout(self)

    # ---- secret ---------------------------------------------------------------------

    def _load_or_create_secret(self) -> bytes:
        # The key is written whole to a private temp file, then hard-linked into place:
        # link() fails if the name exists, so racing processes agree on one key and no
        # reader ever sees a half-written one.
        path = self.root / "secret"
        if not path.exists() and not self._create_secret:
            raise BlobError(f"the store secret {path} is missing; no manifest can be verified")
        try:
            if not path.exists():
                self._create_secret_file(path)
            data = path.read_bytes()
        except OSError as exc:
            raise os_failure(exc, self.place, "reading the store secret") from None
        if len(data) != 32:
            raise BlobError(f"the store secret {path} is damaged ({len(data)} bytes, not 32)")
        if path.stat().st_mode & 0o077:  # loosened by hand or a copy: make it private again
            try:
                os.chmod(path, 0o600)
            except PermissionError as exc:
                _log.warning("could not make the store secret %s private: %s", path, exc)
        return data

    def _create_secret_file(self, path: Path) -> None:
        self._tmp.mkdir(exist_ok=True)
        name = self._tmp / f".{secrets.token_hex(8)}.tmp"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(32))
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):  # another process made it first
                os.link(name, path)
                fd_dir = os.open(self.root, os.O_RDONLY)
                try:
                    os.fsync(fd_dir)
                finally:
                    os.close(fd_dir)
        finally:
            os.unlink(name)

    # ---- writing --------------------------------------------------------------------

    def bulk_write(self, *, durable: bool | None = None) -> BulkWrite:
        """A new bulk write: stage chunks and manifests, then `commit` them at once;
        `durable=False` skips the syncs (what it writes has a durable copy elsewhere)."""
        return BulkWrite(self, durable=durable)

    def put_chunk(
        self, data: bytes | memoryview, digest: str | None = None, *, itemsize: int = 1
    ) -> tuple[str, int]:
        """Store one chunk unless it is already there; return (digest, bytes written).

        A chunk already stored gets a fresh `touched`, so garbage collection's grace period
        covers reuse too. `itemsize` (2, 4 or 8: the chunk holds numbers of that size) lets
        a chunk that zstd alone does not shrink be stored byte-shuffled (`CODEC_SHUFFLE`);
        its name stays the hash of `data` either way.
        """
        with self.bulk_write() as bulk:
            result = bulk.put_chunk(data, digest, itemsize=itemsize)
            bulk.commit()
        return result

    def put_bytes(self, data: bytes | memoryview, chunk_size: int = CHUNK_SIZE) -> StoredBytes:
        """Split `data` into fixed-size chunks and store the ones not yet present."""
        view = memoryview(data).cast("B")
        chunks: list[str] = []
        written = 0
        with self.bulk_write() as bulk:
            for offset in range(0, len(view), chunk_size):
                digest, n = bulk.put_chunk(view[offset : offset + chunk_size])
                chunks.append(digest)
                written += n
            bulk.commit()
        return StoredBytes(chunks=chunks, size=len(view), bytes_written=written)

    def put_manifest(self, body: dict[str, Any]) -> tuple[str, int]:
        """Sign and store a manifest; return (id, bytes written: 0 when it was stored).

        In one transaction with the manifest, each chunk it lists (and each child manifest
        it lists under "manifests") gains a reference; a chunk that is not stored refuses
        the manifest (BlobNotFound) and nothing changes.
        """
        with self.bulk_write() as bulk:
            manifest_id = bulk.put_manifest(body)
            written = bulk.commit()
        return manifest_id, written

    def sign_manifest(self, body: dict[str, Any]) -> SignedManifest:
        """A manifest's id and signed (maybe compressed) document, checked for what it
        must list: chunk ids under "chunks", manifest ids under "manifests"."""
        listed = body.get("chunks", [])
        if not isinstance(listed, list):
            raise BlobError("a manifest's 'chunks' must be a list of chunk ids")
        children = body.get("manifests", [])
        if not isinstance(children, list) or not all(_is_id(child) for child in children):
            raise BlobError("a manifest's 'manifests' must be a list of manifest ids")
        chunk_ids = list(dict.fromkeys(listed))
        for digest in chunk_ids:
            self.chunk_file(digest)  # refuses what is not a chunk id
        canonical = _canonical(body)
        document = orjson.dumps({"body": body, "signature": self._sign(canonical)})
        if len(document) >= MANIFEST_COMPRESS_MIN:
            compressed = codec.compressor().compress(document)
            if len(compressed) + 1 < len(document) * MIN_GAIN:
                document = CODEC_ZSTD + compressed
        return SignedManifest(
            manifest_id=self.digest(canonical),
            document=document,
            chunks=chunk_ids,
            children=list(dict.fromkeys(children)),
        )

    # ---- chunks ---------------------------------------------------------------------

    @staticmethod
    def digest(data: bytes | memoryview) -> str:
        """The BLAKE3 hex name of a chunk's content."""
        return codec.digest(data)

    def chunk_file(self, digest: str) -> str:
        """Where a big chunk's stored form (one codec byte, then the payload) is on this
        machine's disk, when it is; refuses what is not a chunk id (BlobNotFound)."""
        if not _is_id(digest):
            raise BlobNotFound(f"{digest!r} is not a chunk id")
        return self.storage.local_path(digest)

    def has_chunk(self, digest: str) -> bool:
        """Whether the chunk is stored."""
        self.chunk_file(digest)
        rows = self.index.read(
            "SELECT data IS NULL FROM chunks WHERE digest = ?", (key_of(digest),)
        )
        return bool(rows) and (not rows[0][0] or self.storage.exists(digest))

    def unbacked_chunks(
        self,
        manifest_ids: Iterable[str] = (),
        *,
        chunks: Iterable[str] = (),
        staged: Collection[str] = (),
    ) -> list[str]:
        """Chunks listed by these stored manifests' closures (and `chunks`) whose bytes
        are nowhere this store can vouch for: no row, or a file neither on this machine nor
        known by the storage to be elsewhere. `staged` chunks count as present.

        A stored manifest proves its chunks exist only on storage that never lets them go
        (`ChunkStorage.evicts`, always [] there). On a bounded cache a chunk the bucket
        held may be evicted, then collected from the bucket while a manifest no checkpoint
        references still lists it here: reusing that manifest would name bytes that exist
        nowhere. Runs inside or outside a write transaction of this thread.
        """
        if not self.storage.evicts:
            return []
        listed: dict[str, None] = dict.fromkeys(chunks)
        seen: set[str] = set()
        pending = list(manifest_ids)
        while pending:
            manifest_id = pending.pop()
            if manifest_id in seen:
                continue
            seen.add(manifest_id)
            body = self.get_manifest(manifest_id)
            listed.update(dict.fromkeys(body.get("chunks", [])))
            pending.extend(body.get("manifests", []))
        names = [name for name in listed if name not in staged]
        in_files: set[str] = set()
        rowed: set[str] = set()
        for start in range(0, len(names), _BATCH):
            batch = names[start : start + _BATCH]
            marks = ",".join("?" * len(batch))
            for key, in_file in self.index.read(
                f"SELECT digest, data IS NULL FROM chunks WHERE digest IN ({marks})",
                tuple(key_of(name) for name in batch),
            ):
                assert isinstance(key, bytes)
                rowed.add(hex_of(key))
                if in_file:
                    in_files.add(hex_of(key))
        return [
            name
            for name in names
            if name not in rowed or (name in in_files and not self.storage.exists(name))
        ]

    def stored_chunk(self, digest: str) -> bytes:
        """A chunk's stored form (codec tag + payload), from the catalogue or the storage,
        or else (`reading_arrivals`) from a fetch under way, once it has landed."""
        self.chunk_file(digest)
        rows = self.index.read("SELECT data FROM chunks WHERE digest = ?", (key_of(digest),))
        if rows and isinstance(rows[0][0], bytes):
            return rows[0][0]
        arrivals = self._arrivals
        if arrivals is not None and not os.path.exists(self.storage.local_path(digest)):
            stored = arrivals.chunk(digest)  # before the storage reads through to a bucket
            if stored is not None:
                return stored
        return self.storage.get(digest)

    @contextlib.contextmanager
    def reading_arrivals(self, log: str | None) -> Iterator[BlobStore]:
        """This store, seen by a reader that waits for what it lacks in the arrival log
        `log` of a fetch under way (None: this store as it is). A manifest or chunk missing
        here is read from the log once it has landed; it is `FetchFailed` when that fetch
        fails first, BlobNotFound when it does not bring it. Only the store given waits:
        every other user of this one (the fetch itself) sees the store as it is."""
        if log is None:
            yield self
            return
        reader = copy.copy(self)  # the same catalogue, storage and secret
        reader._arrivals = arrivals = Arrivals(log)
        try:
            yield reader
        finally:
            arrivals.close()

    def get_chunk(self, digest: str) -> bytes:
        """Read one chunk and check its content against its name."""
        with self.checking(digest):
            return codec.decode(digest, self.stored_chunk(digest))

    @contextlib.contextmanager
    def checking(self, digest: str) -> Iterator[None]:
        """Around a read of one chunk: when its local copy fails its check and another copy
        exists (a fetched chunk is checked here, at its first read, not as it arrives), the
        bad copy is dropped, so that reading or fetching again brings a good one."""
        try:
            yield
        except BlobIntegrityError as error:
            if not self.storage.drop_corrupt(digest):
                raise
            _log.warning("ditto: dropped this server's copy of chunk %s: %s", digest, error)
            raise BlobIntegrityError(
                f"{error}; this machine's copy was dropped, and the next restore fetches it "
                "again from the object store"
            ) from None

    def read_chunk_into(self, digest: str, target: memoryview) -> None:
        """Read one chunk straight into `target` (exactly its size), checking its name.

        A raw chunk file is read with one `readinto`, without an intermediate copy;
        shuffled chunks are decompressed and unshuffled into `target`; the others are
        decoded as `get_chunk` does, then copied.
        """
        with self.checking(digest):
            self._read_chunk_into(digest, target)

    def _read_chunk_into(self, digest: str, target: memoryview) -> None:
        stored: bytes | None = None
        try:
            with open(self.chunk_file(digest), "rb", buffering=0) as handle:
                tag = handle.read(1)
                if tag == CODEC_RAW:
                    count = handle.readinto(target)
                    if count != len(target) or handle.read(1):
                        raise BlobIntegrityError(f"chunk {digest} has the wrong length")
                    codec.check(digest, target)
                    return
                stored = tag + handle.readall()  # the same file, not opened a second time
        except FileNotFoundError:  # not a file of its own: a small chunk, in the catalogue
            stored = self.stored_chunk(digest)
        except OSError as exc:
            raise os_failure(exc, self.place, f"reading chunk {digest}") from None
        codec.decode_into(digest, stored, target)

    def get_bytes(self, chunks: Iterable[str]) -> bytes:
        """Concatenate chunks back into the byte string they were split from."""
        return b"".join(self.get_chunk(digest) for digest in chunks)

    def iter_chunks(self) -> Iterator[tuple[str, int]]:
        """Every stored chunk with its stored size."""
        for key, size in self.index.read("SELECT digest, size FROM chunks"):
            assert isinstance(key, bytes) and isinstance(size, int)
            yield hex_of(key), size

    def stored_bytes(self) -> int:
        """Bytes taken by chunks (their stored form: codec tag + payload)."""
        (total,) = self.index.read("SELECT coalesce(sum(size), 0) FROM chunks")[0]
        return total if isinstance(total, int) else 0

    def manifest_bytes(self) -> int:
        """Bytes taken by manifest documents."""
        (total,) = self.index.read("SELECT coalesce(sum(length(document)), 0) FROM manifests")[0]
        return total if isinstance(total, int) else 0

    # ---- manifests ------------------------------------------------------------------

    def _sign(self, canonical: bytes) -> str:
        return hmac.new(self._secret, canonical, hashlib.sha256).hexdigest()

    def key_id(self) -> str:
        """A name of the signing key that does not reveal it: the same on every store
        that has this key, and on no other (an HMAC of a fixed label under the key)."""
        return hmac.new(self._secret, b"ditto-jupyter key id", hashlib.sha256).hexdigest()[:32]

    def legacy_manifest_file(self, manifest_id: str) -> Path:
        """Where the old layout kept a manifest (read when the index does not have it)."""
        if not _is_id(manifest_id):
            raise BlobNotFound(f"{manifest_id!r} is not a manifest id")
        return self._legacy_manifests / f"{manifest_id}.json"

    def manifest_document(self, manifest_id: str) -> bytes:
        """A manifest's stored document, from the index or the old layout's file."""
        key = key_of(manifest_id) if _is_id(manifest_id) else b""
        rows = self.index.read("SELECT document FROM manifests WHERE id = ?", (key,)) if key else []
        if rows:
            document = rows[0][0]
            assert isinstance(document, bytes)
            return document
        try:
            return self.legacy_manifest_file(manifest_id).read_bytes()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise os_failure(exc, self.place, f"reading manifest {manifest_id}") from None
        document = self._arrivals.manifest_document(manifest_id) if self._arrivals else None
        if document is not None:
            return document
        raise BlobNotFound(f"manifest {manifest_id} is missing from the blob store")

    def has_manifest(self, manifest_id: str) -> bool:
        """Whether the manifest is stored."""
        try:
            self.manifest_document(manifest_id)
        except BlobNotFound:
            return False
        return True

    def get_manifest(self, manifest_id: str) -> dict[str, Any]:
        """Load a manifest, refusing it when its signature or id does not match."""
        return self.verified_body(manifest_id, self.manifest_document(manifest_id))

    def verified_body(self, manifest_id: str, document: bytes) -> dict[str, Any]:
        """The body of a stored manifest document, if its signature and id check."""
        parsed = parsed_document(document)
        if parsed is None:
            raise ManifestSignatureError(f"manifest {manifest_id} is not valid JSON")
        if not isinstance(parsed, dict):
            raise ManifestSignatureError(f"manifest {manifest_id} is malformed")
        body, signature = parsed.get("body"), parsed.get("signature")
        if not isinstance(body, dict) or not isinstance(signature, str):
            raise ManifestSignatureError(f"manifest {manifest_id} is malformed")
        canonical = _canonical(body)
        if not hmac.compare_digest(self._sign(canonical), signature):
            raise ManifestSignatureError(
                f"manifest {manifest_id} fails its signature check; refusing to load it"
            )
        if self.digest(canonical) != manifest_id:
            raise ManifestSignatureError(f"manifest {manifest_id} does not match its id")
        return body

    def delete_manifest(self, manifest_id: str) -> bool:
        """Remove a manifest and give back its references; False if it was not stored.

        Its chunks are freed by a later collection once nothing else lists them. A manifest
        whose signature fails gives nothing back (its chunks stay: never trust it to name
        what may be freed).
        """
        key = key_of(manifest_id) if _is_id(manifest_id) else b""
        with self.index.write() as conn:
            row = conn.execute(
                "DELETE FROM manifests WHERE id = ? RETURNING document", (key,)
            ).fetchone()
            if row is not None:
                self.release_references(conn, manifest_id, row[0])
                return True
        try:
            self.legacy_manifest_file(manifest_id).unlink()
        except FileNotFoundError:
            return False
        return True

    def release_references(self, conn: Any, manifest_id: str, document: bytes) -> None:
        """Inside a write transaction: drop the references a removed manifest held."""
        try:
            body = self.verified_body(manifest_id, document)
        except ManifestSignatureError as exc:
            _log.warning("kept what manifest %s lists: %s", manifest_id, exc)
            return
        chunks, children = body.get("chunks", []), body.get("manifests", [])
        conn.executemany(
            "UPDATE chunks SET refs = refs - 1 WHERE digest = ? AND refs > 0",
            [(key_of(digest),) for digest in dict.fromkeys(chunks) if _is_id(digest)],
        )
        conn.executemany(
            "UPDATE manifests SET refs = refs - 1, unchecked = (refs = 1) OR unchecked "
            "WHERE id = ? AND refs > 0",
            [(key_of(child),) for child in dict.fromkeys(children) if _is_id(child)],
        )

    def iter_manifests(self) -> Iterator[str]:
        """Ids of every stored manifest."""
        for (key,) in self.index.read("SELECT id FROM manifests"):
            assert isinstance(key, bytes)
            yield hex_of(key)

    # ---- references -----------------------------------------------------------------

    def mark_referenced(self, manifest_ids: Iterable[str]) -> None:
        """Record that checkpoints reference these manifests: collections skip them.

        Only a hint: a manifest never marked is checked against the store by the next
        collection instead.
        """
        keys = [(key_of(m),) for m in dict.fromkeys(manifest_ids) if _is_id(m)]
        if keys:  # those marked already are left as they are: no page written for them
            with self.index.write() as conn:
                conn.executemany(
                    "UPDATE manifests SET unchecked = 0 WHERE id = ? AND unchecked != 0", keys
                )

    def mark_for_collection(self, manifest_ids: Iterable[str]) -> None:
        """Record that references to these manifests may have gone away: the next
        collection checks them again (and frees them if nothing references them)."""
        keys = [(key_of(m),) for m in dict.fromkeys(manifest_ids) if _is_id(m)]
        if keys:
            with self.index.write() as conn:
                conn.executemany("UPDATE manifests SET unchecked = 1 WHERE id = ?", keys)

    # ---- garbage collection ---------------------------------------------------------

    def gc(self, referenced: ReferenceCheck, *, grace_seconds: float = GRACE_SECONDS) -> GcReport:
        """Free manifests and chunks nothing references (see `gc.collect`)."""
        return collect(self, referenced, grace_seconds=grace_seconds)

    def clear_stale_temp_files(self, cutoff: float) -> None:
        """Clear what writers that died before `cutoff` left: loose temp files in tmp/, and
        each stale batch of the chunk storage with the chunks it named but never recorded."""
        for stale in self.storage.stale_batches(cutoff):
            names = [n for n in dict.fromkeys(stale.names) if _is_id(n)]
            if names:
                with self.index.write() as conn:
                    for name in names:
                        recorded = conn.execute(
                            "SELECT 1 FROM chunks WHERE digest = ?", (key_of(name),)
                        ).fetchone()
                        if recorded is None and self.storage.delete(name):
                            _log.info("removed chunk %s, named by a writer that died", name)
            stale.remove()
        for path in list(self._tmp.iterdir()):
            if path.is_dir():
                continue
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
            except FileNotFoundError:  # removed meanwhile by its writer
                continue


def default_storage(root: Path, place: str) -> ChunkStorage:
    """The chunk storage of a store opened with none given: the local disk, seen through
    the replica's ledger when its server replicates the store to an object store (so a
    kernel's capture counts evicted chunks that are safe in the bucket as stored)."""
    local = LocalDiskChunks(root, place=place)
    ledger = open_ledger(root)
    return local if ledger is None else ReplicatedChunks(local, ledger)


_indexes: weakref.WeakValueDictionary[Path, ObjectIndex] = weakref.WeakValueDictionary()
_indexes_lock = threading.Lock()


def _shared_index(path: Path) -> ObjectIndex:
    """One ObjectIndex per file and process: every BlobStore on a root shares it."""
    resolved = path.resolve()
    with _indexes_lock:
        index = _indexes.get(resolved)
        if index is None or not resolved.exists():
            index = _indexes[resolved] = ObjectIndex(resolved)
        return index

"""Content-addressed blob store: BLAKE3 chunks, zstd where it helps, signed manifests.

Layout under `root` (mode 0700, see `core.private`):
  objects.db               the object index (SQLite, see `blob_index`): every manifest and
                           every small chunk inline, and the reference counts of all chunks
  chunks/ab/<blake3 hex>   a large chunk (stored size of SMALL_OBJECT_LIMIT or more): a
                           one-byte codec tag (b"R" raw, b"Z" zstd) + payload, or b"S",
                           one byte holding an item size, and a zstd frame of the chunk's
                           bytes shuffled by that item size (`blob_shuffle`)
  secret                   the per-store HMAC key, mode 0600, created on first use
  tmp/                     staging for atomic writes (temp + fsync + rename)

A manifest is stored as `{"body": ..., "signature": HMAC-SHA256(secret, canonical body)}`
as JSON or, for a document of 1 KiB or more that zstd shrinks by 15%, as b"Z" + one zstd
frame of that JSON; its id is the BLAKE3 hash of the canonical body. A manifest body is any
JSON object; it must list every chunk it references under `"chunks"` and may list child
manifests under `"manifests"`. Storing a manifest counts a reference on each of them in the
same transaction, and deleting one gives them back, so garbage collection never has to read
a live manifest: it visits unreferenced chunks and manifests nobody has vouched for
(`mark_referenced`), and its cost follows the garbage, not the store. Several processes
(the server and its kernels) may share one store: the index serializes their writes, and
chunk files are atomic renames of content-addressed names, so racing writers agree.

A body names its `"kind"`. A checkpoint's variables are a `NAMESPACE_MANIFEST_KIND` manifest
whose signed body also names the runtime it was captured for (`"runtime_id"`; manifests
written before that field lack it).

A store written by an older release (one file per manifest under `manifests/`, every
chunk a file) is imported into the index the first time it is opened (`blob_legacy`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import orjson
import zstandard

from ditto_jupyter.core.blob_errors import (
    BlobError,
    BlobIntegrityError,
    BlobNotFound,
    ManifestSignatureError,
)
from ditto_jupyter.core.blob_gc import GcReport, ReferenceCheck, collect
from ditto_jupyter.core.blob_index import (
    INDEX_FILE,
    SMALL_OBJECT_LIMIT,
    ObjectIndex,
    hex_of,
    key_of,
)
from ditto_jupyter.core.blob_legacy import import_legacy_layout
from ditto_jupyter.core.blob_shuffle import CODEC_SHUFFLE, shuffled_form, unshuffle, unshuffle_into
from ditto_jupyter.core.private import private_dir

__all__ = [
    "CHUNK_SIZE",
    "CODEC_RAW",
    "CODEC_SHUFFLE",
    "CODEC_ZSTD",
    "GRACE_SECONDS",
    "MANIFEST_COMPRESS_MIN",
    "NAMESPACE_MANIFEST_KIND",
    "SMALL_OBJECT_LIMIT",
    "BlobError",
    "BlobIntegrityError",
    "BlobNotFound",
    "BlobStore",
    "GcReport",
    "ManifestSignatureError",
    "ReferenceCheck",
    "StoredBytes",
]

CHUNK_SIZE = 1 << 20
#: Codec tag (the first byte of a chunk file) of a chunk stored as is.
CODEC_RAW = b"R"
#: Codec tag of a chunk stored as one zstd frame (when that saves at least 15%).
CODEC_ZSTD = b"Z"
#: The `kind` of a kernel-namespace manifest (a checkpoint's variables).
NAMESPACE_MANIFEST_KIND = "kernel-namespace"
#: Default grace period of garbage collection: anything written or reused this recently
#: is kept, so a capture that has written its blobs but is not recorded yet is safe.
GRACE_SECONDS = 600.0
_HEX = frozenset("0123456789abcdef")
_SAMPLE = 64 * 1024
_MIN_GAIN = 0.85
#: Manifest documents this big or bigger are stored zstd-compressed when that helps.
MANIFEST_COMPRESS_MIN = 1024


@dataclass(frozen=True)
class StoredBytes:
    """Chunks that hold one byte string, and how many new bytes storing it wrote."""

    chunks: list[str]
    size: int
    bytes_written: int


def _canonical(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and _HEX.issuperset(value)


class BlobStore:
    """Content-addressed chunks and signed manifests in one directory."""

    def __init__(
        self, root: str | os.PathLike[str], *, durable: bool = True, create_secret: bool = True
    ) -> None:
        """Open (or create) the store in `root`; with `create_secret=False` a store with no
        secret is a BlobError instead of getting a new one (`ditto doctor` only reads)."""
        self.root = Path(root)
        self._create_secret = create_secret
        self.durable = durable
        self._chunks = self.root / "chunks"
        self._chunks_dir = str(self._chunks)
        self._legacy_manifests = self.root / "manifests"
        self._tmp = self.root / "tmp"
        private_dir(self.root)
        for folder in (self._chunks, self._tmp):
            folder.mkdir(parents=True, exist_ok=True)
        self._secret = self._load_or_create_secret()
        self._dirty_dirs: set[Path] = set()
        self._dirty_lock = threading.Lock()
        self._local = threading.local()  # zstd compressors must not be shared by threads
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
        if not path.exists():
            fd, tmp = _mkstemp(self._tmp)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(secrets.token_bytes(32))
                    handle.flush()
                    os.fsync(handle.fileno())
                with contextlib.suppress(FileExistsError):
                    os.link(tmp, path)
                    _fsync_dir(self.root)
            finally:
                os.unlink(tmp)
        data = path.read_bytes()
        if len(data) != 32:
            raise BlobError(f"the store secret {path} is damaged ({len(data)} bytes, not 32)")
        if path.stat().st_mode & 0o077:  # loosened by hand or a copy: make it private again
            with contextlib.suppress(PermissionError):
                os.chmod(path, 0o600)
        return data

    # ---- atomic writes --------------------------------------------------------------

    def _write_atomic(self, target: Path, parts: Iterable[bytes | memoryview]) -> None:
        fd, tmp = _mkstemp(self._tmp)
        try:
            with os.fdopen(fd, "wb") as handle:
                for part in parts:
                    handle.write(part)
                handle.flush()
                if self.durable:
                    os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        with self._dirty_lock:
            self._dirty_dirs.add(target.parent)

    def flush(self) -> None:
        """Make every rename so far durable (fsync the directories touched)."""
        with self._dirty_lock:
            folders, self._dirty_dirs = sorted(self._dirty_dirs), set()
        if self.durable:
            for folder in folders:
                _fsync_dir(folder)

    def _compressor(self) -> zstandard.ZstdCompressor:
        compressor: zstandard.ZstdCompressor | None = getattr(self._local, "zstd", None)
        if compressor is None:
            compressor = self._local.zstd = zstandard.ZstdCompressor(level=3)
        return compressor

    # ---- chunks ---------------------------------------------------------------------

    @staticmethod
    def digest(data: bytes | memoryview) -> str:
        """The BLAKE3 hex name of a chunk's content."""
        return blake3.blake3(data).hexdigest()

    def chunk_file(self, digest: str) -> str:
        """Where a large chunk lives on disk (one codec byte, then the payload)."""
        if not _is_id(digest):
            raise BlobNotFound(f"{digest!r} is not a chunk id")
        return os.path.join(self._chunks_dir, digest[:2], digest)

    def _chunk_path(self, digest: str) -> Path:
        return Path(self.chunk_file(digest))

    def has_chunk(self, digest: str) -> bool:
        """Whether the chunk is stored."""
        path = self.chunk_file(digest)
        key = key_of(digest)
        rows = self.index.read("SELECT data IS NULL FROM chunks WHERE digest = ?", (key,))
        return bool(rows) and (not rows[0][0] or os.path.exists(path))

    def put_chunk(
        self, data: bytes | memoryview, digest: str | None = None, *, itemsize: int = 1
    ) -> tuple[str, int]:
        """Store one chunk unless it is already there; return (digest, bytes written).

        A chunk already stored gets a fresh `touched`, so garbage collection's grace period
        covers reuse too. `itemsize` (2, 4 or 8: the chunk holds numbers of that size) lets
        a chunk that zstd alone does not shrink be stored byte-shuffled (`CODEC_SHUFFLE`);
        its name stays the hash of `data` either way.
        """
        digest = digest or self.digest(data)
        path = self.chunk_file(digest)
        key = key_of(digest)
        now = time.time()
        with self.index.write() as conn:
            found = conn.execute(
                "UPDATE chunks SET touched = ? WHERE digest = ? RETURNING data IS NULL",
                (now, key),
            ).fetchone()
        if found is not None and (not found[0] or os.path.exists(path)):
            return digest, 0
        tag, payload = self._encoded(data, itemsize)
        size = len(payload) + len(tag)
        inline: bytes | None = None
        if size < SMALL_OBJECT_LIMIT:
            inline = tag + bytes(payload)
        else:
            Path(path).parent.mkdir(exist_ok=True)
            self._write_atomic(Path(path), (tag, payload))
        with self.index.write() as conn:
            conn.execute(
                "INSERT INTO chunks (digest, refs, touched, size, data) VALUES (?, 0, ?, ?, ?) "
                "ON CONFLICT (digest) DO UPDATE SET touched = excluded.touched, "
                "data = coalesce(chunks.data, excluded.data)",
                (key, now, size, inline),
            )
        return digest, size

    def _encoded(self, data: bytes | memoryview, itemsize: int) -> tuple[bytes, bytes | memoryview]:
        """How to store a chunk: (codec tag and header, payload)."""
        if len(data) < 512:
            return CODEC_RAW, data
        sample = bytes(data[:_SAMPLE])
        compressor = self._compressor()
        if len(compressor.compress(sample)) < len(sample) * _MIN_GAIN:
            compressed = compressor.compress(bytes(data))
            if len(compressed) < len(data) * _MIN_GAIN:
                return CODEC_ZSTD, compressed
        return shuffled_form(data, sample, itemsize) or (CODEC_RAW, data)

    def _stored_chunk(self, digest: str) -> bytes:
        """A chunk's stored form (codec tag + payload), from its file or the index."""
        try:
            return self._chunk_path(digest).read_bytes()
        except FileNotFoundError:
            pass
        rows = self.index.read("SELECT data FROM chunks WHERE digest = ?", (key_of(digest),))
        if not rows or rows[0][0] is None:
            raise BlobNotFound(f"chunk {digest} is missing from the blob store")
        stored = rows[0][0]
        assert isinstance(stored, bytes)
        return stored

    def get_chunk(self, digest: str) -> bytes:
        """Read one chunk and check its content against its name."""
        return self._decoded(digest, self._stored_chunk(digest))

    def _decoded(self, digest: str, raw: bytes) -> bytes:
        """A chunk's content from its stored form, checked against its name."""
        tag, payload = raw[:1], raw[1:]
        if tag == CODEC_ZSTD:
            try:
                data = zstandard.ZstdDecompressor().decompress(payload)
            except zstandard.ZstdError as exc:
                raise BlobIntegrityError(f"chunk {digest} is corrupt: {exc}") from None
        elif tag == CODEC_RAW:
            data = payload
        elif tag == CODEC_SHUFFLE:
            data = unshuffle(digest, raw)
        else:
            raise BlobIntegrityError(f"chunk {digest} has an unknown codec tag {tag!r}")
        if self.digest(data) != digest:
            raise BlobIntegrityError(f"chunk {digest} does not match its content hash")
        return data

    def read_chunk_into(self, digest: str, target: memoryview) -> None:
        """Read one chunk straight into `target` (exactly its size), checking its name.

        Raw chunk files are read with one `readinto`, without an intermediate copy;
        shuffled chunks are decompressed and unshuffled into `target`; the others are
        decoded as `get_chunk` does, then copied.
        """
        stored: bytes | None = None
        try:
            with open(self.chunk_file(digest), "rb", buffering=0) as handle:
                tag = handle.read(1)
                if tag == CODEC_RAW:
                    count = handle.readinto(target)
                    if count != len(target) or handle.read(1):
                        raise BlobIntegrityError(f"chunk {digest} has the wrong length")
                    if self.digest(target) != digest:
                        raise BlobIntegrityError(f"chunk {digest} does not match its content hash")
                    return
                stored = tag + handle.readall()  # the same file, not opened a second time
        except FileNotFoundError:
            pass
        if stored is None:  # not a file of its own: a small chunk, in the index
            stored = self._stored_chunk(digest)
        if stored[:1] == CODEC_SHUFFLE:
            unshuffle_into(digest, stored, target)
            if self.digest(target) != digest:
                raise BlobIntegrityError(f"chunk {digest} does not match its content hash")
            return
        data = self._decoded(digest, stored)
        if len(data) != len(target):
            raise BlobIntegrityError(f"chunk {digest} has the wrong length")
        target[:] = data

    def put_bytes(self, data: bytes | memoryview, chunk_size: int = CHUNK_SIZE) -> StoredBytes:
        """Split `data` into fixed-size chunks and store the ones not yet present."""
        view = memoryview(data).cast("B")
        chunks: list[str] = []
        written = 0
        for offset in range(0, len(view), chunk_size):
            digest, n = self.put_chunk(view[offset : offset + chunk_size])
            chunks.append(digest)
            written += n
        return StoredBytes(chunks=chunks, size=len(view), bytes_written=written)

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

    def legacy_manifest_file(self, manifest_id: str) -> Path:
        """Where the old layout kept a manifest (read when the index does not have it)."""
        if not _is_id(manifest_id):
            raise BlobNotFound(f"{manifest_id!r} is not a manifest id")
        return self._legacy_manifests / f"{manifest_id}.json"

    def put_manifest(self, body: dict[str, Any]) -> tuple[str, int]:
        """Sign and store a manifest after making its chunks durable; return (id, bytes).

        In one transaction with the manifest, each chunk it lists (and each child manifest
        it lists under "manifests") gains a reference; a chunk that is not stored refuses
        the manifest (BlobNotFound) and nothing changes.
        """
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
        manifest_id = self.digest(canonical)
        key = key_of(manifest_id)
        self.flush()
        now = time.time()
        document = orjson.dumps({"body": body, "signature": self._sign(canonical)})
        if len(document) >= MANIFEST_COMPRESS_MIN:
            compressed = self._compressor().compress(document)
            if len(compressed) + 1 < len(document) * _MIN_GAIN:
                document = CODEC_ZSTD + compressed
        with self.index.write(durable=self.durable) as conn:
            if conn.execute("UPDATE manifests SET touched = ? WHERE id = ?", (now, key)).rowcount:
                return manifest_id, 0
            for digest in chunk_ids:
                found = conn.execute(
                    "UPDATE chunks SET refs = refs + 1, touched = ? WHERE digest = ? "
                    "RETURNING data IS NULL",
                    (now, key_of(digest)),
                ).fetchone()
                if found is None or (found[0] and not os.path.exists(self.chunk_file(digest))):
                    raise BlobNotFound(f"manifest references chunk {digest}, which is not stored")
            conn.executemany(
                "UPDATE manifests SET refs = refs + 1 WHERE id = ?",
                [(key_of(child),) for child in dict.fromkeys(children)],
            )
            conn.execute(
                "INSERT INTO manifests (id, refs, touched, unchecked, document) "
                "VALUES (?, 0, ?, 1, ?)",
                (key, now, document),
            )
        return manifest_id, len(document)

    def _document(self, manifest_id: str) -> bytes:
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
            raise BlobNotFound(f"manifest {manifest_id} is missing from the blob store") from None

    def has_manifest(self, manifest_id: str) -> bool:
        """Whether the manifest is stored."""
        try:
            self._document(manifest_id)
        except BlobNotFound:
            return False
        return True

    def get_manifest(self, manifest_id: str) -> dict[str, Any]:
        """Load a manifest, refusing it when its signature or id does not match."""
        return self.verified_body(manifest_id, self._document(manifest_id))

    def verified_body(self, manifest_id: str, document: bytes) -> dict[str, Any]:
        """The body of a stored manifest document, if its signature and id check."""
        try:
            if document[:1] == CODEC_ZSTD:
                document = zstandard.ZstdDecompressor().decompress(document[1:])
            parsed = orjson.loads(document)
        except (orjson.JSONDecodeError, zstandard.ZstdError):
            raise ManifestSignatureError(f"manifest {manifest_id} is not valid JSON") from None
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
        except ManifestSignatureError:
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
        if keys:
            with self.index.write() as conn:
                conn.executemany("UPDATE manifests SET unchecked = 0 WHERE id = ?", keys)

    def mark_for_collection(self, manifest_ids: Iterable[str]) -> None:
        """Record that references to these manifests may have gone away: the next
        collection checks them again (and frees them if nothing references them)."""
        keys = [(key_of(m),) for m in dict.fromkeys(manifest_ids) if _is_id(m)]
        if keys:
            with self.index.write() as conn:
                conn.executemany("UPDATE manifests SET unchecked = 1 WHERE id = ?", keys)

    # ---- garbage collection ---------------------------------------------------------

    def gc(self, referenced: ReferenceCheck, *, grace_seconds: float = GRACE_SECONDS) -> GcReport:
        """Free manifests and chunks nothing references (see `blob_gc.collect`)."""
        return collect(self, referenced, grace_seconds=grace_seconds)

    def clear_stale_temp_files(self, cutoff: float) -> None:
        """Remove files left in tmp/ by writers that died before `cutoff`."""
        for path in list(self._tmp.iterdir()):
            mtime = _mtime(path)
            if mtime is not None and mtime < cutoff:
                path.unlink(missing_ok=True)


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


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _mkstemp(folder: Path) -> tuple[int, str]:
    name = folder / f".{secrets.token_hex(8)}.tmp"
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), str(name)

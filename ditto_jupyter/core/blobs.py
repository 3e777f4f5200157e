"""Content-addressed blob store: BLAKE3 chunks, zstd where it helps, signed manifests.

Layout under `root` (mode 0700, see `core.private`):
  chunks/ab/<blake3 hex>   one chunk: a one-byte codec tag (b"R" raw, b"Z" zstd) + payload
  manifests/<id>.json      {"body": ..., "signature": HMAC-SHA256(secret, canonical body)}
                           as JSON, or (a document of 1 KiB or more that zstd shrinks by
                           15%) b"Z" + one zstd frame of that JSON
  secret                   the per-store HMAC key, mode 0600, created on first use
  tmp/                     staging for atomic writes (temp + fsync + rename)

A manifest body is any JSON object; it must list every chunk it references under
`"chunks"` and may list child manifests under `"manifests"`, so garbage collection can
compute what is still live. Several processes (the server and its kernels) may share one
store: writes are atomic renames of content-addressed names, so racing writers agree.

A body names its `"kind"`. A checkpoint's variables are a `NAMESPACE_MANIFEST_KIND` manifest
whose signed body also names the runtime it was captured for (`"runtime_id"`; manifests
written before that field lack it).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import orjson
import zstandard

from ditto_jupyter.core.private import private_dir

CHUNK_SIZE = 1 << 20
#: Codec tag (the first byte of a chunk file) of a chunk stored as is.
CODEC_RAW = b"R"
#: Codec tag of a chunk stored as one zstd frame (when that saves at least 15%).
CODEC_ZSTD = b"Z"
#: The `kind` of a kernel-namespace manifest (a checkpoint's variables).
NAMESPACE_MANIFEST_KIND = "kernel-namespace"
_HEX = frozenset("0123456789abcdef")
_SAMPLE = 64 * 1024
_MIN_GAIN = 0.85
#: Manifest documents this big or bigger are stored zstd-compressed when that helps.
MANIFEST_COMPRESS_MIN = 1024


class BlobError(Exception):
    """Base of blob-store failures."""


class BlobNotFound(BlobError):
    """A chunk or manifest that is not (or no longer) in the store."""


class BlobIntegrityError(BlobError):
    """A chunk whose content no longer matches its BLAKE3 name."""


class ManifestSignatureError(BlobError):
    """A manifest whose HMAC signature fails: it is refused, never loaded."""


@dataclass(frozen=True)
class StoredBytes:
    """Chunks that hold one byte string, and how many new bytes storing it wrote."""

    chunks: list[str]
    size: int
    bytes_written: int


@dataclass(frozen=True)
class GcReport:
    """What a garbage collection freed."""

    freed_chunks: int
    freed_bytes: int
    freed_manifests: int


def _canonical(body: Any) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        self._manifests = self.root / "manifests"
        self._tmp = self.root / "tmp"
        private_dir(self.root)
        for folder in (self._chunks, self._manifests, self._tmp):
            folder.mkdir(parents=True, exist_ok=True)
        self._secret = self._load_or_create_secret()
        self._dirty_dirs: set[Path] = set()
        self._dirty_lock = threading.Lock()
        self._local = threading.local()  # zstd compressors must not be shared by threads

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
        """Where a chunk lives on disk (one codec byte, then the payload)."""
        if len(digest) != 64 or not _HEX.issuperset(digest):
            raise BlobNotFound(f"{digest!r} is not a chunk id")
        return os.path.join(self._chunks_dir, digest[:2], digest)

    def _chunk_path(self, digest: str) -> Path:
        return Path(self.chunk_file(digest))

    def has_chunk(self, digest: str) -> bool:
        """Whether the chunk is stored."""
        return os.path.exists(self.chunk_file(digest))

    def put_chunk(self, data: bytes | memoryview, digest: str | None = None) -> tuple[str, int]:
        """Store one chunk unless it is already there; return (digest, bytes written)."""
        digest = digest or self.digest(data)
        path = self._chunk_path(digest)
        if _touch(path):  # already stored; fresh mtime so gc's grace period covers reuse too
            return digest, 0
        path.parent.mkdir(exist_ok=True)
        payload: bytes | memoryview = data
        tag = CODEC_RAW
        if len(data) >= 512:
            sample = bytes(data[:_SAMPLE])
            compressor = self._compressor()
            if len(compressor.compress(sample)) < len(sample) * _MIN_GAIN:
                compressed = compressor.compress(bytes(data))
                if len(compressed) < len(data) * _MIN_GAIN:
                    payload, tag = compressed, CODEC_ZSTD
        self._write_atomic(path, (tag, payload))
        return digest, len(payload) + 1

    def get_chunk(self, digest: str) -> bytes:
        """Read one chunk and check its content against its name."""
        try:
            raw = self._chunk_path(digest).read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(f"chunk {digest} is missing from the blob store") from None
        tag, payload = raw[:1], raw[1:]
        if tag == CODEC_ZSTD:
            try:
                data = zstandard.ZstdDecompressor().decompress(payload)
            except zstandard.ZstdError as exc:
                raise BlobIntegrityError(f"chunk {digest} is corrupt: {exc}") from None
        elif tag == CODEC_RAW:
            data = payload
        else:
            raise BlobIntegrityError(f"chunk {digest} has an unknown codec tag {tag!r}")
        if self.digest(data) != digest:
            raise BlobIntegrityError(f"chunk {digest} does not match its content hash")
        return data

    def read_chunk_into(self, digest: str, target: memoryview) -> None:
        """Read one chunk straight into `target` (exactly its size), checking its name.

        Raw chunks are read with one `readinto`, without an intermediate copy; compressed
        ones go through `get_chunk`.
        """
        try:
            with open(self.chunk_file(digest), "rb", buffering=0) as handle:
                if handle.read(1) == CODEC_RAW:
                    count = handle.readinto(target)
                    if count != len(target) or handle.read(1):
                        raise BlobIntegrityError(f"chunk {digest} has the wrong length")
                    if self.digest(target) != digest:
                        raise BlobIntegrityError(f"chunk {digest} does not match its content hash")
                    return
        except FileNotFoundError:
            raise BlobNotFound(f"chunk {digest} is missing from the blob store") from None
        data = self.get_chunk(digest)
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
        """Every stored chunk with its size on disk."""
        for shard in self._chunks.iterdir():
            for path in shard.iterdir():
                yield path.name, path.stat().st_size

    def stored_bytes(self) -> int:
        """Bytes on disk taken by chunks."""
        return sum(size for _, size in self.iter_chunks())

    # ---- manifests ------------------------------------------------------------------

    def _sign(self, canonical: bytes) -> str:
        return hmac.new(self._secret, canonical, hashlib.sha256).hexdigest()

    def _manifest_path(self, manifest_id: str) -> Path:
        if len(manifest_id) != 64 or not all(c in "0123456789abcdef" for c in manifest_id):
            raise BlobNotFound(f"{manifest_id!r} is not a manifest id")
        return self._manifests / f"{manifest_id}.json"

    def put_manifest(self, body: dict[str, Any]) -> tuple[str, int]:
        """Sign and store a manifest after making its chunks durable; return (id, bytes)."""
        if not isinstance(body.get("chunks", []), list):
            raise BlobError("a manifest's 'chunks' must be a list of chunk ids")
        for digest in body.get("chunks", []):
            if not self.has_chunk(digest):
                raise BlobNotFound(f"manifest references chunk {digest}, which is not stored")
        canonical = _canonical(body)
        manifest_id = self.digest(canonical)
        path = self._manifest_path(manifest_id)
        self.flush()
        if _touch(path):
            return manifest_id, 0
        document = orjson.dumps({"body": body, "signature": self._sign(canonical)})
        stored: tuple[bytes, ...] = (document,)
        if len(document) >= MANIFEST_COMPRESS_MIN:
            compressed = self._compressor().compress(document)
            if len(compressed) + 1 < len(document) * _MIN_GAIN:
                stored = (CODEC_ZSTD, compressed)
        self._write_atomic(path, stored)
        self.flush()
        return manifest_id, sum(len(part) for part in stored)

    def has_manifest(self, manifest_id: str) -> bool:
        """Whether the manifest is stored."""
        return self._manifest_path(manifest_id).exists()

    def get_manifest(self, manifest_id: str) -> dict[str, Any]:
        """Load a manifest, refusing it when its signature or id does not match."""
        try:
            raw = self._manifest_path(manifest_id).read_bytes()
            if raw[:1] == CODEC_ZSTD:
                raw = zstandard.ZstdDecompressor().decompress(raw[1:])
            document = orjson.loads(raw)
        except FileNotFoundError:
            raise BlobNotFound(f"manifest {manifest_id} is missing from the blob store") from None
        except (orjson.JSONDecodeError, zstandard.ZstdError):
            raise ManifestSignatureError(f"manifest {manifest_id} is not valid JSON") from None
        if not isinstance(document, dict):
            raise ManifestSignatureError(f"manifest {manifest_id} is malformed")
        body, signature = document.get("body"), document.get("signature")
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
        """Remove a manifest (its chunks are freed by the next gc); False if absent."""
        try:
            self._manifest_path(manifest_id).unlink()
        except FileNotFoundError:
            return False
        return True

    def iter_manifests(self) -> Iterator[str]:
        """Ids of every stored manifest."""
        for path in self._manifests.glob("*.json"):
            yield path.stem

    # ---- garbage collection ---------------------------------------------------------

    def live_closure(self, roots: Iterable[str]) -> tuple[set[str], set[str]]:
        """Manifests reachable from `roots` and every chunk they reference."""
        manifests: set[str] = set()
        chunks: set[str] = set()
        pending = [m for m in roots if m]
        while pending:
            manifest_id = pending.pop()
            if manifest_id in manifests or not self.has_manifest(manifest_id):
                continue
            manifests.add(manifest_id)
            body = self.get_manifest(manifest_id)
            chunks.update(body.get("chunks", []))
            pending.extend(body.get("manifests", []))
        return manifests, chunks

    def gc(self, live_manifests: Iterable[str], *, grace_seconds: float = 60.0) -> GcReport:
        """Free manifests and chunks nothing live references.

        Anything younger than `grace_seconds` is kept, and so is everything a young
        manifest references, so a capture that has written (or reused) its chunks and
        manifest but not yet registered the manifest is never collected under it.
        Several processes may collect at once: files another one removed are skipped.
        """
        cutoff = time.time() - grace_seconds
        young = [
            path.stem for path in self._manifests.glob("*.json") if (_mtime(path) or 0.0) >= cutoff
        ]
        keep_manifests, keep_chunks = self.live_closure([*live_manifests, *young])
        freed_manifests = freed_chunks = freed_bytes = 0
        for path in list(self._manifests.glob("*.json")):
            if path.stem in keep_manifests:
                continue
            mtime = _mtime(path)
            if mtime is not None and mtime < cutoff:
                path.unlink(missing_ok=True)
                freed_manifests += 1
        for shard in list(self._chunks.iterdir()):
            for path in list(shard.iterdir()):
                if path.name in keep_chunks:
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                if stat.st_mtime < cutoff:
                    path.unlink(missing_ok=True)
                    freed_chunks += 1
                    freed_bytes += stat.st_size
        for path in list(self._tmp.iterdir()):
            mtime = _mtime(path)
            if mtime is not None and mtime < cutoff:
                path.unlink(missing_ok=True)
        return GcReport(freed_chunks, freed_bytes, freed_manifests)


def _touch(path: Path) -> bool:
    """Refresh a stored file's mtime; False when it does not exist (any more)."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _mkstemp(folder: Path) -> tuple[int, str]:
    name = folder / f".{secrets.token_hex(8)}.tmp"
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), str(name)

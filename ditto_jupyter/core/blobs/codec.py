"""How a chunk is stored: a one-byte codec tag, then its payload, whichever form is smallest.

- `CODEC_RAW` (b"R"): the bytes as they are;
- `CODEC_ZSTD` (b"Z"): one zstd frame, kept when it saves at least 15%;
- `CODEC_SHUFFLE` (b"S"): one byte holding an item size, then a zstd frame of the bytes
  shuffled by that item size (`shuffle`), for typed data zstd alone does not shrink.

A chunk's name is the BLAKE3 hash of its bytes whatever the form, and every decode checks
it. zstd compressors are kept one per thread (they must not be shared), so one store
serves every thread of a process.
"""

from __future__ import annotations

import threading

import blake3
import zstandard

from ditto_jupyter.core.blobs.errors import BlobIntegrityError
from ditto_jupyter.core.blobs.shuffle import CODEC_SHUFFLE, shuffled_form, unshuffle, unshuffle_into

#: Bytes per chunk when a byte string is split (the last chunk may be shorter).
CHUNK_SIZE = 1 << 20
#: Codec tag (the first byte of a stored chunk) of a chunk stored as is.
CODEC_RAW = b"R"
#: Codec tag of a chunk stored as one zstd frame (when that saves at least 15%).
CODEC_ZSTD = b"Z"
#: A compressed form is kept when it takes at most this share of the original.
MIN_GAIN = 0.85
#: How much of a chunk is compressed first to see whether compressing it pays.
_SAMPLE = 64 * 1024
_local = threading.local()


def digest(data: bytes | memoryview) -> str:
    """The BLAKE3 hex name of a chunk's content."""
    return blake3.blake3(data).hexdigest()


def compressor() -> zstandard.ZstdCompressor:
    """This thread's zstd compressor (level 3)."""
    found: zstandard.ZstdCompressor | None = getattr(_local, "zstd", None)
    if found is None:
        found = _local.zstd = zstandard.ZstdCompressor(level=3)
    return found


def encode(data: bytes | memoryview, itemsize: int = 1) -> tuple[bytes, bytes | memoryview]:
    """How to store a chunk: (codec tag and header, payload). `itemsize` (2, 4 or 8: the
    chunk holds numbers of that size) lets a chunk zstd alone does not shrink be shuffled."""
    if len(data) < 512:
        return CODEC_RAW, data
    sample = bytes(data[:_SAMPLE])
    zstd = compressor()
    if len(zstd.compress(sample)) < len(sample) * MIN_GAIN:
        compressed = zstd.compress(data)
        if len(compressed) < len(data) * MIN_GAIN:
            return CODEC_ZSTD, compressed
    return shuffled_form(data, sample, itemsize) or (CODEC_RAW, data)


def decode(name: str, stored: bytes) -> bytes:
    """A chunk's content from its stored form, checked against its name."""
    tag, payload = stored[:1], stored[1:]
    if tag == CODEC_ZSTD:
        try:
            data = zstandard.ZstdDecompressor().decompress(payload)
        except zstandard.ZstdError as exc:
            raise BlobIntegrityError(f"chunk {name} is corrupt: {exc}") from None
    elif tag == CODEC_RAW:
        data = payload
    elif tag == CODEC_SHUFFLE:
        data = unshuffle(name, stored)
    else:
        raise BlobIntegrityError(f"chunk {name} has an unknown codec tag {tag!r}")
    check(name, data)
    return data


def decode_into(name: str, stored: bytes, target: memoryview) -> None:
    """Write a chunk's content from its stored form into `target` (exactly its size),
    checked against its name; a shuffled chunk is unshuffled straight into `target`."""
    if stored[:1] == CODEC_SHUFFLE:
        unshuffle_into(name, stored, target)
        check(name, target)
        return
    data = decode(name, stored)
    if len(data) != len(target):
        raise BlobIntegrityError(f"chunk {name} has the wrong length")
    target[:] = data


def check(name: str, data: bytes | memoryview) -> None:
    """Refuse content that does not hash to its chunk's name."""
    if digest(data) != name:
        raise BlobIntegrityError(f"chunk {name} does not match its content hash")

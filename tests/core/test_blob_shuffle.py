"""Typed chunks stored byte-shuffled (`CODEC_SHUFFLE`): smaller, same name, same checks."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import zstandard

from ditto_jupyter.backends.local.copying import copy_chunk
from ditto_jupyter.control.doctor import check_chunks
from ditto_jupyter.core.blobs import (
    CODEC_RAW,
    CODEC_SHUFFLE,
    CODEC_ZSTD,
    SMALL_OBJECT_LIMIT,
    BlobIntegrityError,
    BlobStore,
)
from ditto_jupyter.core.blobs.shuffle import shuffle
from tests.support.stored_blobs import tamper_chunk

MIB = 1 << 20


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    """A fresh store (no fsync: these tests do not cut power)."""
    return BlobStore(tmp_path / "blobs", durable=False)


def stored_form(blobs: BlobStore, digest: str) -> bytes:
    """A chunk's stored bytes (codec tag + payload), from its file or its row."""
    path = blobs.root / "chunks" / digest[:2] / digest
    if path.exists():
        return path.read_bytes()
    with contextlib.closing(sqlite3.connect(blobs.root / "objects.db")) as conn:
        (data,) = conn.execute(
            "SELECT data FROM chunks WHERE digest = ?", (bytes.fromhex(digest),)
        ).fetchone()
    assert isinstance(data, bytes)
    return data


def read_into(blobs: BlobStore, digest: str, size: int) -> bytes:
    """A chunk read through `read_chunk_into` (the restore path)."""
    target = bytearray(size)
    blobs.read_chunk_into(digest, memoryview(target))
    return bytes(target)


def random_floats(size: int, seed: int = 0) -> bytes:
    """`size` bytes of np.random.rand float64 (what zstd alone saves ~6% on)."""
    return np.random.default_rng(seed).random(size // 8).tobytes()


# Typed data zstd alone does not shrink by 15% but shuffled shrinks by 10% or more.
TYPED: dict[str, tuple[int, Callable[[int], bytes]]] = {
    "float64": (8, random_floats),
    "float32": (4, lambda n: np.random.default_rng(1).random(n // 4, dtype=np.float32).tobytes()),
    "int32": (4, lambda n: np.random.default_rng(2).integers(0, 2**27, n // 4, np.int32).tobytes()),
    "int16": (2, lambda n: np.random.default_rng(3).integers(0, 2**14, n // 2, np.int16).tobytes()),
}


@pytest.mark.parametrize(
    ("kind", "size"),
    # 1 MiB chunks are files; a small chunk is a row of the index (one zstd block mixes
    # its byte planes, which only float64 compresses well enough through)
    [*((kind, MIB) for kind in TYPED), ("float64", 48 * 1024)],
)
def test_typed_chunks_are_stored_shuffled_and_read_back(
    blobs: BlobStore, kind: str, size: int
) -> None:
    itemsize, make = TYPED[kind]
    data = make(size)
    assert len(zstandard.ZstdCompressor(level=3).compress(data)) > 0.85 * size
    digest, written = blobs.put_chunk(data, itemsize=itemsize)
    assert digest == BlobStore.digest(data)
    stored = stored_form(blobs, digest)
    assert stored[:2] == CODEC_SHUFFLE + bytes([itemsize])
    assert written == len(stored) < 0.9 * size
    assert (blobs.root / "chunks" / digest[:2] / digest).exists() == (written >= SMALL_OBJECT_LIMIT)
    assert blobs.get_chunk(digest) == data
    assert read_into(blobs, digest, size) == data


def test_the_same_content_is_one_chunk_whatever_its_item_size(blobs: BlobStore) -> None:
    data = random_floats(MIB)
    digest, written = blobs.put_chunk(data)  # itemsize 1: zstd does not help, stored raw
    assert written == MIB + 1 and stored_form(blobs, digest)[:1] == CODEC_RAW
    assert blobs.put_chunk(data, itemsize=8) == (digest, 0)
    other = random_floats(MIB, seed=5)
    other_id, written = blobs.put_chunk(other, itemsize=8)  # shuffled first, then plain
    assert 0 < written < 0.9 * MIB
    assert blobs.put_chunk(other) == (other_id, 0)
    assert {d for d, _ in blobs.iter_chunks()} == {digest, other_id}
    assert blobs.get_bytes([digest, other_id]) == data + other


@pytest.mark.parametrize("size", [MIB, 48 * 1024])
@pytest.mark.parametrize("where", [1, 2, 40, -1])  # item size byte, frame header, body, end
def test_a_flipped_byte_in_a_shuffled_chunk_is_detected(
    blobs: BlobStore, size: int, where: int
) -> None:
    data = random_floats(size)
    digest, _ = blobs.put_chunk(data, itemsize=8)
    assert stored_form(blobs, digest)[:1] == CODEC_SHUFFLE

    def flip(raw: bytes) -> bytes:
        edited = bytearray(raw)
        edited[where] ^= 0x01
        return bytes(edited)

    tamper_chunk(blobs.root, digest, flip)
    with pytest.raises(BlobIntegrityError, match=digest):
        blobs.get_chunk(digest)
    with pytest.raises(BlobIntegrityError, match=digest):
        read_into(blobs, digest, size)
    (finding,) = check_chunks(blobs)[1]  # ditto doctor names it
    assert finding.id == digest


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda raw: raw[:1] + b"\x03" + raw[2:], "unknown shuffle item size 3"),
        (lambda raw: raw[:1], "unknown shuffle item size 0"),
        (lambda raw: raw[:2] + b"not a zstd frame", "is corrupt"),
        (lambda raw: raw[:-100], "is corrupt"),
        (lambda raw: raw[:2] + zstandard.compress(b"\0" * 1001), "wrong length"),
        (lambda raw: raw[:2] + zstandard.compress(b""), "wrong length"),
        (lambda raw: raw[:2] + zstandard.compress(b"\0" * MIB), "does not match"),
    ],
)
def test_a_damaged_shuffled_chunk_is_an_integrity_error_naming_it(
    blobs: BlobStore, damage: Callable[[bytes], bytes], message: str
) -> None:
    data = random_floats(MIB)
    digest, _ = blobs.put_chunk(data, itemsize=8)
    tamper_chunk(blobs.root, digest, damage)
    with pytest.raises(BlobIntegrityError, match=f"chunk {digest} .*{message}"):
        blobs.get_chunk(digest)
    with pytest.raises(BlobIntegrityError, match=f"chunk {digest} .*{message}"):
        read_into(blobs, digest, MIB)


def test_a_shuffled_chunk_read_into_a_target_of_another_size_is_refused(
    blobs: BlobStore,
) -> None:
    digest, _ = blobs.put_chunk(random_floats(MIB), itemsize=8)
    for size in (MIB - 8, MIB + 8):
        with pytest.raises(BlobIntegrityError, match=f"chunk {digest} has the wrong length"):
            read_into(blobs, digest, size)


def test_a_length_that_is_no_multiple_of_the_item_size_is_stored_unshuffled(
    blobs: BlobStore,
) -> None:
    floats = random_floats(MIB)[:-3]
    text = b"the quick brown fox jumps over the lazy dog\n" * 2000 + b"odd"
    for data, codec in [(floats, CODEC_RAW), (text, CODEC_ZSTD)]:
        assert len(data) % 8
        digest, _ = blobs.put_chunk(data, itemsize=8)
        assert stored_form(blobs, digest)[:1] == codec
        assert blobs.get_chunk(digest) == data
        assert read_into(blobs, digest, len(data)) == data


@pytest.mark.parametrize("itemsize", [1, 3, 16])
def test_only_item_sizes_2_4_and_8_are_shuffled(blobs: BlobStore, itemsize: int) -> None:
    data = random_floats(MIB)
    digest, written = blobs.put_chunk(data, itemsize=itemsize)
    assert written == MIB + 1 and stored_form(blobs, digest)[:1] == CODEC_RAW


def test_noise_stays_raw_and_compressible_chunks_stay_zstd(blobs: BlobStore) -> None:
    noise = os.urandom(MIB)  # shuffling does not help bytes with no structure
    digest, written = blobs.put_chunk(noise, itemsize=8)
    assert written == MIB + 1 and stored_form(blobs, digest)[:1] == CODEC_RAW
    zeros = np.zeros(MIB // 8).tobytes()  # zstd alone already does well
    digest, _ = blobs.put_chunk(zeros, itemsize=8)
    assert stored_form(blobs, digest)[:1] == CODEC_ZSTD
    assert read_into(blobs, digest, MIB) == zeros


def test_a_checkout_copies_a_shuffled_chunk_into_a_file(blobs: BlobStore, tmp_path: Path) -> None:
    data = random_floats(MIB)
    digest, _ = blobs.put_chunk(data, itemsize=8)
    fd = os.open(tmp_path / "file.bin", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert copy_chunk(blobs, digest, fd, 10) == MIB
    finally:
        os.close(fd)
    assert (tmp_path / "file.bin").read_bytes() == b"\0" * 10 + data
    assert check_chunks(blobs)[:2] == (1, [])


def test_shuffle_lines_up_each_byte_of_the_items() -> None:
    items = bytes(range(16))  # two 8-byte items
    assert shuffle(items, 8) == bytes([0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15])
    assert shuffle(items, 2) == bytes(range(0, 16, 2)) + bytes(range(1, 16, 2))

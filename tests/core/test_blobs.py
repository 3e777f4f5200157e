"""Blob store: chunks, dedup, compression, integrity, signed manifests, secret, gc, processes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_jupyter.core.blobs import (
    CODEC_RAW,
    CODEC_ZSTD,
    SMALL_OBJECT_LIMIT,
    BlobError,
    BlobIntegrityError,
    BlobNotFound,
    BlobStore,
    ManifestSignatureError,
)
from tests.support.stored_blobs import manifest_document, write_manifest_document

KIB = 1024


def chunk_file(store: BlobStore, digest: str) -> Path:
    """Where a large chunk lives on disk (the documented layout: chunks/ab/<digest>)."""
    return store.root / "chunks" / digest[:2] / digest


def chunk_files(store: BlobStore) -> set[str]:
    """Names of every chunk file on disk (large chunks only)."""
    return {p.name for p in (store.root / "chunks").glob("*/*")}


def stored_chunks(store: BlobStore) -> set[str]:
    """Every chunk the store holds, inline or in a file."""
    return {digest for digest, _ in store.iter_chunks()}


def index(store: BlobStore) -> sqlite3.Connection:
    """A plain connection to the store's object index (to look at or damage rows)."""
    return sqlite3.connect(store.root / "objects.db", isolation_level=None)


def stored_form(store: BlobStore, digest: str) -> bytes:
    """A chunk's stored bytes (codec tag + payload), from its file or its row."""
    path = chunk_file(store, digest)
    if path.exists():
        return path.read_bytes()
    with contextlib.closing(index(store)) as conn:
        (data,) = conn.execute(
            "SELECT data FROM chunks WHERE digest = ?", (bytes.fromhex(digest),)
        ).fetchone()
    assert isinstance(data, bytes)
    return data


def replace_stored_form(store: BlobStore, digest: str, raw: bytes) -> None:
    """Overwrite a chunk's stored bytes where they are (file or row)."""
    path = chunk_file(store, digest)
    if path.exists():
        path.write_bytes(raw)
        return
    with contextlib.closing(index(store)) as conn:
        conn.execute("UPDATE chunks SET data = ? WHERE digest = ?", (raw, bytes.fromhex(digest)))


def document(store: BlobStore, manifest_id: str) -> bytes:
    """A manifest's stored document."""
    with contextlib.closing(index(store)) as conn:
        (doc,) = conn.execute(
            "SELECT document FROM manifests WHERE id = ?", (bytes.fromhex(manifest_id),)
        ).fetchone()
    assert isinstance(doc, bytes)
    return doc


def replace_document(store: BlobStore, manifest_id: str, doc: bytes) -> None:
    """Overwrite a manifest's stored document (a tampered or garbled store)."""
    with contextlib.closing(index(store)) as conn:
        conn.execute(
            "UPDATE manifests SET document = ? WHERE id = ?", (doc, bytes.fromhex(manifest_id))
        )


def refs(store: BlobStore, digest: str) -> int:
    """How many stored manifests list a chunk, as the index counts them."""
    with contextlib.closing(index(store)) as conn:
        row = conn.execute(
            "SELECT refs FROM chunks WHERE digest = ?", (bytes.fromhex(digest),)
        ).fetchone()
    return -1 if row is None else int(row[0])


def age(store: BlobStore, object_id: str, seconds: float) -> None:
    """Make a chunk or manifest look `seconds` old to the garbage collector."""
    then = time.time() - seconds
    key = bytes.fromhex(object_id)
    with contextlib.closing(index(store)) as conn:
        conn.execute("UPDATE chunks SET touched = ? WHERE digest = ?", (then, key))
        conn.execute("UPDATE manifests SET touched = ? WHERE id = ?", (then, key))


def age_file(path: Path, seconds: float) -> None:
    """Make a file look `seconds` old."""
    then = time.time() - seconds
    os.utime(path, (then, then))


def live(*manifest_ids: str) -> Callable[[Sequence[str]], set[str]]:
    """A reference check that says exactly these manifests are referenced."""
    keep = set(manifest_ids)
    return lambda ids: keep.intersection(ids)


def compressible(size: int, seed: int = 0) -> bytes:
    """Text-like bytes zstd shrinks a lot (distinct per seed)."""
    line = f"row {seed}: the quick brown fox jumps over the lazy dog\n".encode()
    return (line * (size // len(line) + 1))[:size]


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    """A fresh store (no fsync: these tests do not cut power)."""
    return BlobStore(tmp_path / "blobs", durable=False)


# ---- chunks ---------------------------------------------------------------------------


def test_put_get_round_trip(blobs: BlobStore) -> None:
    data = os.urandom(300 * KIB) + compressible(200 * KIB)
    stored = blobs.put_bytes(data, chunk_size=64 * KIB)
    assert stored.size == len(data)
    assert len(stored.chunks) == 8  # ceil(500 / 64)
    assert blobs.get_bytes(stored.chunks) == data
    assert blobs.get_bytes(blobs.put_bytes(memoryview(data)[10:20]).chunks) == data[10:20]
    empty = blobs.put_bytes(b"")
    assert (empty.chunks, empty.size, empty.bytes_written) == ([], 0, 0)
    assert blobs.get_bytes([]) == b""


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=5000), chunk_size=st.integers(1, 2048))
def test_round_trip_any_bytes_any_chunking(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, chunk_size: int
) -> None:
    store = BlobStore(tmp_path_factory.mktemp("blobs"), durable=False)
    stored = store.put_bytes(data, chunk_size=chunk_size)
    assert store.get_bytes(stored.chunks) == data
    assert all(store.has_chunk(d) for d in stored.chunks)


def test_dedup_writes_a_chunk_once(blobs: BlobStore) -> None:
    block = os.urandom(64 * KIB)
    first = blobs.put_bytes(block * 3 + b"tail", chunk_size=64 * KIB)
    assert len(first.chunks) == 4 and len(set(first.chunks)) == 2
    assert first.bytes_written == (64 * KIB + 1) + (4 + 1)  # codec tag byte + payload, once
    assert stored_chunks(blobs) == set(first.chunks)
    assert chunk_files(blobs) == {first.chunks[0]}  # the small tail lives in the index
    again = blobs.put_bytes(block * 3 + b"tail", chunk_size=64 * KIB)
    assert again.chunks == first.chunks
    assert again.bytes_written == 0
    digest, written = blobs.put_chunk(block)
    assert (digest, written) == (first.chunks[0], 0)
    assert blobs.stored_bytes() == first.bytes_written


def test_small_chunks_and_manifests_take_no_file_of_their_own(blobs: BlobStore) -> None:
    """Thousands of small objects: no directory grows past ~10,000 entries."""
    for i in range(2000):
        stored = blobs.put_bytes(f"small object {i}".encode())
        blobs.put_manifest({"kind": "test", "chunks": stored.chunks, "i": i})
    big, _ = blobs.put_chunk(os.urandom(SMALL_OBJECT_LIMIT))
    assert chunk_files(blobs) == {big}
    assert len(stored_chunks(blobs)) == 2001 and len(list(blobs.iter_manifests())) == 2000
    assert not (blobs.root / "manifests").exists()
    biggest = max(len(os.listdir(folder)) for folder, _, _ in os.walk(blobs.root))
    assert biggest <= 10  # the root: objects.db (+ -wal, -shm), secret, chunks/, tmp/


def test_zstd_for_compressible_raw_for_random(blobs: BlobStore) -> None:
    text = compressible(256 * KIB)
    noise = os.urandom(256 * KIB)
    (text_id,) = blobs.put_bytes(text, chunk_size=len(text)).chunks
    (noise_id,) = blobs.put_bytes(noise, chunk_size=len(noise)).chunks
    small_id, _ = blobs.put_chunk(b"a" * 100)  # too small to be worth a frame
    text_raw = stored_form(blobs, text_id)
    assert text_raw[:1] == CODEC_ZSTD and len(text_raw) < len(text) // 20
    assert not chunk_file(blobs, text_id).exists()  # compressed below the limit: inline
    noise_raw = chunk_file(blobs, noise_id).read_bytes()
    assert noise_raw[:1] == CODEC_RAW and noise_raw[1:] == noise
    assert stored_form(blobs, small_id) == CODEC_RAW + b"a" * 100
    assert blobs.get_chunk(text_id) == text
    assert blobs.get_chunk(noise_id) == noise
    # mostly random with a compressible start: the whole chunk is judged, not the sample
    mixed = compressible(64 * KIB) + os.urandom(512 * KIB)
    (mixed_id,) = blobs.put_bytes(mixed, chunk_size=len(mixed)).chunks
    assert chunk_file(blobs, mixed_id).read_bytes()[:1] == CODEC_RAW
    assert blobs.get_chunk(mixed_id) == mixed


@pytest.mark.parametrize(
    ("kind", "size"), [("raw", 8 * KIB), ("zstd", 64 * KIB), ("raw", 96 * KIB)]
)
@pytest.mark.parametrize("where", [0, 1, -1])
def test_a_flipped_byte_is_detected(blobs: BlobStore, kind: str, size: int, where: int) -> None:
    data = os.urandom(size) if kind == "raw" else compressible(size)
    digest, _ = blobs.put_chunk(data)
    assert chunk_file(blobs, digest).exists() == (size > SMALL_OBJECT_LIMIT)
    raw = bytearray(stored_form(blobs, digest))
    assert raw[:1] == (CODEC_RAW if kind == "raw" else CODEC_ZSTD)
    raw[where] ^= 0x01
    replace_stored_form(blobs, digest, bytes(raw))
    with pytest.raises(BlobIntegrityError, match=digest):
        blobs.get_chunk(digest)
    with pytest.raises(BlobIntegrityError):
        blobs.get_bytes([digest])
    with pytest.raises(BlobIntegrityError):
        blobs.read_chunk_into(digest, memoryview(bytearray(size)))


def test_missing_and_malformed_chunk_ids(blobs: BlobStore) -> None:
    with pytest.raises(BlobNotFound, match=r"is missing from the (blob|object) store"):
        blobs.get_chunk("0" * 64)
    for bad in ["", "abc", "../" + "0" * 61, "G" * 64, "0" * 64 + "/x"]:
        with pytest.raises(BlobNotFound, match="is not a chunk id"):
            blobs.get_chunk(bad)
    assert not blobs.has_chunk("0" * 64)


def test_a_chunk_whose_file_went_missing_is_written_again(blobs: BlobStore) -> None:
    data = os.urandom(SMALL_OBJECT_LIMIT + 10)
    digest, _ = blobs.put_chunk(data)
    chunk_file(blobs, digest).unlink()
    assert not blobs.has_chunk(digest)
    with pytest.raises(BlobNotFound, match="which is not stored"):
        blobs.put_manifest({"chunks": [digest]})
    assert blobs.put_chunk(data)[1] > 0
    manifest_id, _ = blobs.put_manifest({"chunks": [digest]})
    assert blobs.get_bytes(blobs.get_manifest(manifest_id)["chunks"]) == data


# ---- manifests ------------------------------------------------------------------------


def _manifest(blobs: BlobStore, payload: bytes = b"payload") -> tuple[str, dict[str, Any]]:
    stored = blobs.put_bytes(payload)
    body: dict[str, Any] = {"kind": "test", "chunks": stored.chunks, "names": {"x": 1}}
    manifest_id, _ = blobs.put_manifest(body)
    return manifest_id, body


def test_manifest_round_trip_and_dedup(blobs: BlobStore) -> None:
    manifest_id, body = _manifest(blobs)
    assert blobs.get_manifest(manifest_id) == body
    assert blobs.has_manifest(manifest_id)
    assert list(blobs.iter_manifests()) == [manifest_id]
    again, written = blobs.put_manifest(dict(reversed(list(body.items()))))  # key order
    assert (again, written) == (manifest_id, 0)
    (chunk,) = body["chunks"]
    assert refs(blobs, chunk) == 1  # a manifest stored twice holds one reference
    assert blobs.delete_manifest(manifest_id) is True
    assert refs(blobs, chunk) == 0
    assert blobs.delete_manifest(manifest_id) is False
    with pytest.raises(BlobNotFound, match="is missing"):
        blobs.get_manifest(manifest_id)


def test_manifest_must_reference_stored_chunks(blobs: BlobStore) -> None:
    stored, _ = blobs.put_chunk(b"stored")
    with pytest.raises(BlobNotFound, match=r"references chunk 0+, which is not stored"):
        blobs.put_manifest({"chunks": [stored, "0" * 64]})
    assert refs(blobs, stored) == 0  # the refused manifest counted nothing
    with pytest.raises(BlobError, match="'chunks' must be a list"):
        blobs.put_manifest({"chunks": "abc"})
    with pytest.raises(BlobError, match="'manifests' must be a list of manifest ids"):
        blobs.put_manifest({"chunks": [], "manifests": ["../x"]})
    with pytest.raises(BlobNotFound, match="is not a chunk id"):
        blobs.put_manifest({"chunks": ["../../secret"]})
    assert list(blobs.iter_manifests()) == []


def _tamper(store: BlobStore, manifest_id: str, edit: str) -> None:
    doc = orjson.loads(document(store, manifest_id))
    if edit == "body":
        doc["body"]["names"]["x"] = 2
    elif edit == "signature":
        sig = doc["signature"]
        doc["signature"] = ("0" if sig[0] != "0" else "1") + sig[1:]
    elif edit == "drop-signature":
        del doc["signature"]
    elif edit == "add-field":
        doc["body"]["extra"] = "__import__('os').system('id')"
    replace_document(store, manifest_id, orjson.dumps(doc))


@pytest.mark.parametrize("edit", ["body", "signature", "drop-signature", "add-field"])
def test_tampered_manifest_is_refused(blobs: BlobStore, edit: str) -> None:
    manifest_id, _ = _manifest(blobs)
    _tamper(blobs, manifest_id, edit)
    with pytest.raises(ManifestSignatureError, match=manifest_id):
        blobs.get_manifest(manifest_id)
    # a reopened store (same secret) refuses it too
    with pytest.raises(ManifestSignatureError):
        BlobStore(blobs.root, durable=False).get_manifest(manifest_id)


@pytest.mark.parametrize("content", [b"not json {", b"[1, 2]", b'"text"', b'{"body": []}'])
def test_garbled_manifest_documents_are_refused(blobs: BlobStore, content: bytes) -> None:
    manifest_id, _ = _manifest(blobs)
    replace_document(blobs, manifest_id, content)
    with pytest.raises(ManifestSignatureError, match=manifest_id):
        blobs.get_manifest(manifest_id)


def test_a_validly_signed_manifest_under_another_id_is_refused(blobs: BlobStore) -> None:
    first, _ = _manifest(blobs, b"one")
    second, _ = _manifest(blobs, b"two")
    replace_document(blobs, second, document(blobs, first))
    with pytest.raises(ManifestSignatureError, match="does not match its id"):
        blobs.get_manifest(second)


def test_a_manifest_signed_by_another_store_is_refused(tmp_path: Path) -> None:
    mine = BlobStore(tmp_path / "mine", durable=False)
    theirs = BlobStore(tmp_path / "theirs", durable=False)
    manifest_id, _ = _manifest(theirs)
    assert _manifest(mine)[0] == manifest_id  # same body: only the signature differs
    replace_document(mine, manifest_id, document(theirs, manifest_id))
    with pytest.raises(ManifestSignatureError, match="fails its signature check"):
        mine.get_manifest(manifest_id)


# ---- the secret -----------------------------------------------------------------------


def test_secret_is_private_and_reused(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    first = BlobStore(root, durable=False)
    secret = root / "secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    key = secret.read_bytes()
    assert len(key) == 32
    manifest_id, body = _manifest(first)
    reopened = BlobStore(root, durable=False)
    assert secret.read_bytes() == key
    assert reopened.get_manifest(manifest_id) == body
    assert list((root / "tmp").iterdir()) == []
    # a new secret (the old one lost) means old manifests are no longer trusted
    secret.unlink()
    fresh = BlobStore(root, durable=False)
    assert secret.read_bytes() != key
    with pytest.raises(ManifestSignatureError):
        fresh.get_manifest(manifest_id)


def test_a_loosened_secret_is_made_private_again(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    BlobStore(root)
    os.chmod(root / "secret", 0o644)
    BlobStore(root)
    assert stat.S_IMODE((root / "secret").stat().st_mode) == 0o600


def test_damaged_secret_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    BlobStore(root)
    (root / "secret").write_bytes(b"short")
    with pytest.raises(BlobError, match=r"secret .* is damaged"):
        BlobStore(root)


# ---- garbage collection ---------------------------------------------------------------


def test_gc_frees_only_unreferenced_chunks(blobs: BlobStore) -> None:
    keep_id, keep_body = _manifest(blobs, os.urandom(3000))
    drop_id, _ = _manifest(blobs, os.urandom(2000))
    shared = blobs.put_bytes(os.urandom(1000)).chunks
    both_a, _ = blobs.put_manifest({"chunks": shared, "side": "a"})
    both_b, _ = blobs.put_manifest({"chunks": shared, "side": "b"})
    loose, loose_bytes = blobs.put_chunk(os.urandom(500))
    drop_chunks = blobs.get_manifest(drop_id)["chunks"]
    before = stored_chunks(blobs)
    report = blobs.gc(live(keep_id, both_a), grace_seconds=0)
    freed = before - stored_chunks(blobs)
    assert freed == {*drop_chunks, loose}
    assert report.freed_chunks == 2 and report.freed_manifests == 2  # drop_id and both_b
    assert report.freed_bytes == 2001 + loose_bytes
    assert blobs.get_manifest(keep_id) == keep_body
    assert blobs.get_bytes(shared) and blobs.has_manifest(both_a)
    assert not blobs.has_manifest(drop_id) and not blobs.has_manifest(both_b)
    assert blobs.gc(live(keep_id, both_a), grace_seconds=0).freed_chunks == 0


def test_a_chunk_goes_when_the_last_manifest_listing_it_goes(blobs: BlobStore) -> None:
    shared, _ = blobs.put_chunk(os.urandom(300))
    first, _ = blobs.put_manifest({"chunks": [shared], "n": 1})
    second, _ = blobs.put_manifest({"chunks": [shared, shared], "n": 2})  # listed twice
    assert refs(blobs, shared) == 2
    blobs.delete_manifest(first)
    assert blobs.gc(live(second), grace_seconds=0).freed_chunks == 0
    assert refs(blobs, shared) == 1 and blobs.has_chunk(shared)
    blobs.delete_manifest(second)
    assert blobs.gc(live(), grace_seconds=0).freed_chunks == 1
    assert not blobs.has_chunk(shared)


def test_gc_follows_child_manifests(blobs: BlobStore) -> None:
    leaf, leaf_body = _manifest(blobs, b"leaf data")
    middle, _ = blobs.put_manifest({"chunks": [], "manifests": [leaf]})
    own = blobs.put_bytes(b"root data").chunks
    root, _ = blobs.put_manifest({"chunks": own, "manifests": [middle, "f" * 64]})
    blobs.gc(live(root), grace_seconds=0)
    assert blobs.get_manifest(leaf) == leaf_body
    assert blobs.get_bytes(leaf_body["chunks"]) == b"leaf data"
    assert blobs.get_bytes(own) == b"root data"
    assert blobs.gc(live(), grace_seconds=0).freed_manifests == 0  # vouched for: not asked
    blobs.mark_for_collection([root])  # its checkpoint went away
    report = blobs.gc(live(), grace_seconds=0)
    assert (report.freed_manifests, report.freed_chunks) == (3, 2)
    assert stored_chunks(blobs) == set()


def test_gc_respects_the_grace_period(blobs: BlobStore) -> None:
    young_chunk, _ = blobs.put_chunk(os.urandom(100))
    old_chunk, _ = blobs.put_chunk(os.urandom(100))
    age(blobs, old_chunk, 120)
    orphan, _ = _manifest(blobs, b"orphan")
    report = blobs.gc(live(), grace_seconds=60)
    assert stored_chunks(blobs) == {young_chunk, *blobs.get_manifest(orphan)["chunks"]}
    assert (report.freed_chunks, report.freed_manifests) == (1, 0)
    # a young, not yet registered manifest keeps even its old chunks alive
    for digest in blobs.get_manifest(orphan)["chunks"]:
        age(blobs, digest, 120)
    blobs.gc(live(), grace_seconds=60)
    assert blobs.get_bytes(blobs.get_manifest(orphan)["chunks"]) == b"orphan"
    age(blobs, orphan, 120)
    report = blobs.gc(live(), grace_seconds=60)
    assert not blobs.has_manifest(orphan)
    assert (report.freed_manifests, report.freed_chunks) == (1, 1)


def test_reusing_an_old_chunk_renews_its_grace(blobs: BlobStore) -> None:
    """A capture that dedups against an old unreferenced chunk must not lose it to gc."""
    data = os.urandom(4000)
    digest, _ = blobs.put_chunk(data)
    age(blobs, digest, 3600)
    assert blobs.put_chunk(data) == (digest, 0)  # dedup hit, before the manifest exists
    blobs.gc(live(), grace_seconds=60)
    assert blobs.get_chunk(digest) == data
    manifest_id, _ = blobs.put_manifest({"chunks": [digest]})
    age(blobs, manifest_id, 3600)
    assert blobs.put_manifest({"chunks": [digest]}) == (manifest_id, 0)
    blobs.gc(live(), grace_seconds=60)
    assert blobs.has_manifest(manifest_id)


def test_gc_clears_stale_temp_files(blobs: BlobStore) -> None:
    stale = blobs.root / "tmp" / ".dead.tmp"
    stale.write_bytes(b"left by a killed writer")
    fresh = blobs.root / "tmp" / ".live.tmp"
    fresh.write_bytes(b"being written right now")
    age_file(stale, 120)
    blobs.gc(live(), grace_seconds=60)
    assert not stale.exists() and fresh.exists()


def test_a_tampered_manifest_never_frees_what_it_names(blobs: BlobStore) -> None:
    """A dead manifest whose signature fails is removed, but what it lists stays."""
    manifest_id, body = _manifest(blobs, b"precious")
    _tamper(blobs, manifest_id, "body")
    report = blobs.gc(live(), grace_seconds=0)
    assert report.freed_manifests == 1 and report.freed_chunks == 0
    assert blobs.get_bytes(body["chunks"]) == b"precious"
    # a live one is not even read: tampering cannot make gc free anything
    other, other_body = _manifest(blobs, b"other")
    _tamper(blobs, other, "drop-signature")
    assert blobs.gc(live(other), grace_seconds=0) == blobs.gc(live(other), grace_seconds=0)
    assert blobs.get_bytes(other_body["chunks"]) == b"other"


def test_gc_cost_follows_the_garbage_not_the_store(
    blobs: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Live manifests vouched for are neither asked about nor read by a collection."""
    vouched = [_manifest(blobs, f"live {i}".encode())[0] for i in range(300)]
    blobs.mark_referenced(vouched)
    garbage = [_manifest(blobs, f"dead {i}".encode())[0] for i in range(3)]
    asked: list[str] = []
    read: list[str] = []
    verify = BlobStore.verified_body

    def counting_verify(store: BlobStore, manifest_id: str, doc: bytes) -> dict[str, Any]:
        read.append(manifest_id)
        return verify(store, manifest_id, doc)

    def referenced(ids: Sequence[str]) -> set[str]:
        asked.extend(ids)
        return set()

    monkeypatch.setattr(BlobStore, "verified_body", counting_verify)
    report = blobs.gc(referenced, grace_seconds=0)
    assert (report.freed_manifests, report.freed_chunks) == (3, 3)
    assert sorted(asked) == sorted(read) == sorted(garbage)
    asked.clear()
    assert blobs.gc(referenced, grace_seconds=0).freed_manifests == 0 and asked == []


def test_marked_manifests_are_asked_about_again(blobs: BlobStore) -> None:
    first, _ = _manifest(blobs, b"first")
    second, _ = _manifest(blobs, b"second")
    blobs.mark_referenced([first, second, "0" * 64, "not an id"])
    blobs.gc(live(), grace_seconds=0)
    assert blobs.has_manifest(first) and blobs.has_manifest(second)
    blobs.mark_for_collection([first, second])
    assert blobs.gc(live(second), grace_seconds=0).freed_manifests == 1
    assert not blobs.has_manifest(first) and blobs.has_manifest(second)


# ---- a store written by an older release ------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "fixtures"
RELEASE_BLOBS = FIXTURES / "release_store" / "blobs"


def _old_layout(tmp_path: Path) -> tuple[Path, dict[str, dict[str, Any]], set[str]]:
    """A copy of the release fixture's blob store; its manifests' bodies; its chunk files."""
    root = tmp_path / "old-blobs"
    shutil.copytree(RELEASE_BLOBS, root)
    bodies = {
        path.stem: orjson.loads(path.read_bytes())["body"]
        for path in (root / "manifests").glob("*.json")
    }
    files = {path.name for path in (root / "chunks").glob("*/*")}
    return root, bodies, files


def test_an_old_layout_store_is_imported_in_place(tmp_path: Path) -> None:
    root, bodies, files = _old_layout(tmp_path)
    store = BlobStore(root, durable=False)
    assert not (root / "manifests").exists()
    assert set(store.iter_manifests()) == set(bodies)
    for manifest_id, body in bodies.items():
        assert store.get_manifest(manifest_id) == body
        assert store.get_bytes(body["chunks"])
    listed = {c for body in bodies.values() for c in body["chunks"]}
    assert stored_chunks(store) == files  # every chunk file, listed or not
    for digest in files:
        assert refs(store, digest) == sum(digest in body["chunks"] for body in bodies.values())
        assert chunk_file(store, digest).exists() == (
            len(stored_form(store, digest)) >= SMALL_OBJECT_LIMIT
        )
    assert any(not chunk_file(store, d).exists() for d in files)  # small ones moved inline
    # what the old release left unreferenced (a deleted snapshot's chunks) is garbage
    for digest in files:
        age(store, digest, 3600)
    for manifest_id in bodies:
        age(store, manifest_id, 3600)
    report = store.gc(live(*bodies), grace_seconds=60)
    assert report.freed_manifests == 0 and report.freed_chunks == len(files - listed) > 0
    assert stored_chunks(store) == listed


def test_an_interrupted_import_finishes_at_the_next_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ditto_jupyter.core.blobs import legacy as blob_legacy

    clean_root, bodies, _ = _old_layout(tmp_path / "clean")
    clean = BlobStore(clean_root, durable=False)
    root, _, _ = _old_layout(tmp_path / "killed")
    monkeypatch.setattr(blob_legacy, "BATCH", 3)
    removals = 0
    remove = blob_legacy._remove

    def killed_after_first_batch(paths: list[Path]) -> None:
        nonlocal removals
        removals += 1
        if removals == 2:  # the second batch committed, then the process died
            raise KeyboardInterrupt
        remove(paths)

    monkeypatch.setattr(blob_legacy, "_remove", killed_after_first_batch)
    with pytest.raises(KeyboardInterrupt):
        BlobStore(root, durable=False)
    monkeypatch.setattr(blob_legacy, "_remove", remove)
    finished = BlobStore(root, durable=False)
    assert not (root / "manifests").exists()
    assert set(finished.iter_manifests()) == set(bodies)
    for digest in stored_chunks(clean):
        assert refs(finished, digest) == refs(clean, digest)
        assert finished.get_chunk(digest) == clean.get_chunk(digest)


# ---- several processes ----------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from ditto_jupyter.core.blobs import BlobStore
    root, go = Path(sys.argv[1]), Path(sys.argv[2])
    data = b"".join(i.to_bytes(4, "big") * 1024 for i in range(1024))  # 4 MiB, no repeats
    while not go.exists():
        time.sleep(0.001)
    store = BlobStore(root)  # the secret is created by whichever process is first
    stored = store.put_bytes(data, chunk_size=64 * 1024)
    manifest_id, _ = store.put_manifest({"chunks": stored.chunks})
    print(json.dumps({"manifest": manifest_id, "written": stored.bytes_written}))
    """
)


def test_processes_writing_the_same_content_agree(tmp_path: Path) -> None:
    root, go = tmp_path / "blobs", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(root), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate()
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    assert len({r["manifest"] for r in results}) == 1
    store = BlobStore(root)
    assert stat.S_IMODE((root / "secret").stat().st_mode) == 0o600
    body = store.get_manifest(results[0]["manifest"])  # every writer signed with one secret
    expected = b"".join(i.to_bytes(4, "big") * 1024 for i in range(1024))
    assert store.get_bytes(body["chunks"]) == expected
    assert stored_chunks(store) == set(body["chunks"]) and len(body["chunks"]) == 64
    assert all(store.get_chunk(d) for d in body["chunks"])
    assert list((root / "tmp").iterdir()) == []
    # together they wrote between one and three copies' worth, never a torn chunk
    assert 0 < sum(r["written"] for r in results) <= 3 * store.stored_bytes()


_KILLED_WRITER = textwrap.dedent(
    """
    import os, sys
    from ditto_jupyter.core.blobs import BlobStore
    store = BlobStore(sys.argv[1])
    print("ready", flush=True)
    while True:
        stored = store.put_bytes(os.urandom(300 * 1024) + b"z" * 300 * 1024, chunk_size=128 * 1024)
        store.put_manifest({"chunks": stored.chunks})
    """
)


@pytest.mark.slow
def test_a_killed_writer_leaves_no_torn_chunk_or_manifest(tmp_path: Path) -> None:
    """SIGKILL at random points: every chunk and manifest on disk is whole and valid."""
    root = tmp_path / "blobs"
    rng = random.Random()
    for _ in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", _KILLED_WRITER, str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n", child.communicate()[1]
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=rng.uniform(0.05, 0.5))
        assert child.returncode is None, child.communicate()[1]
        child.send_signal(signal.SIGKILL)
        child.communicate()
    store = BlobStore(root)
    manifests = list(store.iter_manifests())
    assert manifests, "the writer never got as far as a manifest"
    for manifest_id in manifests:
        assert store.get_bytes(store.get_manifest(manifest_id)["chunks"])
    for digest, _ in store.iter_chunks():
        store.get_chunk(digest)  # raises on a torn or corrupt chunk
    # half-written temp files stay in tmp/, where gc clears them once they are stale
    for leftover in (root / "tmp").iterdir():
        age_file(leftover, 120)
    store.gc(live(*manifests), grace_seconds=60)
    assert list((root / "tmp").iterdir()) == []


def test_threads_share_one_store_safely(tmp_path: Path) -> None:
    """Compressible writes from many threads at once all read back (no shared compressor)."""
    from concurrent.futures import ThreadPoolExecutor

    store = BlobStore(tmp_path / "blobs")
    payloads = [(f"thread {i} ".encode() * 50_000)[: 300_000 + i] for i in range(16)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        stored = list(pool.map(store.put_bytes, payloads))
    manifest_id, _ = store.put_manifest({"chunks": [c for s in stored for c in s.chunks]})
    assert store.get_manifest(manifest_id)
    for payload, result in zip(payloads, stored, strict=True):
        assert store.get_bytes(result.chunks) == payload


def test_a_compressed_manifest_of_the_old_layout_is_imported_and_still_checked(
    tmp_path: Path,
) -> None:
    """The release before the object index wrote big manifests as b"Z" + zstd files."""
    writer = BlobStore(tmp_path / "writer")
    digest, _ = writer.put_chunk(os.urandom(SMALL_OBJECT_LIMIT * 2))  # a chunk file
    body = {"chunks": [digest], "names": [f"variable number {i}" for i in range(200)]}
    manifest_id, _ = writer.put_manifest(body)
    stored = manifest_document(writer.root, manifest_id)
    assert stored[:1] == CODEC_ZSTD
    old = tmp_path / "old"
    (old / "manifests").mkdir(parents=True)
    shutil.copy(writer.root / "secret", old / "secret")
    shutil.copytree(writer.root / "chunks", old / "chunks")
    (old / "manifests" / f"{manifest_id}.json").write_bytes(stored)

    imported = BlobStore(old)
    assert imported.get_manifest(manifest_id) == body
    assert not (old / "manifests").exists()
    # the chunk it lists was counted: a collection that keeps the manifest keeps the chunk
    imported.gc(lambda ids: [i for i in ids if i == manifest_id], grace_seconds=0)
    assert imported.get_bytes([digest]) == writer.get_bytes([digest])
    tampered = stored[:-4] + b"\x00\x00\x00\x00"
    write_manifest_document(old, manifest_id, tampered)
    with pytest.raises(ManifestSignatureError):
        imported.get_manifest(manifest_id)

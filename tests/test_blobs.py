"""Blob store: chunks, dedup, compression, integrity, signed manifests, secret, gc, processes."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_jupyter.core.blobs import (
    CODEC_RAW,
    CODEC_ZSTD,
    BlobError,
    BlobIntegrityError,
    BlobNotFound,
    BlobStore,
    ManifestSignatureError,
)

KIB = 1024


def chunk_file(store: BlobStore, digest: str) -> Path:
    """Where a chunk lives on disk (the documented layout: chunks/ab/<digest>)."""
    return store.root / "chunks" / digest[:2] / digest


def manifest_file(store: BlobStore, manifest_id: str) -> Path:
    """Where a manifest lives on disk."""
    return store.root / "manifests" / f"{manifest_id}.json"


def chunk_files(store: BlobStore) -> set[str]:
    """Names of every chunk file on disk."""
    return {p.name for p in (store.root / "chunks").glob("*/*")}


def age(path: Path, seconds: float) -> None:
    """Make a file look `seconds` old to the garbage collector."""
    then = time.time() - seconds
    os.utime(path, (then, then))


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
    assert chunk_files(blobs) == set(first.chunks)
    again = blobs.put_bytes(block * 3 + b"tail", chunk_size=64 * KIB)
    assert again.chunks == first.chunks
    assert again.bytes_written == 0
    digest, written = blobs.put_chunk(block)
    assert (digest, written) == (first.chunks[0], 0)
    assert blobs.stored_bytes() == first.bytes_written


def test_zstd_for_compressible_raw_for_random(blobs: BlobStore) -> None:
    text = compressible(256 * KIB)
    noise = os.urandom(256 * KIB)
    (text_id,) = blobs.put_bytes(text, chunk_size=len(text)).chunks
    (noise_id,) = blobs.put_bytes(noise, chunk_size=len(noise)).chunks
    small_id, _ = blobs.put_chunk(b"a" * 100)  # too small to be worth a frame
    text_raw = chunk_file(blobs, text_id).read_bytes()
    assert text_raw[:1] == CODEC_ZSTD and len(text_raw) < len(text) // 20
    noise_raw = chunk_file(blobs, noise_id).read_bytes()
    assert noise_raw[:1] == CODEC_RAW and noise_raw[1:] == noise
    assert chunk_file(blobs, small_id).read_bytes() == CODEC_RAW + b"a" * 100
    assert blobs.get_chunk(text_id) == text
    assert blobs.get_chunk(noise_id) == noise
    # mostly random with a compressible start: the whole chunk is judged, not the sample
    mixed = compressible(64 * KIB) + os.urandom(512 * KIB)
    (mixed_id,) = blobs.put_bytes(mixed, chunk_size=len(mixed)).chunks
    assert chunk_file(blobs, mixed_id).read_bytes()[:1] == CODEC_RAW
    assert blobs.get_chunk(mixed_id) == mixed


@pytest.mark.parametrize("kind", ["raw", "zstd"])
@pytest.mark.parametrize("where", [0, 1, -1])
def test_a_flipped_byte_is_detected(blobs: BlobStore, kind: str, where: int) -> None:
    data = os.urandom(8 * KIB) if kind == "raw" else compressible(64 * KIB)
    digest, _ = blobs.put_chunk(data)
    path = chunk_file(blobs, digest)
    raw = bytearray(path.read_bytes())
    assert raw[:1] == (CODEC_RAW if kind == "raw" else CODEC_ZSTD)
    raw[where] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(BlobIntegrityError, match=digest):
        blobs.get_chunk(digest)
    with pytest.raises(BlobIntegrityError):
        blobs.get_bytes([digest])


def test_missing_and_malformed_chunk_ids(blobs: BlobStore) -> None:
    with pytest.raises(BlobNotFound, match="is missing from the blob store"):
        blobs.get_chunk("0" * 64)
    for bad in ["", "abc", "../" + "0" * 61, "G" * 64, "0" * 64 + "/x"]:
        with pytest.raises(BlobNotFound, match="is not a chunk id"):
            blobs.get_chunk(bad)
    assert not blobs.has_chunk("0" * 64)


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
    assert blobs.delete_manifest(manifest_id) is True
    assert blobs.delete_manifest(manifest_id) is False
    with pytest.raises(BlobNotFound, match="is missing"):
        blobs.get_manifest(manifest_id)


def test_manifest_must_reference_stored_chunks(blobs: BlobStore) -> None:
    with pytest.raises(BlobNotFound, match=r"references chunk 0+, which is not stored"):
        blobs.put_manifest({"chunks": ["0" * 64]})
    with pytest.raises(BlobError, match="'chunks' must be a list"):
        blobs.put_manifest({"chunks": "abc"})
    assert list(blobs.iter_manifests()) == []


def _tamper(path: Path, edit: str) -> None:
    document = orjson.loads(path.read_bytes())
    if edit == "body":
        document["body"]["names"]["x"] = 2
    elif edit == "signature":
        sig = document["signature"]
        document["signature"] = ("0" if sig[0] != "0" else "1") + sig[1:]
    elif edit == "drop-signature":
        del document["signature"]
    elif edit == "add-field":
        document["body"]["extra"] = "__import__('os').system('id')"
    path.write_bytes(orjson.dumps(document))


@pytest.mark.parametrize("edit", ["body", "signature", "drop-signature", "add-field"])
def test_tampered_manifest_is_refused(blobs: BlobStore, edit: str) -> None:
    manifest_id, _ = _manifest(blobs)
    _tamper(manifest_file(blobs, manifest_id), edit)
    with pytest.raises(ManifestSignatureError, match=manifest_id):
        blobs.get_manifest(manifest_id)
    # a reopened store (same secret) refuses it too
    with pytest.raises(ManifestSignatureError):
        BlobStore(blobs.root, durable=False).get_manifest(manifest_id)


@pytest.mark.parametrize("content", [b"not json {", b"[1, 2]", b'"text"', b'{"body": []}'])
def test_garbled_manifest_files_are_refused(blobs: BlobStore, content: bytes) -> None:
    manifest_id, _ = _manifest(blobs)
    manifest_file(blobs, manifest_id).write_bytes(content)
    with pytest.raises(ManifestSignatureError, match=manifest_id):
        blobs.get_manifest(manifest_id)


def test_a_validly_signed_manifest_under_another_id_is_refused(blobs: BlobStore) -> None:
    first, _ = _manifest(blobs, b"one")
    second, _ = _manifest(blobs, b"two")
    manifest_file(blobs, second).write_bytes(manifest_file(blobs, first).read_bytes())
    with pytest.raises(ManifestSignatureError, match="does not match its id"):
        blobs.get_manifest(second)


def test_a_manifest_signed_by_another_store_is_refused(tmp_path: Path) -> None:
    mine = BlobStore(tmp_path / "mine", durable=False)
    theirs = BlobStore(tmp_path / "theirs", durable=False)
    manifest_id, _ = _manifest(theirs)
    _manifest(mine)  # same chunk content, so only the signature can tell them apart
    manifest_file(mine, manifest_id).write_bytes(manifest_file(theirs, manifest_id).read_bytes())
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
    before = chunk_files(blobs)
    report = blobs.gc([keep_id, both_a], grace_seconds=0)
    freed = before - chunk_files(blobs)
    assert freed == {*drop_chunks, loose}
    assert report.freed_chunks == 2 and report.freed_manifests == 2  # drop_id and both_b
    assert report.freed_bytes == 2001 + loose_bytes
    assert blobs.get_manifest(keep_id) == keep_body
    assert blobs.get_bytes(shared) and blobs.has_manifest(both_a)
    assert not blobs.has_manifest(drop_id) and not blobs.has_manifest(both_b)
    assert blobs.gc([keep_id, both_a], grace_seconds=0).freed_chunks == 0


def test_gc_follows_child_manifests(blobs: BlobStore) -> None:
    leaf, leaf_body = _manifest(blobs, b"leaf data")
    middle, _ = blobs.put_manifest({"chunks": [], "manifests": [leaf]})
    own = blobs.put_bytes(b"root data").chunks
    root, _ = blobs.put_manifest({"chunks": own, "manifests": [middle, "f" * 64]})
    blobs.gc([root], grace_seconds=0)
    assert blobs.get_manifest(leaf) == leaf_body
    assert blobs.get_bytes(leaf_body["chunks"]) == b"leaf data"
    assert blobs.get_bytes(own) == b"root data"
    report = blobs.gc([], grace_seconds=0)
    assert (report.freed_manifests, report.freed_chunks) == (3, 2)
    assert chunk_files(blobs) == set()


def test_gc_respects_the_grace_period(blobs: BlobStore) -> None:
    young_chunk, _ = blobs.put_chunk(os.urandom(100))
    old_chunk, _ = blobs.put_chunk(os.urandom(100))
    age(chunk_file(blobs, old_chunk), 120)
    orphan, _ = _manifest(blobs, b"orphan")
    report = blobs.gc([], grace_seconds=60)
    assert chunk_files(blobs) == {young_chunk, *blobs.get_manifest(orphan)["chunks"]}
    assert (report.freed_chunks, report.freed_manifests) == (1, 0)
    # a young, not yet registered manifest keeps even its old chunks alive
    for digest in blobs.get_manifest(orphan)["chunks"]:
        age(chunk_file(blobs, digest), 120)
    blobs.gc([], grace_seconds=60)
    assert blobs.get_bytes(blobs.get_manifest(orphan)["chunks"]) == b"orphan"
    age(manifest_file(blobs, orphan), 120)
    blobs.gc([], grace_seconds=60)
    assert not blobs.has_manifest(orphan)


def test_reusing_an_old_chunk_renews_its_grace(blobs: BlobStore) -> None:
    """A capture that dedups against an old unreferenced chunk must not lose it to gc."""
    data = os.urandom(4000)
    digest, _ = blobs.put_chunk(data)
    age(chunk_file(blobs, digest), 3600)
    assert blobs.put_chunk(data) == (digest, 0)  # dedup hit, before the manifest exists
    blobs.gc([], grace_seconds=60)
    assert blobs.get_chunk(digest) == data
    manifest_id, _ = blobs.put_manifest({"chunks": [digest]})
    age(manifest_file(blobs, manifest_id), 3600)
    assert blobs.put_manifest({"chunks": [digest]}) == (manifest_id, 0)
    blobs.gc([], grace_seconds=60)
    assert blobs.has_manifest(manifest_id)


def test_gc_clears_stale_temp_files(blobs: BlobStore) -> None:
    stale = blobs.root / "tmp" / ".dead.tmp"
    stale.write_bytes(b"left by a killed writer")
    fresh = blobs.root / "tmp" / ".live.tmp"
    fresh.write_bytes(b"being written right now")
    age(stale, 120)
    blobs.gc([], grace_seconds=60)
    assert not stale.exists() and fresh.exists()


def test_gc_refuses_to_trust_a_tampered_live_manifest(blobs: BlobStore) -> None:
    manifest_id, _ = _manifest(blobs, b"precious")
    _tamper(manifest_file(blobs, manifest_id), "body")
    before = chunk_files(blobs)
    with pytest.raises(ManifestSignatureError):
        blobs.gc([manifest_id], grace_seconds=0)
    assert chunk_files(blobs) == before


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
    assert chunk_files(store) == set(body["chunks"]) and len(body["chunks"]) == 64
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
        age(leftover, 120)
    store.gc(manifests, grace_seconds=60)
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

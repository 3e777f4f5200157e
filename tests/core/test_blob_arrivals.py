"""A fetch's arrival log read by a restore: each blob is read as it lands, and a reader is
told at once when it will not come (the fetch failed, its writer died, it does not bring it).

The store a reader gets from `BlobStore.reading_arrivals` waits; the store it came from,
which the fetch itself uses, never does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ditto_jupyter.core.blobs import BlobNotFound, BlobStore, ManifestSignatureError, codec
from ditto_jupyter.core.blobs.arrivals import ArrivalLog, FetchFailed
from tests.support.arrival_readers import Reading, wait_for_reader

MIB = 1 << 20


def waits(reading: Reading, log: str) -> None:
    """Return once `reading` waits in `log`: a probe line (a chunk nobody asked for) is
    appended, and the reader has read it and still waits."""
    probe = codec.digest(os.urandom(16))
    with open(log, "ab") as handle:  # as the writer appends: one line
        handle.write(b'{"chunk":"%s","stored":""}\n' % probe.encode())
    assert wait_for_reader(os.getpid(), log, given_up=lambda: not reading.is_alive())
    assert reading.is_alive()


def stored_form(data: bytes) -> bytes:
    tag, payload = codec.encode(data, 8)
    return tag + bytes(payload)


def staged(tmp_path: Path, name: str, stored: bytes) -> str:
    """A chunk's stored form in a file of its own, as a fetch stages it."""
    path = tmp_path / f"staged-{name}"
    path.write_bytes(stored)
    return str(path)


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    """A data directory's store that holds none of what the fetch brings."""
    return BlobStore(tmp_path / "blobs")


def test_a_reader_reads_each_blob_as_it_lands(tmp_path: Path, store: BlobStore) -> None:
    big, small = os.urandom(2 * MIB), b"a small chunk"
    big_name, small_name = codec.digest(big), codec.digest(small)
    signed = store.sign_manifest({"kind": "test", "chunks": [big_name, small_name]})
    log = ArrivalLog(store.root / "tmp", place=store.place)
    try:
        with store.reading_arrivals(log.path) as reader:
            manifest = Reading(lambda: reader.get_manifest(signed.manifest_id))
            waits(manifest, log.path)
            log.manifest(signed.manifest_id, signed.document)
            log.announce([big_name, small_name])
            assert manifest.outcome() == {"kind": "test", "chunks": [big_name, small_name]}

            target = bytearray(len(big))
            chunk = Reading(lambda: reader.read_chunk_into(big_name, memoryview(target)))
            waits(chunk, log.path)
            log.chunk(big_name, file=staged(tmp_path, big_name, stored_form(big)))
            chunk.outcome()
            assert target == big

            inline = Reading(lambda: reader.get_chunk(small_name))
            waits(inline, log.path)
            log.chunk(small_name, stored=stored_form(small))
            assert inline.outcome() == small
            log.done()
        assert not store.has_manifest(signed.manifest_id)  # read, and recorded nowhere
        assert not store.has_chunk(big_name)
    finally:
        log.close()


def test_a_reader_waiting_is_told_at_once_when_the_fetch_fails(
    tmp_path: Path, store: BlobStore
) -> None:
    name = codec.digest(b"never comes")
    log = ArrivalLog(store.root / "tmp", place=store.place)
    try:
        with store.reading_arrivals(log.path) as reader:
            log.announce([name])
            waiting = Reading(lambda: reader.get_chunk(name))
            waits(waiting, log.path)
            log.failed(RuntimeError("reading chunks/x in s3://bucket failed: it cannot be reached"))
            with pytest.raises(FetchFailed, match="cannot be reached"):
                waiting.outcome()
    finally:
        log.close()


WRITER = """
import sys, time
from pathlib import Path
from ditto_jupyter.core.blobs.arrivals import ArrivalLog
log = ArrivalLog(Path(sys.argv[1]), place="here")
log.announce([sys.argv[2]])
print(log.path, flush=True)
time.sleep(3600)
"""


def test_a_reader_waiting_on_a_fetch_whose_server_died_is_told_at_once(
    store: BlobStore,
) -> None:
    name = codec.digest(b"in flight when the server died")
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store.root / "tmp"), name],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert writer.stdout is not None
        path = writer.stdout.readline().strip()
        with store.reading_arrivals(path) as reader:
            waiting = Reading(lambda: reader.get_chunk(name))
            waits(waiting, path)
            writer.send_signal(signal.SIGKILL)  # no end line: only its lock goes
            with pytest.raises(FetchFailed, match="ended before it came"):
                waiting.outcome()
    finally:
        writer.kill()
        writer.wait()


def test_what_the_fetch_does_not_bring_is_missing_at_once(store: BlobStore) -> None:
    log = ArrivalLog(store.root / "tmp", place=store.place)
    try:
        with store.reading_arrivals(log.path) as reader:
            log.announce([])  # every manifest is in by now, and no chunk comes
            with pytest.raises(BlobNotFound):
                reader.get_chunk(codec.digest(b"not fetched"))
            with pytest.raises(BlobNotFound):
                reader.get_manifest("ab" * 32)
    finally:
        log.close()


def test_a_manifest_the_shared_secret_does_not_sign_is_refused_from_the_log(
    tmp_path: Path, store: BlobStore
) -> None:
    other = BlobStore(tmp_path / "another-deployment")  # another secret
    signed = other.sign_manifest({"kind": "test", "chunks": []})
    log = ArrivalLog(store.root / "tmp", place=store.place)
    try:
        log.manifest(signed.manifest_id, signed.document)
        with store.reading_arrivals(log.path) as reader, pytest.raises(ManifestSignatureError):
            reader.get_manifest(signed.manifest_id)
    finally:
        log.close()


def test_the_store_the_fetch_uses_never_reads_its_log(store: BlobStore) -> None:
    signed = store.sign_manifest({"kind": "test", "chunks": []})
    name = codec.digest(b"x")
    log = ArrivalLog(store.root / "tmp", place=store.place)
    try:
        with store.reading_arrivals(log.path) as reader:
            log.failed(RuntimeError("the fetch failed"))  # a reader of the log is told so
            with pytest.raises(FetchFailed):
                reader.get_chunk(name)
            assert not store.has_manifest(signed.manifest_id)  # the store as it is
            with pytest.raises(BlobNotFound):
                store.get_chunk(name)
    finally:
        log.close()

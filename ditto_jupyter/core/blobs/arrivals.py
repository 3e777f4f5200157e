"""What a fetch still under way has brought: a log the fetch writes and a restore reads.

A resume on a server that lacks a checkpoint's blobs fetches them from the object store
while the kernel restores, so the kernel reads each chunk as soon as it has landed instead
of after the whole fetch (`replica.BucketReplica.stage`). Nothing the fetch brings is
recorded in the store until the restore is over: its chunks wait staged in the fetch's
bulk write, and its manifests are in the log only. The log, `tmp/arrivals-<hex>` under the
store's root, is a file of JSON lines:

    {"manifest": id, "document": base64}     a manifest fetched and verified
    {"chunks": [name, ...]}                  every chunk the fetch brings (once the
                                             manifests are all in)
    {"chunk": name, "file": path}            a big chunk landed: its staged file
    {"chunk": name, "stored": base64}        a small chunk landed: its stored form
    {"end": "done"} | {"end": "failed", "error": sentence}

The writer (`ArrivalLog`) holds an exclusive flock on the log while it lives. A reader
(`Arrivals`, opened by `BlobStore.reading_arrivals`) that waits for a chunk or a manifest
learns at once that it will not come: the log ended (`failed`, or `done` without it), the
chunks' line does not list it, or the lock is free with no end line (the writer died).
Nothing is ever waited for that the fetch does not bring, so a reader never hangs on it.

A log is removed when its fetch is committed or given up; one left by a server that died is
a stale temporary file, removed by garbage collection (`BlobStore.clear_stale_temp_files`).
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import orjson

from ditto_jupyter.core.blobs.errors import BlobError, os_failure

#: Name prefix of an arrival log under the store's `tmp/`.
ARRIVALS_PREFIX = "arrivals-"
#: Seconds a reader sleeps between two looks at the log while it waits.
POLL_S = 0.002
_log = logging.getLogger(__name__)
T = TypeVar("T")


class FetchFailed(BlobError):
    """The fetch a reader waited on failed, or its server died, before the blob came."""


class ArrivalLog:
    """The fetch's side: append what landed; the lock says the fetch is alive."""

    def __init__(self, staging: Path, *, place: str) -> None:
        self.path = str(staging / f"{ARRIVALS_PREFIX}{secrets.token_hex(8)}")
        self._place = place
        self._lock = threading.Lock()
        self._ended = False
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        try:
            self._fd: int | None = os.open(self.path, flags, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise os_failure(exc, place, "starting a fetch's arrival log") from None

    def manifest(self, manifest_id: str, document: bytes) -> None:
        """A manifest is fetched and verified."""
        self._append({"manifest": manifest_id, "document": _text(document)})

    def announce(self, chunks: Sequence[str]) -> None:
        """Every chunk the fetch brings (all the manifests are in)."""
        self._append({"chunks": list(chunks)})

    def chunk(self, name: str, *, file: str | None = None, stored: bytes | None = None) -> None:
        """A chunk landed: staged in `file`, or its stored form (a small chunk)."""
        if file is not None:
            self._append({"chunk": name, "file": file})
        else:
            assert stored is not None
            self._append({"chunk": name, "stored": _text(stored)})

    def done(self) -> None:
        """Everything announced has landed."""
        self._append({"end": "done"}, end=True)

    def failed(self, error: BaseException) -> None:
        """The fetch failed: readers waiting are told at once (only the first end counts;
        a failure to say so is logged, and the readers learn it when the log goes)."""
        try:
            self._append({"end": "failed", "error": str(error) or type(error).__name__}, end=True)
        except BlobError as exc:
            _log.warning("ditto: could not tell a restore that its fetch failed: %s", exc)

    def close(self) -> None:
        """Remove the log and let its lock go (nothing may read it any more)."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError as exc:  # a stale temporary file for garbage collection
            _log.warning("ditto: could not remove the arrival log %s: %s", self.path, exc)
        finally:
            os.close(fd)

    def _append(self, record: dict[str, Any], *, end: bool = False) -> None:
        line = memoryview(orjson.dumps(record) + b"\n")
        with self._lock:
            if self._ended:
                return  # the log is over (the first failure said so)
            if self._fd is None:
                raise BlobError("this fetch's arrival log is closed")
            self._ended = end
            try:
                while line:  # one line at a time: readers never see two interleaved
                    line = line[os.write(self._fd, line) :]
            except OSError as exc:
                raise os_failure(exc, self._place, "writing a fetch's arrival log") from None


class Arrivals:
    """A reader's side: the manifests and chunks of one arrival log, waited for."""

    def __init__(self, path: str, *, poll_s: float = POLL_S) -> None:
        self.path = path
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._buffer = b""
        self._manifests: dict[str, bytes] = {}
        self._chunks: dict[str, dict[str, Any]] = {}
        self._announced: set[str] | None = None
        self._end: str | None = None
        self._error = ""
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise FetchFailed(
                f"the fetch this restore reads from is over or gone (no log {path})"
            ) from None

    def close(self) -> None:
        """Stop reading the log."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def manifest_document(self, manifest_id: str) -> bytes | None:
        """The signed document of a manifest the fetch brings, once it is in; None when
        the fetch does not bring it."""
        return self._wait(
            lambda: self._manifests.get(manifest_id),
            lambda: self._announced is not None or self._end == "done",
            f"manifest {manifest_id}",
        )

    def chunk(self, name: str) -> bytes | None:
        """The stored form of a chunk the fetch brings, once it has landed; None when the
        fetch does not bring it."""
        record = self._wait(
            lambda: self._chunks.get(name),
            lambda: (
                (self._announced is not None and name not in self._announced) or self._end == "done"
            ),
            f"chunk {name}",
        )
        if record is None:
            return None
        if "stored" in record:
            return base64.b64decode(record["stored"])
        try:
            with open(record["file"], "rb") as handle:
                return handle.read()
        except FileNotFoundError:  # the fetch was given up meanwhile
            raise FetchFailed(f"the fetch of chunk {name} was given up") from None
        except OSError as exc:
            raise BlobError(f"reading fetched chunk {name} failed: {exc}") from None

    def _wait(
        self, found: Callable[[], T | None], settled: Callable[[], bool], what: str
    ) -> T | None:
        """Until `found` answers, or `settled` says it never will; FetchFailed when the
        fetch fails or its writer is gone first."""
        while True:
            with self._lock:
                # Look at the writer first: once it let go, this read takes in its last lines.
                writer_gone = self._writer_gone()
                self._read()
                answer = found()
                if answer is not None:
                    return answer
                if self._end == "failed":
                    raise FetchFailed(f"fetching {what} failed: {self._error}")
                if settled():
                    return None
                if writer_gone:
                    raise FetchFailed(
                        f"the fetch of {what} ended before it came (its server stopped)"
                    )
            time.sleep(self._poll_s)

    def _read(self) -> None:
        """Take in the lines appended since the last look (the lock is held)."""
        fd = self._fd
        if fd is None:
            raise FetchFailed("this restore stopped reading its fetch's log")
        while True:
            data = os.read(fd, 1 << 20)
            if not data:
                break
            self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._take(orjson.loads(line))

    def _take(self, record: dict[str, Any]) -> None:
        if "manifest" in record:
            self._manifests[record["manifest"]] = base64.b64decode(record["document"])
        elif "chunk" in record:
            self._chunks[record["chunk"]] = record
        elif "chunks" in record:
            self._announced = set(record["chunks"])
        elif "end" in record:
            self._end = str(record["end"])
            self._error = str(record.get("error", ""))

    def _writer_gone(self) -> bool:
        """Whether the writer let its lock go (it closed the log, or its process died)."""
        fd = self._fd
        assert fd is not None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")

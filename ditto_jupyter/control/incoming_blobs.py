"""A checkpoint's variables fetched from the object store while the kernel restores them.

A resume (or a checkout) on a server that lacks the blobs of a checkpoint's variables does
not fetch them all before the kernel starts reading: `IncomingBlobs` fetches them on a
thread into a bulk write of the local store, in the order the restore reads them, and
writes an arrival log (`core.blobs.arrivals`) that the kernel's restore waits on for each
manifest and chunk it lacks. So the fetch and the restore overlap, chunk by chunk.

Nothing is recorded until the restore is over: `commit` then waits for the rest of the
fetch and records it in one bulk write, as a fetch before a restore does. When anything
fails first (a chunk the bucket no longer has, a bucket that stops answering, a chunk that
fails its check in the kernel, a kernel that dies), the fetch is given up: what it staged
goes, the local store is as it was, and the error said is the fetch's own when the fetch
failed (the kernel's restore, told at once through the log, fails because of it).

The fetch holds a write intent on the bucket (`bucket_gc`) from its start until it is
committed or given up.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from ditto_jupyter.core.blobs.arrivals import ArrivalLog
from ditto_jupyter.core.blobs.replica import BucketReplica, FetchCancelled, StagedFetch

_log = logging.getLogger(__name__)


class IncomingBlobs:
    """One fetch a restore reads as it lands (see the module); `log` is None when there is
    no object store, and then nothing is fetched."""

    def __init__(
        self,
        replica: BucketReplica | None,
        intent: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._replica = replica
        self._intent = intent
        self._cancelled = threading.Event()
        self._held = contextlib.ExitStack()
        self._arrivals: ArrivalLog | None = None
        self._staging: asyncio.Future[StagedFetch] | None = None
        self._staged: StagedFetch | None = None
        self._started = 0.0

    @property
    def log(self) -> str | None:
        """The arrival log a kernel's restore reads from (`BlobStore.reading_arrivals`)."""
        return self._arrivals.path if self._arrivals is not None else None

    def start(self, manifests: Sequence[str], *, replicated: bool = False) -> None:
        """Start fetching what this server lacks of `manifests`, on a thread (`replicated`:
        their checkpoint is recorded so, see `BucketReplica.fetch`)."""
        replica = self._replica
        if replica is None or not manifests:
            return
        self._started = time.perf_counter()
        self._arrivals = ArrivalLog(replica.store.root / "tmp", place=replica.store.place)
        log = self._arrivals

        def stage() -> StagedFetch:
            try:
                self._held.enter_context(self._intent())
            except BaseException as error:  # the restore waiting on the log learns it now
                log.failed(error)
                raise
            return replica.stage(
                list(manifests), log=log, cancelled=self._cancelled, replicated=replicated
            )

        # on a thread now, not at the loop's next turn: a restore in this process (a test's
        # context) may wait on the log without giving the loop a turn
        context = contextvars.copy_context()  # the write intent held, if any
        self._staging = asyncio.get_running_loop().run_in_executor(None, context.run, stage)

    async def commit(self) -> None:
        """Wait for the rest of the fetch, then record it (its error when it failed)."""
        staging = self._staging
        if staging is None or self._staged is not None:
            return
        staged = self._staged = await staging
        try:
            moved = await asyncio.to_thread(staged.commit)
        except BaseException:
            await asyncio.to_thread(staged.abort)
            raise
        if moved.chunks or moved.manifests:
            _log.info(
                "ditto: fetched %d chunks (%d bytes) and %d manifests from %s in %.3f s, "
                "read by the restore as they landed",
                moved.chunks,
                moved.chunk_bytes,
                moved.manifests,
                staged.replica.location,
                time.perf_counter() - self._started,
            )

    async def close(self, *, failed: bool) -> BaseException | None:
        """End the fetch: committed, or else given up with nothing of it kept. After a
        failure, returns the fetch's own error, if it failed of itself (not given up)."""
        staging = self._staging
        cause: BaseException | None = None
        try:
            if staging is not None and self._staged is None:
                if not failed:
                    await self.commit()
                else:
                    self._cancelled.set()
                    try:
                        staged = await staging
                    except FetchCancelled:
                        pass
                    except Exception as error:
                        cause = error
                    else:
                        await asyncio.to_thread(staged.abort)
        finally:
            await asyncio.to_thread(self._held.close)
            if self._arrivals is not None:
                self._arrivals.close()
        return cause

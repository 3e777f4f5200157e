"""When a checkpoint's blobs reach the object store, and waiting for what a resume needs.

With a blob store replicated to an object store (`core.blobs.replica`), every checkpoint
is written to the local disk first, at disk speed, and its record says where its bytes are
durable (`RuntimeCheckpoint.replication`):

- `local`: on this server's disk. The checkpoint returned then; an uploader thread puts
  its blobs in the bucket behind it, in the order they were taken, and takes up again
  after a restart what was queued (the ledger keeps the queue). Its record then says
  `replicated`, for every server of the deployment to see (`mark_replicated`, which the
  service binds to its store);
- `replicated`: in the bucket before the record was written. Checkpoints are so when the
  deployment says they must be (`durability="replicated"`), and a pause always is: it
  returns only once everything the resume needs is in the object store, since the node
  may be gone by the time the runtime is resumed. When the upload fails, nothing is
  recorded and the runtime keeps running.

Before a restore, a checkout or a resume reads a checkpoint, `make_local` fetches what this
server lacks (another server took it, or the cache let it go), so the kernel, which never
gets the object store's credentials, reads everything from the local disk. A resume and a
checkout fetch the checkpoint's variables while the kernel restores them instead
(`fetching`, `incoming_blobs`): the kernel reads each chunk as soon as it has landed.

Every upload and fetch, and every checkpoint from before its capture until its record is
written (`writing`), holds a write intent in the shared store (`bucket_gc`) once the
service has given its coordination (`coordinate`): garbage collection deletes nothing from
the bucket while one is open, and the replica ledger forgets what it knew was there when a
collection deleted since.

With no object store, every method does nothing and states are None.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal

from ditto_jupyter.control.incoming_blobs import IncomingBlobs
from ditto_jupyter.core.blobs import BlobError, BlobNotFound
from ditto_jupyter.core.blobs.errors import PrefixOwnedElsewhere
from ditto_jupyter.core.blobs.replica import BucketReplica, Transfer
from ditto_jupyter.core.errors import CaptureLost, StoreUnavailable
from ditto_jupyter.core.models import RuntimeCheckpoint

if TYPE_CHECKING:
    from ditto_jupyter.control.bucket_gc import BucketCoordination

#: What a checkpoint's `replication` says.
ReplicationState = Literal["local", "replicated"]
#: Manifests the uploader takes off the queue at a time.
QUEUE_BATCH = 16
#: Seconds the uploader waits after a failure, doubling up to the last.
RETRY_DELAYS_S = (1.0, 2.0, 5.0, 10.0, 30.0)
_log = logging.getLogger(__name__)
#: Whether the code running holds a write intent already (a checkpoint's, for its upload).
_holding_intent: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ditto_holding_bucket_intent", default=False
)


class Durability(str, enum.Enum):
    """Where a checkpoint's bytes must be before it returns."""

    LOCAL = "local"
    REPLICATED = "replicated"


class Replication:
    """The replication policy of one service, and its uploader thread (see the module)."""

    def __init__(
        self, replica: BucketReplica | None = None, *, durability: Durability | str = "local"
    ) -> None:
        self.replica = replica
        self.durability = Durability(durability)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None
        #: Record that a checkpoint's blobs are all in the bucket (the service's store).
        self.mark_replicated: Callable[[str], None] = lambda checkpoint_id: None
        #: Write intents and collection on the shared bucket (the service's store).
        self.coordination: BucketCoordination | None = None

    def coordinate(self, coordination: BucketCoordination) -> None:
        """Hold write intents through `coordination` from now on (before `start`)."""
        self.coordination = coordination

    @contextlib.contextmanager
    def intent(self) -> Iterator[None]:
        """Hold a write intent for the block (nothing without coordination, or inside a
        block that holds one: a checkpoint's upload)."""
        if self.coordination is None or _holding_intent.get():
            yield
            return
        with self.coordination.intent():
            yield

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Hold a write intent while a checkpoint is taken and recorded: a collection on
        another server deletes nothing its capture reuses (opened on a worker thread, as
        it may wait for a deletion phase to end)."""
        coordination = self.coordination
        if coordination is None:
            yield
            return
        key = await asyncio.to_thread(coordination.open_intent)
        holding = _holding_intent.set(True)  # its upload (`asyncio.to_thread`) inherits it
        try:
            yield
        finally:
            _holding_intent.reset(holding)
            await asyncio.to_thread(coordination.close_intent, key)

    def require_backed(self, manifest_ids: Sequence[str]) -> None:
        """Inside a write intent: refuse a capture taken before it (a kernel's own) when a
        chunk it lists has no bytes left anywhere: this server's cache had evicted it and a
        collection deleted it from the bucket before the intent (CaptureLost: capture again,
        which stores the chunk's bytes again, see `BlobStore.unbacked_chunks`)."""
        replica = self.replica
        if replica is None:
            return
        lost = replica.store.unbacked_chunks(manifest_ids)
        if lost:
            lost = replica.confirm_in_bucket(lost)
        if lost:
            raise CaptureLost(
                f"the capture {', '.join(manifest_ids)} lists {len(lost)} chunk(s) whose bytes "
                "are gone (this server's cache let them go, then garbage collection deleted "
                "them from the object store): capture again, which stores them again"
            )

    def start(self) -> None:
        """Take up the uploads a stop or a crash cut short (once `mark_replicated` is set)."""
        if self.replica is not None and self.replica.ledger.queued(1):
            self._start()

    @property
    def enabled(self) -> bool:
        """Whether blobs are replicated at all."""
        return self.replica is not None

    @property
    def where(self) -> str:
        """The object store, for messages."""
        return str(self.replica.location) if self.replica is not None else "nowhere"

    def check_at_start(self) -> None:
        """At a server's start: claim the object store's prefix for this deployment, or
        check that it owns it (`prefix_owner`). PrefixOwnedElsewhere when another
        deployment owns it: the server must not serve it. An object store that cannot
        answer is logged (one line naming what failed) and the server runs on: checkpoints
        stay local until it answers, the prefix is checked again before the first upload,
        fetch or collection, and a pause or a resume that needs it says why it cannot."""
        replica = self.replica
        if replica is None:
            return
        try:
            replica.owner.ensure()
        except PrefixOwnedElsewhere:
            raise
        except BlobError as error:
            _log.error("ditto: the blob store's object store is not usable: %s", error)
        else:
            _log.info("ditto: blobs are replicated to %s", replica.location)

    # ---- checkpoints ------------------------------------------------------------------

    def must_wait(self, *, pause: bool) -> bool:
        """Whether a checkpoint uploads before its record is written (a pause always)."""
        return self.enabled and (pause or self.durability is Durability.REPLICATED)

    async def upload(self, manifests: Sequence[str]) -> Transfer:
        """Put these manifests and all they list in the bucket now (ObjectStoreUnavailable
        when it refuses: then nothing more is known to be there)."""
        replica = self.replica
        if replica is None or not manifests:
            return Transfer()

        def upload() -> Transfer:
            with self.intent():
                return replica.upload(list(manifests))

        return await asyncio.to_thread(upload)

    def upload_soon(self, checkpoint_id: str, manifests: Sequence[str]) -> None:
        """Queue a checkpoint's manifests for the uploader; returns at once."""
        if self.replica is None or not manifests:
            return
        self.replica.ledger.enqueue(checkpoint_id, manifests)
        self._start()

    def state_at_commit(self, *, uploaded: bool) -> ReplicationState | None:
        """What a new checkpoint's record says."""
        if not self.enabled:
            return None
        return "replicated" if uploaded else "local"

    def state(
        self, checkpoint: RuntimeCheckpoint, manifests: Sequence[str]
    ) -> ReplicationState | None:
        """Where a checkpoint's bytes are now, as far as this server knows."""
        if self.replica is None:
            return None
        if checkpoint.replication == "replicated":
            return "replicated"
        try:
            return "replicated" if self.replica.replicated(manifests) else "local"
        except BlobError as error:  # a read that cannot answer says what the record says
            _log.warning("ditto: could not read the replica ledger: %s", error)
            return checkpoint.replication or "local"

    async def make_local(self, manifests: Sequence[str], *, replicated: bool = False) -> Transfer:
        """Fetch what this server lacks of these manifests (`replicated`: their checkpoint
        is recorded so). The errors are `BucketReplica.fetch`'s: NotReplicated when the
        bucket has not got one yet, ObjectMissing when it lost one, ManifestRefused,
        ObjectStoreUnavailable when it refuses."""
        replica = self.replica
        if replica is None or not manifests:
            return Transfer()

        def fetch() -> Transfer:
            started = time.perf_counter()
            with self.intent():
                moved = replica.fetch(list(manifests), replicated=replicated)
            if moved.chunks or moved.manifests:
                _log.info(
                    "ditto: fetched %d chunks (%d bytes) and %d manifests from %s in %.3f s",
                    moved.chunks,
                    moved.chunk_bytes,
                    moved.manifests,
                    replica.location,
                    time.perf_counter() - started,
                )
            return moved

        return await asyncio.to_thread(fetch)

    @contextlib.asynccontextmanager
    async def fetching(
        self, manifests: Sequence[str], *, replicated: bool = False
    ) -> AsyncIterator[IncomingBlobs]:
        """Fetch what this server lacks of these manifests while the block runs; a restore
        given the `log` of what this yields reads each blob as it lands. The fetch is
        recorded at `commit` (or at the end of the block). When the block fails, the fetch
        is given up and nothing of it is recorded; when the fetch failed of itself, its own
        error (NotReplicated, ObjectStoreUnavailable...) is raised rather than the block's.
        `replicated` is `make_local`'s."""
        incoming = IncomingBlobs(self.replica, self.intent)
        incoming.start(manifests, replicated=replicated)
        try:
            yield incoming
        except Exception as error:
            cause = await incoming.close(failed=True)
            if cause is not None:  # the fetch says what failed; the restore only waited
                _log.info("ditto: a restore failed as its fetch did (%s): %s", cause, error)
                raise cause from None
            raise
        except BaseException:
            await incoming.close(failed=True)
            raise
        await incoming.close(failed=False)

    # ---- the uploader -----------------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._idle.clear()
            self._wake.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="ditto-replication", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        replica = self.replica
        assert replica is not None
        failures = 0
        while True:
            with self._lock:
                if self._stopping:
                    self._idle.set()
                    return
                self._wake.clear()
            try:
                queued = replica.ledger.queued(QUEUE_BATCH)
            except BlobError as error:
                queued, failures = [], self._failed(error, failures)
            if not queued:
                with self._lock:
                    if not self._wake.is_set():
                        self._idle.set()
                        self._thread = None
                        return
                continue
            for upload in queued:
                if self._stopping:
                    break
                try:
                    with self.intent():
                        replica.upload(upload.manifests)
                        self._recorded(upload.checkpoint_id)
                    replica.ledger.dequeue([upload.checkpoint_id])
                    failures = 0
                except BlobNotFound as error:  # collected since (its checkpoint went)
                    _log.info(
                        "ditto: not replicating checkpoint %s: %s", upload.checkpoint_id, error
                    )
                    replica.ledger.dequeue([upload.checkpoint_id])
                except (BlobError, StoreUnavailable) as error:
                    # the object store, the local disk or the checkpoint store: later
                    failures = self._failed(error, failures)
                    break

    def _recorded(self, checkpoint_id: str) -> None:
        """Mark a checkpoint's record replicated; a failure is logged (its state is then
        read off the ledger on this server, and stays `local` on the others)."""
        try:
            self.mark_replicated(checkpoint_id)
        except Exception as error:  # the store refused: the blobs are safe all the same
            _log.warning(
                "ditto: checkpoint %s is in %s, but its record could not say so: %s",
                checkpoint_id,
                self.where,
                error,
            )

    def _failed(self, error: BaseException, failures: int) -> int:
        """Log a failed upload (once per kind of failure) and wait before the next try."""
        if failures == 0 or str(error) != str(self.last_error):
            _log.warning(
                "ditto: uploading checkpoints to %s failed (%s); they stay on this server's "
                "disk, marked local, and are tried again",
                self.where,
                error,
            )
        self.last_error = error
        delay = RETRY_DELAYS_S[min(failures, len(RETRY_DELAYS_S) - 1)]
        self._wake.wait(delay)
        return failures + 1

    def pending(self) -> int:
        """Checkpoints queued for upload (a few at most, unless the object store is down)."""
        if self.replica is None:
            return 0
        return len(self.replica.ledger.queued(1_000_000))

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until the queue is empty (True) or `timeout` passes."""
        if self.replica is None:
            return True
        return self._idle.wait(timeout) and not self.pending()

    def close(self, timeout: float | None = None) -> None:
        """Upload what is queued for up to `timeout`, then stop the uploader and the
        transfer threads. What is still queued is uploaded after the next start."""
        if self.replica is None:
            return
        if not self.drain(timeout):
            left = self.pending()
            _log.warning(
                "ditto: %d checkpoint manifest(s) not yet in %s at shutdown; they are "
                "uploaded when this server starts again on this data directory",
                left,
                self.where,
            )
        with self._lock:
            self._stopping = True
            self._wake.set()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
        self.replica.close()

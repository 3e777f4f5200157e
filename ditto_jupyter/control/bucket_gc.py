"""Garbage collection of a bucket that several servers share, and the write intents that
keep it from deleting what an upload in flight relies on.

What a committed checkpoint keeps alive in the bucket is read off the shared checkpoint
store: every checkpoint's manifests are roots, and their closures (the chunks and child
manifests each lists) are read from this server's blob store or else from the bucket.
An object of the bucket that no closure reaches, and that is older than the grace period,
is garbage.

Three kinds of rows of the shared store's lease table make this safe across servers:

- a write intent (`bucket-write`, one per upload, fetch or checkpoint in flight), taken by
  a server before it relies on anything being in the bucket and given up once the
  checkpoint is recorded (or abandoned). It runs out with its server's other leases (the
  heartbeat renews them all), so a dead server's intents block nobody for long;
- the collector's lease (`bucket-gc`, one per bucket): one collector at a time; another
  server's collection answers that someone else collects;
- a deletion phase (`bucket-deleting`): begun, in one write transaction, only when no
  intent is open, and no intent opens while one runs. Each phase adds one to the bucket's
  generation (`bucket_generations`): an intent reads it, and the server's replica ledger
  forgets what it knew was in the bucket when it has moved on, so a chunk collected here
  and needed again by another server's checkpoint is uploaded again, never assumed there.

Inside each phase, right before deleting, the roots are read again; a root the first read
did not see has its closure kept too. A root whose manifest is neither on this server nor
in the bucket (a checkpoint another server has not uploaded yet) has a closure nobody can
read here: then nothing is deleted, and the next collection tries again. Manifests go
before chunks, so a manifest in the bucket still vouches for its whole closure.

A collector deletes only what it can prove is its deployment's:

- it collects only a prefix its deployment owns (`prefix_owner`: checked before the
  listing; another deployment's prefix is `PrefixOwnedElsewhere`, and nothing is deleted);
- an unreferenced manifest is deleted only when it verifies with this deployment's signing
  secret. One that does not (signed with another key, damaged, swapped under another id)
  is never garbage here: it is kept, and so is everything its body lists (read without
  trusting it: it can only keep more).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from ditto_jupyter.control.ownership import RuntimeOwnership
from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.blobs import BlobError, BlobNotFound
from ditto_jupyter.core.blobs.errors import ManifestSignatureError, ObjectStoreUnavailable
from ditto_jupyter.core.blobs.replica import BucketReplica, manifest_key
from ditto_jupyter.core.blobs.store import parsed_document
from ditto_jupyter.core.models import Lease

#: Lease kinds: an upload or fetch in flight, the collector, a deletion phase.
WRITE_INTENT = "bucket-write"
COLLECTOR_LEASE = "bucket-gc"
DELETION_PHASE = "bucket-deleting"
#: How long the collector's and a deletion phase's leases last (renewed as it goes).
COLLECTOR_TTL_MS = 60_000
#: Objects deleted per deletion phase (intents wait at most one phase).
DELETE_BATCH = 200
#: Seconds a new intent waits for a deletion phase to end before giving up.
INTENT_WAIT_S = 60.0
_POLL_S = 0.1
_log = logging.getLogger(__name__)


@dataclass
class BucketGcReport:
    """What one collection of the shared bucket did.

    `collected`: this server held the collector's lease; `deleted_*`: objects deleted;
    `kept_young`: unreferenced objects kept for the grace period; `kept_foreign`:
    unreferenced manifests kept because they do not verify with this deployment's secret;
    `reason`: why some garbage, or all, was left (another collector, uploads in flight, an
    unreadable root).
    """

    collected: bool
    deleted_chunks: int = 0
    deleted_manifests: int = 0
    kept_young: int = 0
    kept_foreign: int = 0
    reason: str | None = None


@dataclass
class _Reach:
    """What the roots keep alive in the bucket."""

    manifests: set[str] = field(default_factory=set)
    chunks: set[str] = field(default_factory=set)


class BucketCoordination:
    """Write intents and garbage collection of one server on one shared bucket."""

    def __init__(
        self,
        store: CheckpointStore,
        ownership: RuntimeOwnership,
        replica: BucketReplica,
        *,
        intent_wait_s: float = INTENT_WAIT_S,
    ) -> None:
        self.store = store
        self.ownership = ownership
        self.replica = replica
        #: The lease key of the bucket (its URL and endpoint).
        self.bucket_key = str(replica.location)
        self.intent_wait_s = intent_wait_s
        self._collecting = threading.Lock()  # one collection of this server at a time
        #: Manifests of the bucket that do not verify here, each with what its body lists
        #: (content-addressed, so what was read once stays true).
        self._foreign: dict[str, tuple[list[str], list[str]]] = {}

    # ---- write intents -----------------------------------------------------------------

    @contextlib.contextmanager
    def intent(self) -> Iterator[None]:
        """Hold a write intent for the block (see the module)."""
        key = self.open_intent()
        try:
            yield
        finally:
            self.close_intent(key)

    def open_intent(self) -> str:
        """Open a write intent, waiting while a deletion phase runs; its key. The replica
        ledger then forgets what it knew if the bucket's generation moved on."""
        deadline = time.monotonic() + self.intent_wait_s
        key = f"{self.bucket_key} {uuid.uuid4().hex}"
        while True:
            generation, phase = self._try_intent(key)
            if phase is None:
                break
            if time.monotonic() >= deadline:
                raise ObjectStoreUnavailable(
                    f"the object store {self.bucket_key} is being garbage-collected by "
                    f"{phase.holder.describe()}, for longer than {self.intent_wait_s:g}s; "
                    "try again"
                )
            time.sleep(_POLL_S)
        self.replica.ledger.align(generation)
        return key

    def _try_intent(self, key: str) -> tuple[int, Lease | None]:
        """In one write transaction: the bucket's generation and no phase (the intent is
        taken), or the deletion phase that runs."""
        now = self.ownership.clock()
        with self.store.transaction():
            phase = self.store.get_lease(DELETION_PHASE, self.bucket_key)
            if phase is not None and self._active(phase, now):
                return 0, phase
            self.store.acquire_lease(
                WRITE_INTENT, key, self.ownership.holder, now_ms=now, ttl_ms=self.ownership.ttl_ms
            )
            return self.store.bucket_generation(self.bucket_key), None

    def close_intent(self, key: str) -> None:
        """Give a write intent up (a failure is logged: the intent then runs out with this
        server's other leases)."""
        try:
            self.store.release_lease(WRITE_INTENT, key, self.ownership.owner_id)
        except Exception as error:  # the store refused: the heartbeat lets it run out
            _log.warning("ditto: could not end the bucket write intent %s: %s", key, error)

    def _active(self, lease: Lease, now: int) -> bool:
        """Whether a lease's holder still counts: not run out, and not gone. This server's
        own leases count too: its uploads in flight are as unsafe to collect under."""
        return not lease.expired(now) and not self.ownership.holder_gone(lease)

    # ---- collection --------------------------------------------------------------------

    def collect(self, roots: Callable[[], set[str]], *, grace_seconds: float) -> BucketGcReport:
        """Delete the bucket's objects that no root reaches and that are older than
        `grace_seconds`, unless another server collects now (see the module)."""
        owner = self.ownership.owner_id
        if not self._collecting.acquire(blocking=False):
            return BucketGcReport(
                collected=False, reason=f"this server collects {self.bucket_key} now"
            )
        try:
            self.replica.owner.ensure()  # another deployment's prefix: nothing to collect
            lease = self._take_collector()
            if lease.holder.owner_id != owner:
                return BucketGcReport(
                    collected=False,
                    reason=f"{lease.holder.describe()} collects {self.bucket_key} now",
                )
            try:
                return self._collect(roots, grace_seconds)
            finally:
                self.store.release_lease(COLLECTOR_LEASE, self.bucket_key, owner)
        finally:
            self._collecting.release()

    def _take_collector(self) -> Lease:
        """Take (or renew) the collector's lease; the lease as it stands."""
        current = self.store.get_lease(COLLECTOR_LEASE, self.bucket_key)
        take_from = None
        if (
            current is not None
            and current.holder.owner_id != self.ownership.owner_id
            and self.ownership.holder_gone(current)
        ):
            take_from = current.holder.owner_id
        return self.store.acquire_lease(
            COLLECTOR_LEASE,
            self.bucket_key,
            self.ownership.holder,
            now_ms=self.ownership.clock(),
            ttl_ms=COLLECTOR_TTL_MS,
            take_from=take_from,
        )

    def _collect(self, roots: Callable[[], set[str]], grace_seconds: float) -> BucketGcReport:
        bucket = self.replica.bucket
        report = BucketGcReport(collected=True)
        listed = {**bucket.listing("manifests/"), **bucket.listing("chunks/")}
        live = roots()
        reach = _Reach()
        unreadable = self._reach(live, reach)
        if unreadable:
            report.reason = self._unreadable(unreadable)
            return report
        cutoff = time.time() - grace_seconds
        garbage: list[str] = []
        for name in sorted(listed, key=lambda n: not n.startswith("manifests/")):
            if self._reached(name, reach):
                continue
            if listed[name] >= cutoff:
                report.kept_young += 1
            else:
                garbage.append(name)
        garbage = self._only_provably_ours(garbage, report)
        for start in range(0, len(garbage), DELETE_BATCH):
            if not self._begin_phase():
                report.reason = (
                    "uploads are in flight on the servers sharing the bucket; what is left "
                    "goes at the next collection"
                )
                break
            try:
                now_live = roots()  # right before deleting: roots recorded since count
                unreadable = self._reach(now_live - live, reach)
                live |= now_live
                if unreadable:
                    report.reason = self._unreadable(unreadable)
                    break
                for name in garbage[start : start + DELETE_BATCH]:
                    if self._reached(name, reach):
                        continue
                    bucket.delete(name)
                    if name.startswith("manifests/"):
                        report.deleted_manifests += 1
                    else:
                        report.deleted_chunks += 1
            finally:
                self.store.release_lease(DELETION_PHASE, self.bucket_key, self.ownership.owner_id)
        if report.deleted_chunks or report.deleted_manifests:
            _log.info(
                "ditto: collected %d chunk(s) and %d manifest(s) from %s",
                report.deleted_chunks,
                report.deleted_manifests,
                self.bucket_key,
            )
        return report

    def _only_provably_ours(self, garbage: list[str], report: BucketGcReport) -> list[str]:
        """`garbage` less every manifest that does not verify with this deployment's secret
        and everything such a manifest lists, its children's lists too (the manifests so
        kept are counted in `report.kept_foreign`)."""
        candidates = [n.partition("/")[2] for n in garbage if n.startswith("manifests/")]
        foreign = [m for m in candidates if not self._verifies(m)]
        if not foreign:
            return garbage
        kept = _Reach()
        pending = list(foreign)
        while pending:
            manifest_id = pending.pop()
            if manifest_id in kept.manifests:
                continue
            kept.manifests.add(manifest_id)
            chunks, children = self._listing(manifest_id)
            kept.chunks.update(chunks)
            pending.extend(children)
        report.kept_foreign = len(foreign)
        _log.warning(
            "ditto: %d manifest(s) in %s (such as %s) do not verify with this deployment's "
            "signing secret: they, and what they list, are never collected by it",
            len(foreign),
            self.bucket_key,
            sorted(foreign)[0],
        )
        return [name for name in garbage if not self._reached(name, kept)]

    def _verifies(self, manifest_id: str) -> bool:
        """Whether the bucket's manifest verifies with this deployment's secret (True
        when it is gone: there is nothing left to keep)."""
        if manifest_id in self._foreign:
            return False
        try:
            document = self.replica.bucket.get(manifest_key(manifest_id))
        except BlobNotFound:
            return True
        try:
            self.replica.store.verified_body(manifest_id, document)
        except ManifestSignatureError:
            self._foreign[manifest_id] = _unverified_listing(document)
            return False
        return True

    def _listing(self, manifest_id: str) -> tuple[list[str], list[str]]:
        """The chunks and manifests a bucket manifest's body lists, read without trusting
        it (nothing when it is gone or unreadable)."""
        known = self._foreign.get(manifest_id)
        if known is not None:
            return known
        try:
            document = self.replica.bucket.get(manifest_key(manifest_id))
        except BlobNotFound:
            return [], []
        return _unverified_listing(document)

    @staticmethod
    def _reached(name: str, reach: _Reach) -> bool:
        folder, _, digest = name.partition("/")
        if folder == "manifests":
            return digest in reach.manifests
        return digest in reach.chunks

    def _unreadable(self, manifests: Collection[str]) -> str:
        first = sorted(manifests)[0]
        return (
            f"{len(manifests)} manifest(s) a checkpoint names (such as {first}) are neither on "
            f"this server nor in {self.bucket_key} (not uploaded yet): nothing is deleted "
            "until they are"
        )

    def _begin_phase(self) -> bool:
        """Begin a deletion phase, in one write transaction, when no write intent is open
        (intents of holders that are gone are dropped); whether it began."""
        now = self.ownership.clock()
        me = self.ownership.holder
        prefix = f"{self.bucket_key} "
        with self.store.transaction():
            for lease in self.store.list_leases(WRITE_INTENT):
                if not lease.key.startswith(prefix):
                    continue
                if self._active(lease, now):
                    return False
                self.store.release_lease(WRITE_INTENT, lease.key, lease.holder.owner_id)
            phase = self.store.get_lease(DELETION_PHASE, self.bucket_key)
            take_from = None
            if phase is not None and phase.holder.owner_id != me.owner_id:
                if self._active(phase, now):
                    return False
                take_from = phase.holder.owner_id
            taken = self.store.acquire_lease(
                DELETION_PHASE,
                self.bucket_key,
                me,
                now_ms=now,
                ttl_ms=COLLECTOR_TTL_MS,
                take_from=take_from,
            )
            if taken.holder.owner_id != me.owner_id:
                return False
            self.store.advance_bucket_generation(self.bucket_key)
            self.store.acquire_lease(
                COLLECTOR_LEASE, self.bucket_key, me, now_ms=now, ttl_ms=COLLECTOR_TTL_MS
            )
        return True

    def _reach(self, roots: Collection[str], reach: _Reach) -> set[str]:
        """Add what `roots` keep alive to `reach`; the manifests that could not be read."""
        unreadable: set[str] = set()
        pending = [m for m in roots if m not in reach.manifests]
        while pending:
            manifest_id = pending.pop()
            if manifest_id in reach.manifests:
                continue
            body = self._body(manifest_id)
            if body is None:
                unreadable.add(manifest_id)
                continue
            reach.manifests.add(manifest_id)
            reach.chunks.update(str(c) for c in body.get("chunks", []))
            pending.extend(str(m) for m in body.get("manifests", []))
        return unreadable

    def _body(self, manifest_id: str) -> dict[str, Any] | None:
        """A manifest's body, from this server's blob store or else the bucket (verified);
        None when neither has it, or the bucket's copy is not signed by the deployment."""
        store = self.replica.store
        try:
            if store.has_manifest(manifest_id):
                return dict(store.get_manifest(manifest_id))
            document = self.replica.bucket.get(manifest_key(manifest_id))
            return dict(store.verified_body(manifest_id, document))
        except BlobNotFound:
            return None
        except ObjectStoreUnavailable:
            raise
        except BlobError as error:  # damaged or unsigned: its closure cannot be read
            _log.warning("ditto: manifest %s cannot be read for collection: %s", manifest_id, error)
            return None


def _unverified_listing(document: bytes) -> tuple[list[str], list[str]]:
    """The chunks and manifests a manifest document's body lists, trusting nothing (what
    cannot be read lists nothing): only ever used to keep objects, never to delete."""
    parsed = parsed_document(document)
    body = parsed.get("body") if isinstance(parsed, dict) else None
    if not isinstance(body, dict):
        return [], []

    def names(key: str) -> list[str]:
        found = body.get(key)
        return [n for n in found if isinstance(n, str)] if isinstance(found, list) else []

    return names("chunks"), names("manifests")

"""Retention: thinning automatic checkpoints so that keeping every cell never fills a disk.

One mechanism, three rules (`retention_policy`): the age tiers and the data directory's
byte budget, applied by `round` (the server runs it periodically), and a runtime's
`%autocheckpoint --keep N` (`keep`). Whichever rule chose them, checkpoints are thinned the
same way, a runtime at a time (a round without the runtime's operation slot, so a cell's
automatic checkpoint is never refused meanwhile; see `_thin`):

- the list a rule chose is only a proposal: inside the thinning's own write transaction
  each checkpoint is read again and thinned only if it is still automatic, whole and named
  as `%autocheckpoint` names its own, and the store does not hold it there and then as a
  runtime's head, a checkout's source or another runtime's parent (`held_among`). So no
  deletion rests on a read that could be stale;
- a thinned checkpoint keeps its row (the tree's lineage, its name, its cell) and loses its
  variables, workspace snapshot and document (`autocheckpoint_pruning.thinned`); garbage
  collection frees their blobs, asking the store again when it collects (see
  `_thin_runtime`), and a provider snapshot outside the blob store that no record names
  any more (asked in the same transaction) is deleted under the runtime's slot;
- a transaction that fails is rolled back whole: the runtime's checkpoints are as they were.

A round then runs the blob store's garbage collection (`gc`) with its grace period, so the
bytes go, and measures the data directory (`core.disk_usage`) before and after. Over the
budget, it thins the oldest thinnable checkpoints of every runtime, a batch at a time,
collecting after each, until it is under the budget or nothing thinnable is left (each
runtime's two newest automatic checkpoints stay: the last cell can always be undone). Each
thinning is one line in the log, a failure a warning with its reason, and the last one is
kept (`last`) for `GET /api/v1/retention` and given to `listeners` (the server's events).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ditto_jupyter.control.autocheckpoint_pruning import thinned
from ditto_jupyter.control.leftovers import snapshot_resource
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.retention_policy import (
    beyond_tiers,
    cell_spans,
    for_budget,
    runs,
    thinnable,
)
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.blobs import GRACE_SECONDS, GcReport
from ditto_jupyter.core.disk_usage import data_dir_bytes
from ditto_jupyter.core.errors import InvalidRequest, SessionBusy
from ditto_jupyter.core.models import (
    RUNTIME_LEASE,
    AutoCheckpointPruneResult,
    BackendCheckpointRef,
    CellSpan,
    RetentionReport,
    RetentionRule,
    RetentionTiers,
    RuntimeCheckpoint,
    ThinnedRuntime,
    now_ms,
)

_log = logging.getLogger(__name__)

#: Later than any checkpoint: a budget looks at every age.
_ANY_TIME = 2**62
#: Checkpoints a thinning's transaction takes at most (the store's write lock is held
#: briefly, however long the history a first round finds).
THIN_BATCH = 200
#: Checkpoints a budget thins before it collects and measures again.
BUDGET_BATCH = 16


def _size(count: int | None) -> str:
    if count is None:
        return "?"
    return f"{count / (1024 * 1024):.1f} MiB"


def report_line(report: RetentionReport) -> str:
    """The one log line of a thinning."""
    parts = []
    for runtime in report.runtimes:
        spans = ", ".join(
            str(s.first) if s.first == s.last else f"{s.first}-{s.last}" for s in runtime.cells
        )
        parts.append(f"runtime {runtime.runtime_id}: cells {spans}")
    line = (
        f"ditto: retention ({'+'.join(report.rules)}) thinned {report.thinned} automatic "
        f"checkpoint(s)" + (f" ({'; '.join(parts)})" if parts else "")
    )
    if report.bytes_after is not None:
        line += f"; freed {_size(report.bytes_freed)}, data directory {_size(report.bytes_after)}"
        if report.budget_bytes:
            line += f" of a {_size(report.budget_bytes)} budget"
            if report.over_budget:
                line += " (still over it: nothing left that retention may thin)"
    if report.busy:
        line += f"; left for the next round (busy): {', '.join(report.busy)}"
    return line


class Retention:
    """The retention of one service's automatic checkpoints (see the module)."""

    def __init__(
        self,
        parts: RuntimeParts,
        collect: Callable[[float], GcReport],
        *,
        data_dir: Path | None = None,
    ) -> None:
        self.parts = parts
        self.collect = collect
        self.data_dir = data_dir if data_dir is not None else parts.blobs.root.parent
        self.tiers = RetentionTiers()
        #: The data directory's byte budget (None: none).
        self.budget_bytes: int | None = None
        #: The collection's grace period (a round frees what is older than it).
        self.gc_grace_seconds = GRACE_SECONDS
        #: Now, in milliseconds since the epoch (a test sets a clock of its own).
        self.clock: Callable[[], int] = now_ms
        #: Seconds between the rounds a server runs (0: none; for the status route).
        self.interval_seconds = 0.0
        self.last: RetentionReport | None = None
        self.last_round_at_ms: int | None = None
        self.listeners: list[Callable[[RetentionReport], None]] = []
        self._round = asyncio.Lock()

    # ---- the rules ---------------------------------------------------------------------

    async def round(self) -> RetentionReport:
        """The tiers, then the budget; collected and measured. A failure is logged, kept
        in `last` and raised."""
        async with self._round:
            started = self.clock()
            tally = _Tally(rules=["tiers"])
            try:
                await self._round_in(tally, started)
            except Exception as error:
                tally.error = f"{type(error).__name__}: {error}"
                _log.warning("ditto: retention failed, nothing more was thinned: %s", error)
                raise
            finally:
                report = tally.report(started, self.clock(), self.budget_bytes)
                self.last_round_at_ms = report.finished_at_ms
                if report.thinned or report.error or report.over_budget:
                    self._done(report)
            return report

    async def _round_in(self, tally: _Tally, started: int) -> None:
        before_ms = started - self.tiers.keep_all_seconds * 1000
        old = await off_loop(self.parts.store.whole_automatic, before_ms=before_ms)
        tally.bytes_before = await off_loop(data_dir_bytes, self.data_dir)
        await self._thin(beyond_tiers(old, self.tiers, started), tally)
        await off_loop(self.collect, self.gc_grace_seconds)
        used = await off_loop(data_dir_bytes, self.data_dir)
        tried: set[str] = set()
        while self.budget_bytes is not None and used > self.budget_bytes:
            if "budget" not in tally.rules:
                tally.rules.append("budget")
            every = await off_loop(self.parts.store.whole_automatic, before_ms=_ANY_TIME)
            batch = [c for c in for_budget(every) if c.checkpoint_id not in tried]
            batch = batch[:BUDGET_BATCH]
            if not batch:
                tally.over_budget = True
                break
            tried.update(c.checkpoint_id for c in batch)
            await self._thin(batch, tally)
            await off_loop(self.collect, self.gc_grace_seconds)
            used = await off_loop(data_dir_bytes, self.data_dir)
        tally.bytes_after = used

    async def keep(self, runtime_id: str, keep: int) -> AutoCheckpointPruneResult:
        """`%autocheckpoint --keep N`: the runtime's newest `keep` automatic checkpoints
        stay whole, older ones are thinned (rows stay). Raised, not kept, when it fails."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise InvalidRequest(f"keep must be a whole number of at least 1, not {keep!r}")
        parts = self.parts
        await off_loop(parts.guard.session, runtime_id)
        started = self.clock()
        async with parts.guard.operation(runtime_id):
            found = await off_loop(parts.store.prune_candidates, runtime_id, keep)
            chosen = [c for c in found.beyond if thinnable(c)]
            done: list[RuntimeCheckpoint] = []
            for start in range(0, len(chosen), THIN_BATCH):
                batch = chosen[start : start + THIN_BATCH]
                done += await self._thin_runtime(runtime_id, batch, slot_held=True)
        if done:
            self.parts.request_collection()  # their chunks, in the background
            tally = _Tally(rules=["keep"], thinned=len(done))
            tally.runtimes = [_thinned_runtime(runtime_id, done)]
            self._done(tally.report(started, self.clock(), None))
        pruned = {c.checkpoint_id for c in done}
        return AutoCheckpointPruneResult(
            runtime_id=runtime_id,
            keep=keep,
            pruned=[c.checkpoint_id for c in found.beyond if c.checkpoint_id in pruned],
            held=[c.checkpoint_id for c in found.beyond if c.checkpoint_id not in pruned],
            whole=found.whole - len(pruned),
        )

    def _done(self, report: RetentionReport) -> None:
        self.last = report
        if report.thinned or report.over_budget:
            _log.info("%s", report_line(report))
        for listener in list(self.listeners):
            try:
                listener(report)
            except Exception:  # a listener's failure is its own
                _log.exception("ditto: a retention listener failed")

    # ---- thinning, whatever rule chose -------------------------------------------------

    async def _thin(self, chosen: Sequence[RuntimeCheckpoint], tally: _Tally) -> None:
        """Thin what a rule chose, a runtime at a time, without its operation slot: the
        thinning's transaction decides, so a cell's automatic checkpoint recorded meanwhile
        is never refused. A runtime live on another server is left to that server (its
        blobs are on its disk); one with an operation of this server in flight, to the
        next round."""
        by_runtime: dict[str, list[RuntimeCheckpoint]] = {}
        for checkpoint in chosen:
            by_runtime.setdefault(checkpoint.runtime_id, []).append(checkpoint)
        for runtime_id, proposed in by_runtime.items():
            if self.parts.guard.in_flight(runtime_id) or await off_loop(
                self._elsewhere, runtime_id
            ):
                if runtime_id not in tally.busy:
                    tally.busy.append(runtime_id)
                continue
            done = []
            for start in range(0, len(proposed), THIN_BATCH):
                batch = proposed[start : start + THIN_BATCH]
                done += await self._thin_runtime(runtime_id, batch, slot_held=False)
            if done:
                tally.thinned += len(done)
                tally.runtimes = _merged(tally.runtimes, _thinned_runtime(runtime_id, done))

    def _elsewhere(self, runtime_id: str) -> bool:
        """Whether another server, still there, holds the runtime's lease (one read)."""
        ownership = self.parts.guard.ownership
        lease = self.parts.store.get_lease(RUNTIME_LEASE, runtime_id)
        return (
            lease is not None
            and lease.holder.owner_id != ownership.owner_id
            and not ownership.holder_gone(lease)
        )

    async def _thin_runtime(
        self, runtime_id: str, proposed: Sequence[RuntimeCheckpoint], *, slot_held: bool
    ) -> list[RuntimeCheckpoint]:
        """Thin what the store still lets go of; the checkpoints thinned, as they were.

        Their blobs go by garbage collection, which asks the store again at collection
        time; they are marked before the transaction (a crash after it leaves them marked)
        and after it (a collection in between found them still named). A workspace
        snapshot no record names now is forgotten by the live backends, so none reuses it;
        a provider's snapshot outside the blob store (E2B) is deleted under the runtime's
        slot (`slot_held`, or taken when free; else it is recorded as left behind)."""
        parts = self.parts
        manifests = [m for c in proposed for m in parts.manifests_of(c)]
        parts.blobs.mark_for_collection(manifests)
        ids = [c.checkpoint_id for c in proposed]
        done, orphans = await off_loop(self._thin_in_store, runtime_id, ids)
        if done:
            parts.blobs.mark_for_collection([m for c in done for m in parts.manifests_of(c)])
        for ref in orphans:
            assert ref.provider_snapshot_id is not None
            if parts.backends.referenced_manifests(ref):  # in the blob store: gc frees it
                parts.backends.forget_snapshot(ref.provider_snapshot_id)
            elif slot_held:
                await parts.delete_snapshot(ref, runtime_id)
            else:
                await self._delete_in_slot(ref, runtime_id)
        return done

    async def _delete_in_slot(self, ref: BackendCheckpointRef, runtime_id: str) -> None:
        """Delete a provider snapshot under the runtime's slot; busy: left behind."""
        try:
            async with self.parts.guard.operation(runtime_id):
                await self.parts.delete_snapshot(ref, runtime_id)
        except SessionBusy as busy:
            reason = f"retention could not delete it while the runtime was busy: {busy}"
            _log.warning("ditto: snapshot %s left behind: %s", ref.provider_snapshot_id, reason)
            await off_loop(self.parts.leftovers.record, snapshot_resource(ref, runtime_id), reason)

    def _thin_in_store(
        self, runtime_id: str, ids: Sequence[str]
    ) -> tuple[list[RuntimeCheckpoint], list[BackendCheckpointRef]]:
        """In one write transaction (on a store thread): each checkpoint read again, the
        ones the store still lets go of thinned; the provider snapshots no record names now."""
        store = self.parts.store
        with store.transaction():
            now = [store.get_checkpoint(cid) for cid in ids]
            whole = [c for c in now if c is not None and c.runtime_id == runtime_id]
            whole = [c for c in whole if thinnable(c)]
            held = store.held_among(runtime_id, [c.checkpoint_id for c in whole])
            done = [c for c in whole if c.checkpoint_id not in held]
            for checkpoint in done:
                store.put_checkpoint(thinned(checkpoint))
            orphans: dict[str, BackendCheckpointRef] = {}
            for checkpoint in done:
                ref = checkpoint.backend_ref
                if (
                    ref is None
                    or not ref.provider_snapshot_id
                    or ref.provider_snapshot_id in orphans
                ):
                    continue
                if not store.checkpoints_with_snapshot(ref.provider_snapshot_id):
                    orphans[ref.provider_snapshot_id] = ref
        return done, list(orphans.values())


@dataclass
class _Tally:
    """A thinning's figures while it runs (the report is built from them at its end)."""

    rules: list[RetentionRule]
    thinned: int = 0
    runtimes: list[ThinnedRuntime] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    bytes_before: int | None = None
    bytes_after: int | None = None
    over_budget: bool = False
    error: str | None = None

    def report(self, started: int, finished: int, budget: int | None) -> RetentionReport:
        freed = None
        if self.bytes_before is not None and self.bytes_after is not None:
            freed = max(self.bytes_before - self.bytes_after, 0)
        return RetentionReport(
            rules=list(self.rules),
            started_at_ms=started,
            finished_at_ms=finished,
            thinned=self.thinned,
            runtimes=list(self.runtimes),
            bytes_before=self.bytes_before,
            bytes_after=self.bytes_after,
            bytes_freed=freed,
            budget_bytes=budget,
            over_budget=self.over_budget,
            busy=list(self.busy),
            error=self.error,
        )


def _thinned_runtime(runtime_id: str, done: Sequence[RuntimeCheckpoint]) -> ThinnedRuntime:
    return ThinnedRuntime(
        runtime_id=runtime_id,
        conversation_id=done[0].session.conversation_id if done else None,
        checkpoints=len(done),
        cells=[CellSpan(first=a, last=b) for a, b in cell_spans(done)],
        checkpoint_ids=[c.checkpoint_id for c in done],
    )


def _merged(found: list[ThinnedRuntime], more: ThinnedRuntime) -> list[ThinnedRuntime]:
    """The runtimes of a report with `more` added (a runtime thinned twice counts once)."""
    for index, runtime in enumerate(found):
        if runtime.runtime_id == more.runtime_id:
            counts = [n for s in (*runtime.cells, *more.cells) for n in range(s.first, s.last + 1)]
            found[index] = runtime.model_copy(
                update={
                    "checkpoints": runtime.checkpoints + more.checkpoints,
                    "cells": [CellSpan(first=a, last=b) for a, b in runs(counts)],
                    "checkpoint_ids": [*runtime.checkpoint_ids, *more.checkpoint_ids],
                }
            )
            return found
    return [*found, more]

"""Which automatic checkpoints retention thins: the rules, as plain functions of the records.

Three rules, one retention (`retention`):

- **tiers** (`RetentionTiers`), like Time Machine: every automatic checkpoint younger than
  `keep_all_seconds` stays whole; older ones keep one per `every_seconds` while younger than
  that tier's `until_seconds` (the newest of each bucket, buckets aligned to the epoch, so
  a checkpoint kept once stays kept as it ages through a tier); beyond the last tier, none.
- **keep** (`%autocheckpoint --keep N`): a runtime's newest N stay whole, older ones go.
- **budget**: over a data directory's byte budget, the oldest go first, across runtimes;
  each runtime's `UNDO_DEPTH` newest automatic checkpoints stay whole (`for_budget`), so the
  last cell can always be undone, whatever the budget.

Only automatic checkpoints (`automatic` set by `%autocheckpoint`, named `cell-<n>`) are
ever candidates: a checkpoint taken on request, `before-*`, `lost`, `idle-pause`, a pause
or a close never is. Heads, checkout sources and parents of another runtime's checkpoint
are left out by the store inside the thinning's own transaction (`retention`), never here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ditto_jupyter.core.models import RetentionTier, RetentionTiers, RuntimeCheckpoint

#: The name `%autocheckpoint` gives its checkpoints (`cell-3`, `cell-3-2` after a resume).
AUTOMATIC_NAME = re.compile(r"cell-\d+(?:-\d+)?")
#: Names retention never thins, whatever their record says.
PROTECTED_NAMES = frozenset({"lost", "idle-pause", "pause", "close"})
#: A runtime's newest automatic checkpoints the budget never thins: the last cell's and the
#: one before it, which undoing the last cell goes back to.
UNDO_DEPTH = 2


def thinnable(checkpoint: RuntimeCheckpoint) -> bool:
    """Whether retention may thin this checkpoint at all: automatic, whole, and unnamed or
    named as `%autocheckpoint` names its own (any other name is a user's or the system's)."""
    name = checkpoint.name
    named = name is not None and (
        AUTOMATIC_NAME.fullmatch(name) is None
        or name in PROTECTED_NAMES
        or name.startswith("before-")
    )
    return checkpoint.automatic is not None and not checkpoint.pruned and not named


def for_budget(checkpoints: Sequence[RuntimeCheckpoint]) -> list[RuntimeCheckpoint]:
    """The checkpoints the budget may thin, oldest first: the thinnable ones, less each
    runtime's `UNDO_DEPTH` newest automatic checkpoints."""
    by_runtime: dict[str, list[RuntimeCheckpoint]] = {}
    for checkpoint in checkpoints:
        if checkpoint.automatic is not None and not checkpoint.pruned:
            by_runtime.setdefault(checkpoint.runtime_id, []).append(checkpoint)
    newest: set[str] = set()
    for found in by_runtime.values():
        found.sort(key=lambda c: c.created_at_ms)
        newest.update(c.checkpoint_id for c in found[-UNDO_DEPTH:])
    chosen = [c for c in checkpoints if thinnable(c) and c.checkpoint_id not in newest]
    return sorted(chosen, key=lambda c: c.created_at_ms)


def beyond_tiers(
    checkpoints: Iterable[RuntimeCheckpoint], tiers: RetentionTiers, now_ms: int
) -> list[RuntimeCheckpoint]:
    """The checkpoints the tiers thin, oldest first (each runtime's on their own)."""
    by_runtime: dict[str, list[RuntimeCheckpoint]] = {}
    for checkpoint in checkpoints:
        if thinnable(checkpoint):
            by_runtime.setdefault(checkpoint.runtime_id, []).append(checkpoint)
    thinned: list[RuntimeCheckpoint] = []
    for found in by_runtime.values():
        kept: dict[tuple[int, int], RuntimeCheckpoint] = {}
        for checkpoint in sorted(found, key=lambda c: c.created_at_ms):
            age_s = (now_ms - checkpoint.created_at_ms) / 1000.0
            if age_s < tiers.keep_all_seconds:
                continue
            bucket = _bucket(checkpoint.created_at_ms, age_s, tiers.tiers)
            if bucket is None:  # older than the last tier
                thinned.append(checkpoint)
                continue
            older = kept.get(bucket)
            if older is not None:  # the newest of a bucket stays
                thinned.append(older)
            kept[bucket] = checkpoint
    return sorted(thinned, key=lambda c: c.created_at_ms)


def _bucket(
    created_at_ms: int, age_s: float, tiers: Sequence[RetentionTier]
) -> tuple[int, int] | None:
    """(tier, bucket) of a checkpoint of this age, or None beyond the last tier."""
    for index, tier in enumerate(tiers):
        if age_s < tier.until_seconds:
            return index, created_at_ms // (tier.every_seconds * 1000)
    return None


def cell_spans(checkpoints: Iterable[RuntimeCheckpoint]) -> list[tuple[int, int]]:
    """The cells (execution counts) these automatic checkpoints followed, as runs:
    cells 3, 4, 5 and 9 are [(3, 5), (9, 9)]."""
    return runs({c.automatic.execution_count for c in checkpoints if c.automatic is not None})


def runs(counts: Iterable[int]) -> list[tuple[int, int]]:
    """Execution counts as runs of consecutive ones, in order."""
    spans: list[tuple[int, int]] = []
    for count in sorted(set(counts)):
        if spans and count == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], count)
        else:
            spans.append((count, count))
    return spans

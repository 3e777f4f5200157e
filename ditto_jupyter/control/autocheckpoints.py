"""Automatic checkpoints (`%autocheckpoint`): which ones a prune thins, and how.

An automatic checkpoint is named `cell-<execution count>` and carries
`metadata["autocheckpoint"] = {"execution_count", "source", "failed"}`. Pruning keeps the
newest N of a runtime's automatic checkpoints whole and thins the older ones: the row
stays (the tree's lineage, the name, the cell's source), its variables (namespace
manifest) and workspace snapshot go, so their chunks become garbage for gc. Named
checkpoints are never touched. A checkpoint stays whole, whatever its age, while it is a
runtime's head (a checkout child starts with its source's checkpoint as head) or the parent
of another runtime's checkpoint (a checkout branched from it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import RuntimeCheckpoint

#: The metadata key of an automatic checkpoint.
AUTOCHECKPOINT_KEY = "autocheckpoint"
#: The metadata key a thinned automatic checkpoint gets (True).
PRUNED_KEY = "pruned"


def is_automatic(checkpoint: RuntimeCheckpoint) -> bool:
    """Whether `%autocheckpoint` took this checkpoint."""
    return isinstance(checkpoint.metadata.get(AUTOCHECKPOINT_KEY), dict)


def is_pruned(checkpoint: RuntimeCheckpoint) -> bool:
    """Whether a prune dropped this checkpoint's state (its row is history only)."""
    return checkpoint.metadata.get(PRUNED_KEY) is True


def held_whole(checkpoints: Iterable[RuntimeCheckpoint], heads: Iterable[str]) -> set[str]:
    """Checkpoints a prune must leave whole: heads, and sources of other runtimes' ones."""
    checkpoints = list(checkpoints)
    runtime_of = {c.checkpoint_id: c.runtime_id for c in checkpoints}
    held = set(heads)
    for checkpoint in checkpoints:
        parent = checkpoint.parent_checkpoint_id
        if parent is not None and runtime_of.get(parent, checkpoint.runtime_id) != (
            checkpoint.runtime_id
        ):
            held.add(parent)
    return held


def whole_automatic(checkpoints: Sequence[RuntimeCheckpoint]) -> int:
    """How many of these checkpoints are automatic and still whole."""
    return sum(1 for c in checkpoints if is_automatic(c) and not is_pruned(c))


def prune_plan(
    checkpoints: Sequence[RuntimeCheckpoint], keep: int, held: set[str]
) -> tuple[list[RuntimeCheckpoint], list[str]]:
    """(checkpoints to thin, ids held whole) among one runtime's, oldest first."""
    automatic = [c for c in checkpoints if is_automatic(c) and not is_pruned(c)]
    beyond = automatic[: max(len(automatic) - keep, 0)]
    return (
        [c for c in beyond if c.checkpoint_id not in held],
        [c.checkpoint_id for c in beyond if c.checkpoint_id in held],
    )


def thinned(checkpoint: RuntimeCheckpoint) -> RuntimeCheckpoint:
    """The checkpoint as a prune leaves it: no variables, no workspace snapshot."""
    ref = checkpoint.backend_ref
    if ref is not None:
        ref = ref.model_copy(update={"provider_snapshot_id": None})
    return checkpoint.model_copy(
        update={
            "context_manifest_id": None,
            "backend_ref": ref,
            "unrestorable": [],
            "metadata": {**checkpoint.metadata, PRUNED_KEY: True},
        }
    )


def refuse_pruned(checkpoint: RuntimeCheckpoint) -> None:
    """InvalidRequest when a prune dropped the checkpoint's state (nothing to bring back)."""
    if is_pruned(checkpoint):
        label = f" ({checkpoint.name})" if checkpoint.name else ""
        raise InvalidRequest(
            f"checkpoint {checkpoint.checkpoint_id}{label} was pruned by %autocheckpoint "
            "--keep: its variables and files are gone, only its history row is left"
        )

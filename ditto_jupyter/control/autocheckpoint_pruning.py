"""Pruning automatic checkpoints (`%autocheckpoint --keep N`): which ones, and how.

An automatic checkpoint is named `cell-<execution count>` and records the cell it followed
in its `automatic` field (`AutoCheckpointCell`: execution count, source, failed). Pruning
keeps the newest N of a runtime's automatic checkpoints whole and thins the older ones: the
row stays (the tree's lineage, the name, the cell), its variables (namespace manifest),
workspace snapshot and notebook document go, so their chunks become garbage for gc (cells
other checkpoints hold stay), and its `pruned` field is set. Checkpoints taken on request
are never touched. A checkpoint stays whole, whatever its age, while it is a runtime's head
(a checkout child starts with its source's checkpoint as head), a checkout's source, or the
parent of another runtime's checkpoint.

Both flags are fields of the record that only the system writes (`automatic` comes from the
kernel's own `%autocheckpoint` hook, `pruned` from a prune): a user's metadata, whatever
keys it holds, decides nothing here. The store finds what a prune needs with one indexed
query (`CheckpointStore.prune_candidates`).
"""

from __future__ import annotations

from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import CheckpointSummary, RuntimeCheckpoint


def is_automatic(checkpoint: RuntimeCheckpoint | CheckpointSummary) -> bool:
    """Whether `%autocheckpoint` took this checkpoint."""
    return checkpoint.automatic is not None


def is_pruned(checkpoint: RuntimeCheckpoint | CheckpointSummary) -> bool:
    """Whether a prune dropped this checkpoint's state (its row is history only)."""
    return checkpoint.pruned


def thinned(checkpoint: RuntimeCheckpoint) -> RuntimeCheckpoint:
    """The checkpoint as a prune leaves it: no variables, workspace snapshot or document."""
    ref = checkpoint.backend_ref
    if ref is not None:
        ref = ref.model_copy(update={"provider_snapshot_id": None})
    return checkpoint.model_copy(
        update={
            "context_manifest_id": None,
            "backend_ref": ref,
            "unrestorable": [],
            "pruned": True,
            "document": None,
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

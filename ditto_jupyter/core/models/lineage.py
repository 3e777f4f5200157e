"""Where a runtime comes from and what was checked out of it."""

from __future__ import annotations

from ditto_jupyter.core.models.fields import StrictModel
from ditto_jupyter.core.models.records import (
    CheckpointSummary,
    FanOutMember,
    SessionLifecycleStatus,
)


class CheckoutOrigin(StrictModel):
    """Where a checkout child came from: the source runtime and its checkpoint."""

    runtime_id: str
    checkpoint_id: str


class CheckoutBranch(StrictModel):
    """A runtime checked out from one of this runtime's checkpoints, and the fan-out it
    was made by (None for a single checkout)."""

    runtime_id: str
    checkpoint_id: str
    conversation_id: str
    status: SessionLifecycleStatus
    fanout: FanOutMember | None = None


class RuntimeLineage(StrictModel):
    """GET /api/v1/runtimes/{runtime_id}/lineage: head, checkout origin, checkouts from it.

    What a checkpoint tree needs beside the listing; the side panel draws the checkouts
    made from a checkpoint as branches, and the origin as where the tree starts.
    """

    runtime_id: str
    head: CheckpointSummary | None
    source: CheckoutOrigin | None
    checkouts: list[CheckoutBranch]

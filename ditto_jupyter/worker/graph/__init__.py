"""Graphs of named nodes, run by an async scheduler or in checkpointed waves that survive a crash.

Modules: `definition` (`Graph`, nodes, `NodeContext`), `checkpoint` (the checkpoint
document, `GraphCheckpointOptions`, `uncertain_nodes`, `accept_uncertain`), `scheduler`
(`run_graph`, the scheduler and the checkpointed runs in waves), `errors`. `Runtime.run`
(`ditto_jupyter.worker.runtime`) is the entry point.
"""

from __future__ import annotations

from ditto_jupyter.worker.graph.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointStatus,
    GraphCheckpoint,
    GraphCheckpointOptions,
    SaveFn,
    accept_uncertain,
    input_digest,
    json_copy,
    uncertain_nodes,
)
from ditto_jupyter.worker.graph.definition import (
    Graph,
    Node,
    NodeContext,
    NodeFn,
    binding_name,
    idempotency_key,
)
from ditto_jupyter.worker.graph.errors import (
    CheckpointMismatchError,
    GraphCheckpointError,
    GraphDefinitionError,
    GraphError,
    InvalidCheckpointError,
    NodeCancelledError,
    UncertainCheckpointError,
)
from ditto_jupyter.worker.graph.scheduler import GraphResult, ReplayRecorder, run_graph

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointMismatchError",
    "CheckpointStatus",
    "Graph",
    "GraphCheckpoint",
    "GraphCheckpointError",
    "GraphCheckpointOptions",
    "GraphDefinitionError",
    "GraphError",
    "GraphResult",
    "InvalidCheckpointError",
    "Node",
    "NodeCancelledError",
    "NodeContext",
    "NodeFn",
    "ReplayRecorder",
    "SaveFn",
    "UncertainCheckpointError",
    "accept_uncertain",
    "binding_name",
    "idempotency_key",
    "input_digest",
    "json_copy",
    "run_graph",
    "uncertain_nodes",
]

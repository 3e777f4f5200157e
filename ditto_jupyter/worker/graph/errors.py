"""The graph and loop errors: a malformed graph, and checkpoints that cannot resume a run."""

from __future__ import annotations

from collections.abc import Sequence


class GraphError(Exception):
    """Base class of graph and loop errors."""


class GraphDefinitionError(GraphError, ValueError):
    """The graph being built is malformed: unknown dependency, cycle, duplicate name."""


class GraphCheckpointError(GraphError):
    """A checkpoint cannot be used to resume this run."""


class NodeCancelledError(GraphError):
    """A node's task was cancelled from inside the graph (not by cancelling the run)."""


class InvalidCheckpointError(GraphCheckpointError, ValueError):
    """The checkpoint is not a well-formed checkpoint of this library."""


class CheckpointMismatchError(GraphCheckpointError):
    """The checkpoint was made by a different graph, input, version or loop."""


class UncertainCheckpointError(GraphCheckpointError):
    """The checkpoint names nodes that may have had effects without a recorded output."""

    def __init__(self, graph: str, nodes: Sequence[str]) -> None:
        self.graph = graph
        self.nodes: tuple[str, ...] = tuple(nodes)
        names = ", ".join(repr(n) for n in self.nodes)
        super().__init__(
            f"checkpoint of graph {graph!r} has uncertain nodes {names} that may have had "
            f"effects; resolve those effects, then pass accept_uncertain=[...] naming them"
        )

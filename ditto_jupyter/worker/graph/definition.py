"""Defining a graph: named nodes, their dependencies, what a node function receives.

A node's deps must be declared before it, so a graph is a DAG by construction; a
self-dependency is refused as a cycle, and redeclaring a name is refused as a duplicate.
The graph's shape hash (names, deps, idempotency, function names) ties a checkpoint to it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ditto_jupyter.worker.canonical import sha256_digest
from ditto_jupyter.worker.graph.errors import GraphDefinitionError

NodeFn = Callable[["NodeContext"], Any]


@dataclass(frozen=True)
class Node:
    """One node: a function of a `NodeContext`, run after all of `deps`."""

    name: str
    fn: NodeFn
    deps: tuple[str, ...]
    idempotent: bool = False


@dataclass(slots=True)
class NodeContext:
    """What a node function receives.

    `idempotency_key` is the same every time this node runs for this run (a resumed run
    keeps the run id of its checkpoint), so external effects can be made idempotent.
    """

    node: str
    input: Any
    deps: Mapping[str, Any]
    graph: str
    run_id: str
    idempotency_key: str
    tokens: int = field(default=0)

    def record_tokens(self, tokens: int) -> None:
        """Add to this node's logical token cost, kept in the checkpoint for replay accounting."""
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"record_tokens needs a non-negative int, got {tokens!r}")
        self.tokens += tokens


class Graph:
    """A named DAG of nodes. Dependencies must be declared before the nodes that use them."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise GraphDefinitionError("graph name must be a non-empty string")
        self.name = name
        self._nodes: dict[str, Node] = {}
        self._hash: str | None = None

    def node(
        self,
        name: str,
        fn: NodeFn,
        deps: Sequence[str] = (),
        *,
        idempotent: bool = False,
    ) -> Graph:
        """Add a node; refuse duplicates, unknown dependencies and cycles. Returns the graph.

        `idempotent=True` declares that running the node again is harmless (it uses
        `ctx.idempotency_key`), so a crash while it ran does not make it uncertain.
        """
        if not isinstance(name, str) or not name:
            raise GraphDefinitionError(f"graph {self.name!r}: node name must be a non-empty string")
        if name in self._nodes:
            raise GraphDefinitionError(f"graph {self.name!r}: duplicate node name {name!r}")
        if not callable(fn):
            raise GraphDefinitionError(f"graph {self.name!r}: node {name!r} needs a callable")
        if isinstance(deps, str) or not isinstance(deps, Iterable):
            raise GraphDefinitionError(
                f"graph {self.name!r}: deps of node {name!r} must be a list of node names"
            )
        dep_names = tuple(deps)
        for dep in dep_names:
            if dep == name:
                raise GraphDefinitionError(
                    f"graph {self.name!r}: cycle, node {name!r} depends on itself"
                )
            if not isinstance(dep, str) or dep not in self._nodes:
                raise GraphDefinitionError(
                    f"graph {self.name!r}: node {name!r} depends on unknown node {dep!r} "
                    f"(declare a node before the nodes that depend on it)"
                )
        if len(set(dep_names)) != len(dep_names):
            raise GraphDefinitionError(
                f"graph {self.name!r}: node {name!r} lists a dependency twice"
            )
        self._nodes[name] = Node(name, fn, dep_names, bool(idempotent))
        self._hash = None
        return self

    @property
    def nodes(self) -> Mapping[str, Node]:
        """The nodes in declaration order (a topological order)."""
        return dict(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def binding(self) -> dict[str, Any]:
        """The hashed description: name, node names, deps, idempotency and function names."""
        return {
            "graph": self.name,
            "nodes": [
                {
                    "name": n.name,
                    "deps": list(n.deps),
                    "fn": binding_name(n.fn),
                    "idempotent": n.idempotent,
                }
                for n in self._nodes.values()
            ],
        }

    def shape_hash(self) -> str:
        """SHA-256 of `binding()`; changes when names, deps or bound functions change."""
        if self._hash is None:
            self._hash = sha256_digest(self.binding())
        return self._hash


def binding_name(fn: Callable[..., Any]) -> str:
    """Module-qualified name of a node function (of its class for callable objects)."""
    if isinstance(fn, functools.partial):
        return f"functools.partial({binding_name(fn.func)})"
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not isinstance(qualname, str):
        qualname, module = type(fn).__qualname__, type(fn).__module__
    return f"{module}.{qualname}"


def idempotency_key(graph: str, run_id: str, node: str) -> str:
    """The key a node sees as `ctx.idempotency_key`: stable for a graph, run and node."""
    return f"{graph}/{run_id}/{node}"

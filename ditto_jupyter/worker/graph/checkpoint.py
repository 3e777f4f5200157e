"""The graph checkpoint format: the JSON document saved at every boundary between waves.

A checkpoint names the completed outputs and the nodes about to be admitted, so a process
killed mid-wave leaves a document that says which nodes may have had effects
(`uncertain_nodes`); `accept_uncertain` is how a caller resolves them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from ditto_jupyter.worker.canonical import child_path, encode_json
from ditto_jupyter.worker.graph.definition import Graph
from ditto_jupyter.worker.graph.errors import (
    CheckpointMismatchError,
    GraphCheckpointError,
    InvalidCheckpointError,
)

CHECKPOINT_FORMAT = "ditto.graph-checkpoint/1"

CheckpointStatus = Literal["running", "completed", "failed"]
_STATUSES: frozenset[str] = frozenset({"running", "completed", "failed"})


class GraphCheckpoint(TypedDict):
    """The JSON document handed to `save` at every quiescent boundary.

    `admitted` names the wave about to start (uncertain if no later checkpoint follows),
    `uncertain` the nodes that failed, `errors` why; `seq` grows by one per save within a
    run and across its resumes, so a store can tell the latest checkpoint of a run. Treat it
    as read-only: successive checkpoints share the recorded outputs.
    """

    format: str
    graph: str
    graph_hash: str
    input_hash: str
    version: str
    run_id: str
    seq: int
    status: CheckpointStatus
    completed: dict[str, Any]
    tokens: dict[str, int]
    admitted: list[str]
    uncertain: list[str]
    errors: dict[str, str]


SaveFn = Callable[[GraphCheckpoint], "Awaitable[object] | object"]


@dataclass(frozen=True)
class GraphCheckpointOptions:
    """Checkpointing for `Runtime.run`.

    `version` must also identify what the graph hash cannot see (configuration, captured
    closure values, resource snapshots). `accept_uncertain` names uncertain nodes whose
    effects the caller has resolved; they run again with the same idempotency key.
    """

    version: str
    save: SaveFn
    resume: Mapping[str, Any] | None = None
    accept_uncertain: Sequence[str] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.version, str) or not self.version:
            raise TypeError("GraphCheckpointOptions.version must be a non-empty string")
        if not callable(self.save):
            raise TypeError("GraphCheckpointOptions.save must be callable")
        if self.resume is not None and not isinstance(self.resume, Mapping):
            raise TypeError("GraphCheckpointOptions.resume must be a checkpoint dict or None")
        check_names(self.accept_uncertain, "GraphCheckpointOptions.accept_uncertain")


def check_names(names: object, what: str) -> None:
    """TypeError unless `names` is a list of node names (`what` says whose)."""
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"{what} must be a list of node names")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} must contain node names (strings), got {name!r}")


def output_path(node: str) -> str:
    """The JSON path of a node's output in a checkpoint (`$.completed.<node>`)."""
    return child_path("$.completed", node)


def json_copy(value: Any, path: str) -> Any:
    """A fresh deep copy of `value`, which must be JSON state (StateValidationError names
    the offending `path` otherwise)."""
    return encode_json(value, path, canonical=False).copy


def input_digest(value: Any) -> str:
    """SHA-256 over the canonical JSON of a graph input (which must be JSON state)."""
    return "sha256:" + hashlib.sha256(encode_json(value, "$input").canonical).hexdigest()


def _field(checkpoint: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = checkpoint.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise InvalidCheckpointError(f"graph checkpoint field {key!r} is missing or malformed")
    return value


def parse_checkpoint(
    checkpoint: Mapping[str, Any], graph: Graph, input_hash: str, version: str
) -> GraphCheckpoint:
    """Check a checkpoint's structure, then that it belongs to this graph, input and version;
    return a private, typed copy."""
    if not isinstance(checkpoint, Mapping):
        raise InvalidCheckpointError("a graph checkpoint must be a dict")
    if checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise InvalidCheckpointError(
            f"not a graph checkpoint: format is {checkpoint.get('format')!r}, "
            f"expected {CHECKPOINT_FORMAT!r}"
        )
    status = _field(checkpoint, "status", str)
    if status not in _STATUSES:
        raise InvalidCheckpointError(f"graph checkpoint has unknown status {status!r}")
    completed = _field(checkpoint, "completed", dict)
    tokens = _field(checkpoint, "tokens", dict)
    admitted = _field(checkpoint, "admitted", list)
    uncertain = _field(checkpoint, "uncertain", list)
    errors = _field(checkpoint, "errors", dict)
    for key in ("graph", "graph_hash", "input_hash", "version", "run_id"):
        _field(checkpoint, key, str)
    seq = _field(checkpoint, "seq", int)
    if seq < 0:
        raise InvalidCheckpointError("graph checkpoint field 'seq' is missing or malformed")
    if checkpoint["graph_hash"] != graph.shape_hash():
        raise CheckpointMismatchError(
            f"checkpoint was made by a different graph than {graph.name!r} "
            f"(node names, deps or functions changed)"
        )
    if checkpoint["input_hash"] != input_hash:
        raise CheckpointMismatchError(
            f"checkpoint of graph {graph.name!r} was made for a different input"
        )
    if checkpoint["version"] != version:
        raise CheckpointMismatchError(
            f"checkpoint of graph {graph.name!r} has version {checkpoint['version']!r}, "
            f"this run has version {version!r}"
        )
    names = graph.nodes
    for key, group in (
        ("completed", completed),
        ("tokens", tokens),
        ("admitted", admitted),
        ("uncertain", uncertain),
    ):
        for name in group:
            if name not in names:
                raise InvalidCheckpointError(
                    f"graph checkpoint field {key!r} names unknown node {name!r}"
                )
    for name in completed:
        missing = [d for d in names[name].deps if d not in completed]
        if missing:
            raise InvalidCheckpointError(
                f"graph checkpoint lists node {name!r} as completed but not its deps {missing}"
            )
    for name, count in tokens.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidCheckpointError(f"graph checkpoint has a bad token count for {name!r}")
    overlap = (set(admitted) | set(uncertain)) & set(completed)
    if overlap:
        raise InvalidCheckpointError(
            f"graph checkpoint lists nodes {sorted(overlap)} as completed and uncertain"
        )
    return GraphCheckpoint(
        format=CHECKPOINT_FORMAT,
        graph=_field(checkpoint, "graph", str),
        graph_hash=_field(checkpoint, "graph_hash", str),
        input_hash=_field(checkpoint, "input_hash", str),
        version=_field(checkpoint, "version", str),
        run_id=_field(checkpoint, "run_id", str),
        status=status,
        completed={
            name: json_copy(completed[name], output_path(name))
            for name in names
            if name in completed
        },
        seq=seq,
        tokens={str(k): int(v) for k, v in tokens.items()},
        admitted=[str(n) for n in admitted],
        uncertain=[str(n) for n in uncertain],
        errors={str(k): str(v) for k, v in errors.items()},
    )


def uncertain_nodes(checkpoint: Mapping[str, Any]) -> list[str]:
    """Nodes of a checkpoint that may have had effects without a recorded output.

    These are the nodes whose failure was recorded, and the nodes admitted to a wave that
    never reached the next boundary (the process stopped while they ran).
    """
    seen: dict[str, None] = {}
    for name in [*checkpoint.get("uncertain", []), *checkpoint.get("admitted", [])]:
        if name not in checkpoint.get("completed", {}):
            seen[name] = None
    return list(seen)


def accept_uncertain(
    checkpoint: Mapping[str, Any],
    nodes: Sequence[str],
    outputs: Mapping[str, Any] | None = None,
) -> GraphCheckpoint:
    """Return a copy of `checkpoint` in which `nodes` are no longer uncertain.

    Call it once the effects of those nodes are resolved. A node given in `outputs` is
    recorded as completed with that output (its effect happened and you know the result);
    the others will run again on resume, with the same idempotency key. The argument is not
    modified.
    """
    if not isinstance(checkpoint, Mapping) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise InvalidCheckpointError("accept_uncertain needs a graph checkpoint")
    check_names(nodes, "accept_uncertain nodes")
    outputs = dict(outputs or {})
    pending = uncertain_nodes(checkpoint)
    for name in [*nodes, *outputs]:
        if name not in pending:
            raise GraphCheckpointError(
                f"node {name!r} is not uncertain in this checkpoint (uncertain: {pending})"
            )
    for name in outputs:
        if name not in nodes:
            raise GraphCheckpointError(f"output given for node {name!r} that is not accepted")
    stored = {name: json_copy(value, output_path(name)) for name, value in outputs.items()}
    accepted = set(nodes)
    result: dict[str, Any] = json_copy(dict(checkpoint), "$")
    completed = dict(result.get("completed", {}))
    completed.update(stored)
    errors = {k: v for k, v in dict(checkpoint.get("errors", {})).items() if k not in accepted}
    uncertain = [n for n in checkpoint.get("uncertain", []) if n not in accepted]
    admitted = [n for n in checkpoint.get("admitted", []) if n not in accepted]
    status = checkpoint.get("status")
    if status == "failed" and not uncertain:
        status = "running"
    result.update(
        completed=completed,
        uncertain=uncertain,
        admitted=admitted,
        errors=errors,
        status=status,
    )
    return result  # type: ignore[return-value]

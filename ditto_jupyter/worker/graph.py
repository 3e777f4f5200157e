"""Graphs of named nodes, run by an async scheduler or in checkpointed waves that survive a crash.

Without a checkpoint a node starts as soon as its dependencies finish. With
`GraphCheckpointOptions` the graph runs in waves: before a wave starts, a JSON checkpoint
naming the completed outputs and the nodes about to be admitted is saved (and awaited), so a
process killed mid-wave leaves a checkpoint that says which nodes may have had effects.
Resuming restores completed outputs without running those nodes again and refuses, with
`UncertainCheckpointError`, nodes that may have had effects until the caller accepts them.

Choices where the seed is silent:
- A node's deps must be declared before it, so a graph is a DAG by construction; a
  self-dependency is refused as a cycle, and redeclaring a name is refused as a duplicate.
- Admitted-but-unfinished nodes of the last saved wave are uncertain, like failed ones
  (write-ahead); `idempotent=True` nodes are exempt and simply run again on resume.
- After a failure (both modes) no further node starts and running nodes finish; the first
  failure in declaration order is re-raised, with a note naming the node.
- Sync node functions run on the event loop thread; wrap blocking I/O in
  `asyncio.to_thread`. Node outputs are recorded as copies, so a dependent that mutates its
  input cannot change a saved checkpoint.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict

from ditto_jupyter.worker.canonical import child_path, encode_json, sha256_digest

CHECKPOINT_FORMAT = "ditto.graph-checkpoint/1"

CheckpointStatus = Literal["running", "completed", "failed"]
_STATUSES: frozenset[str] = frozenset({"running", "completed", "failed"})


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
NodeFn = Callable[["NodeContext"], Any]


class ReplayRecorder(Protocol):
    """What the graph needs from a token budget to report the cost of restored nodes."""

    def record_replay(self, tokens: int, scope: Mapping[str, str] | None = ...) -> object: ...


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
        _check_names(self.accept_uncertain, "GraphCheckpointOptions.accept_uncertain")


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


class GraphResult(Mapping[str, Any]):
    """Every node's output by name, plus which nodes ran and which were restored."""

    def __init__(
        self,
        outputs: dict[str, Any],
        *,
        run_id: str,
        executed: Sequence[str],
        restored: Sequence[str],
    ) -> None:
        self._outputs = outputs
        self.run_id = run_id
        self.executed: tuple[str, ...] = tuple(executed)
        self.restored: tuple[str, ...] = tuple(restored)

    def __getitem__(self, name: str) -> Any:
        return self._outputs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._outputs)

    def __len__(self) -> int:
        return len(self._outputs)

    def __repr__(self) -> str:
        return f"GraphResult({self._outputs!r}, executed={self.executed}, restored={self.restored})"


def _check_names(names: object, what: str) -> None:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(f"{what} must be a list of node names")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{what} must contain node names (strings), got {name!r}")


def idempotency_key(graph: str, run_id: str, node: str) -> str:
    """The key a node sees as `ctx.idempotency_key`: stable for a graph, run and node."""
    return f"{graph}/{run_id}/{node}"


def _output_path(node: str) -> str:
    return child_path("$.completed", node)


def json_copy(value: Any, path: str) -> Any:
    """A fresh deep copy of `value`, which must be JSON state (StateValidationError names
    the offending `path` otherwise)."""
    return encode_json(value, path, canonical=False).copy


def input_digest(value: Any) -> str:
    """SHA-256 over the canonical JSON of a graph input (which must be JSON state)."""
    return "sha256:" + hashlib.sha256(encode_json(value, "$input").canonical).hexdigest()


# --- checkpoint documents -------------------------------------------------------------------


def _field(checkpoint: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = checkpoint.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise InvalidCheckpointError(f"graph checkpoint field {key!r} is missing or malformed")
    return value


def _parse_checkpoint(
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
            name: json_copy(completed[name], _output_path(name))
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
    _check_names(nodes, "accept_uncertain nodes")
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
    stored = {name: json_copy(value, _output_path(name)) for name, value in outputs.items()}
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


# --- running ----------------------------------------------------------------------------------


async def _call(node: Node, ctx: NodeContext) -> Any:
    result = node.fn(ctx)
    if asyncio.iscoroutine(result) or inspect.isawaitable(result):
        result = await result
    return result


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _note(error: BaseException, graph: str, node: str) -> None:
    add_note = getattr(error, "add_note", None)
    if add_note is not None:
        add_note(f"raised by node {node!r} of graph {graph!r}")


async def _drain(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel `tasks` and wait for them, so no node keeps running after `run` returns."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


def _task_error(task: asyncio.Task[Any]) -> BaseException | None:
    if task.cancelled():
        return NodeCancelledError("node task was cancelled")
    return task.exception()


async def _maybe_await(value: object) -> None:
    if inspect.isawaitable(value):
        await value


def _check_limit(max_concurrency: int | None) -> None:
    if max_concurrency is not None and (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise ValueError(f"max_concurrency must be a positive int or None, got {max_concurrency!r}")


async def run_graph(
    graph: Graph,
    input: Any = None,
    *,
    checkpoint: GraphCheckpointOptions | None = None,
    max_concurrency: int | None = None,
    budget: ReplayRecorder | None = None,
    run_id: str | None = None,
) -> GraphResult:
    """Run `graph` on `input`; see `Runtime.run`."""
    if not isinstance(graph, Graph):
        raise TypeError(f"run needs a Graph, got {type(graph).__name__}")
    _check_limit(max_concurrency)
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        raise ValueError("run_id must be a non-empty string")
    if checkpoint is None:  # nothing is restored, so a budget has nothing to record
        return await _run_scheduled(graph, input, run_id or uuid.uuid4().hex, max_concurrency)
    return await _CheckpointedRun.start(graph, input, checkpoint, budget, run_id).run(
        max_concurrency
    )


def _context(
    graph: Graph, node: Node, input: Any, run_id: str, outputs: Mapping[str, Any]
) -> NodeContext:
    return NodeContext(
        node=node.name,
        input=input,
        deps={dep: outputs[dep] for dep in node.deps},
        graph=graph.name,
        run_id=run_id,
        idempotency_key=idempotency_key(graph.name, run_id, node.name),
    )


async def _run_scheduled(
    graph: Graph, input: Any, run_id: str, max_concurrency: int | None
) -> GraphResult:
    """The ordinary scheduler: a node starts as soon as its dependencies finish.

    After a failure no further node starts; nodes already running finish (they may be in
    the middle of an effect), then the first failure is raised.
    """
    nodes = graph.nodes
    order = {name: index for index, name in enumerate(nodes)}
    waiting = {name: set(node.deps) for name, node in nodes.items()}
    dependents: dict[str, list[str]] = {name: [] for name in nodes}
    for node in nodes.values():
        for dep in node.deps:
            dependents[dep].append(node.name)
    ready = deque(name for name, deps in waiting.items() if not deps)
    outputs: dict[str, Any] = {}
    executed: list[str] = []
    running: dict[asyncio.Task[Any], str] = {}
    failures: list[tuple[str, BaseException]] = []
    try:
        while ready or running:
            if len(ready) == 1 and not running and not failures:
                # Nothing else can start until this node finishes: run it inline.
                name = ready.popleft()
                ctx = _context(graph, nodes[name], input, run_id, outputs)
                try:
                    outputs[name] = await _call(nodes[name], ctx)
                except Exception as raised:
                    failures.append((name, raised))
                    continue
                executed.append(name)
                for child in dependents[name]:
                    waiting[child].discard(name)
                    if not waiting[child]:
                        ready.append(child)
                continue
            while (
                ready
                and not failures
                and (max_concurrency is None or len(running) < max_concurrency)
            ):
                name = ready.popleft()
                ctx = _context(graph, nodes[name], input, run_id, outputs)
                running[asyncio.ensure_future(_call(nodes[name], ctx))] = name
            if not running:
                break
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in sorted(done, key=lambda t: order[running[t]]):
                name = running.pop(task)
                error = _task_error(task)
                if error is not None:
                    failures.append((name, error))
                    continue
                outputs[name] = task.result()
                executed.append(name)
                for child in dependents[name]:
                    waiting[child].discard(name)
                    if not waiting[child]:
                        ready.append(child)
    except BaseException:
        await _drain(running)
        raise
    if failures:
        name, error = failures[0]
        _note(error, graph.name, name)
        raise error
    ordered = {name: outputs[name] for name in nodes}
    return GraphResult(ordered, run_id=run_id, executed=executed, restored=())


class _CheckpointedRun:
    """One run in waves, with a checkpoint saved at every boundary between waves."""

    def __init__(
        self,
        graph: Graph,
        input: Any,
        options: GraphCheckpointOptions,
        run_id: str,
        input_hash: str,
        restored: GraphCheckpoint | None,
    ) -> None:
        self.graph = graph
        self.nodes = graph.nodes
        self.input = input
        self.options = options
        self.run_id = run_id
        self.graph_hash = graph.shape_hash()
        self.input_hash = input_hash
        self.completed: dict[str, Any] = dict(restored["completed"]) if restored else {}
        self.tokens: dict[str, int] = dict(restored["tokens"]) if restored else {}
        self.seq = restored["seq"] + 1 if restored else 0
        self.restored_names = list(self.completed)
        self.paths = {name: _output_path(name) for name in self.nodes}
        self.already_completed = restored is not None and restored["status"] == "completed"
        # Outputs handed to dependents: the node's own object, or a copy of a restored one.
        self.live: dict[str, Any] = {
            name: json_copy(value, _output_path(name)) for name, value in self.completed.items()
        }

    @classmethod
    def start(
        cls,
        graph: Graph,
        input: Any,
        options: GraphCheckpointOptions,
        budget: ReplayRecorder | None,
        run_id: str | None,
    ) -> _CheckpointedRun:
        """Validate input and resume checkpoint before anything runs or is saved."""
        input_hash = input_digest(input)
        restored: GraphCheckpoint | None = None
        accepted = list(options.accept_uncertain)
        if options.resume is not None:
            restored = _parse_checkpoint(options.resume, graph, input_hash, options.version)
            if run_id is not None and run_id != restored["run_id"]:
                raise CheckpointMismatchError(
                    f"run_id {run_id!r} differs from the checkpoint's run {restored['run_id']!r}"
                )
            idempotent = {n for n, node in graph.nodes.items() if node.idempotent}
            blocking = [n for n in uncertain_nodes(restored) if n not in idempotent]
            refused = [n for n in blocking if n not in accepted]
            if refused:
                raise UncertainCheckpointError(graph.name, refused)
            stray = [n for n in accepted if n not in uncertain_nodes(restored)]
            if stray:
                raise GraphCheckpointError(
                    f"accept_uncertain names nodes {stray} that are not uncertain in the "
                    f"checkpoint of graph {graph.name!r}"
                )
            run_id = restored["run_id"]
        elif accepted:
            raise GraphCheckpointError("accept_uncertain needs a checkpoint to resume")
        run = cls(graph, input, options, run_id or uuid.uuid4().hex, input_hash, restored)
        if budget is not None:
            for name in run.restored_names:
                tokens = run.tokens.get(name, 0)
                if tokens:
                    budget.record_replay(
                        tokens, {"graph": graph.name, "run_id": run.run_id, "node": name}
                    )
        return run

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    def document(
        self,
        status: CheckpointStatus,
        admitted: Sequence[str],
        uncertain: Sequence[str] = (),
        errors: Mapping[str, str] | None = None,
    ) -> GraphCheckpoint:
        return GraphCheckpoint(
            format=CHECKPOINT_FORMAT,
            graph=self.graph.name,
            graph_hash=self.graph_hash,
            input_hash=self.input_hash,
            version=self.options.version,
            run_id=self.run_id,
            status=status,
            completed=dict(self.completed),
            seq=self.next_seq(),
            tokens=dict(self.tokens),
            admitted=list(admitted),
            uncertain=list(uncertain),
            errors=dict(errors or {}),
        )

    async def run(self, max_concurrency: int | None) -> GraphResult:
        executed: list[str] = []
        order = {name: index for index, name in enumerate(self.nodes)}
        waiting = {
            name: sum(dep not in self.completed for dep in node.deps)
            for name, node in self.nodes.items()
            if name not in self.completed
        }
        dependents: dict[str, list[str]] = {name: [] for name in self.nodes}
        for name in waiting:
            for dep in self.nodes[name].deps:
                dependents[dep].append(name)
        pool = [name for name, count in waiting.items() if not count]
        remaining = len(waiting)
        if not remaining and self.already_completed:
            return self.result(executed)
        while True:
            ready, pool = pool[:max_concurrency], pool[len(pool[:max_concurrency]) :]
            status: CheckpointStatus = "running" if remaining else "completed"
            await _maybe_await(self.options.save(self.document(status, ready)))
            if not ready:
                return self.result(executed)
            failures = await self.wave(ready)
            if failures:
                errors = {name: _describe(error) for name, error in failures.items()}
                failed = self.document("failed", (), list(failures), errors)
                await _maybe_await(self.options.save(failed))
                name, error = next(iter(failures.items()))
                _note(error, self.graph.name, name)
                raise error
            executed.extend(ready)
            remaining -= len(ready)
            for name in ready:
                for child in dependents[name]:
                    waiting[child] -= 1
                    if not waiting[child]:
                        pool.append(child)
            pool.sort(key=order.__getitem__)

    def context(self, name: str) -> NodeContext:
        return NodeContext(
            node=name,
            input=self.input,
            deps={dep: self.live[dep] for dep in self.nodes[name].deps},
            graph=self.graph.name,
            run_id=self.run_id,
            idempotency_key=idempotency_key(self.graph.name, self.run_id, name),
        )

    async def wave(self, ready: list[str]) -> dict[str, BaseException]:
        """Run one wave to completion (drained even if some nodes fail); record outputs.

        A wave of one node runs inline: there is nothing to overlap it with.
        """
        contexts = {name: self.context(name) for name in ready}
        outcomes: dict[str, tuple[Any, BaseException | None]] = {}
        if len(ready) == 1:
            name = ready[0]
            try:
                outcomes[name] = (await _call(self.nodes[name], contexts[name]), None)
            except Exception as raised:
                outcomes[name] = (None, raised)
        else:
            tasks = {
                name: asyncio.ensure_future(_call(self.nodes[name], contexts[name]))
                for name in ready
            }
            try:
                await asyncio.wait(tasks.values())
            except BaseException:
                await _drain(tasks.values())
                raise
            for name, task in tasks.items():
                problem = _task_error(task)
                outcomes[name] = (task.result() if problem is None else None, problem)
        failures: dict[str, BaseException] = {}
        for name, (output, failure) in outcomes.items():
            if failure is None:
                try:
                    stored = json_copy(output, self.paths[name])
                except Exception as invalid:
                    failure = invalid
                else:
                    self.completed[name] = stored
                    self.live[name] = output
                    if contexts[name].tokens:
                        self.tokens[name] = contexts[name].tokens
                    continue
            failures[name] = failure
        return failures

    def result(self, executed: list[str]) -> GraphResult:
        outputs = {name: self.live[name] for name in self.nodes}
        return GraphResult(
            outputs, run_id=self.run_id, executed=executed, restored=self.restored_names
        )

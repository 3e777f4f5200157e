"""Running a graph: the async scheduler, and checkpointed runs in waves.

Without a checkpoint a node starts as soon as its dependencies finish. With
`GraphCheckpointOptions` the graph runs in waves: before a wave starts, its checkpoint is
saved (and awaited). Resuming restores completed outputs without running those nodes
again and refuses, with `UncertainCheckpointError`, nodes that may have had effects until
the caller accepts them; `idempotent=True` nodes simply run again.

After a failure (both modes) no further node starts and running nodes finish; the first
failure in declaration order is re-raised, with a note naming the node. Sync node functions
run on the event loop thread; wrap blocking I/O in `asyncio.to_thread`. Node outputs are
recorded as copies, so a dependent that mutates its input cannot change a saved checkpoint.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from ditto_jupyter.worker.graph.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointStatus,
    GraphCheckpoint,
    GraphCheckpointOptions,
    input_digest,
    json_copy,
    output_path,
    parse_checkpoint,
    uncertain_nodes,
)
from ditto_jupyter.worker.graph.definition import Graph, Node, NodeContext, idempotency_key
from ditto_jupyter.worker.graph.errors import (
    CheckpointMismatchError,
    GraphCheckpointError,
    NodeCancelledError,
    UncertainCheckpointError,
)


class ReplayRecorder(Protocol):
    """What the graph needs from a token budget to report the cost of restored nodes."""

    def record_replay(self, tokens: int, scope: Mapping[str, str] | None = ...) -> object: ...


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
        self.paths = {name: output_path(name) for name in self.nodes}
        self.already_completed = restored is not None and restored["status"] == "completed"
        # Outputs handed to dependents: the node's own object, or a copy of a restored one.
        self.live: dict[str, Any] = {
            name: json_copy(value, output_path(name)) for name, value in self.completed.items()
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
            restored = parse_checkpoint(options.resume, graph, input_hash, options.version)
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

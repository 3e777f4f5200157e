"""Loops over explicit state, optionally checkpointed after every iteration.

A loop is either a step function `step(state, ctx) -> next_state` (return
`ctx.done(state)` to stop early), or a generator plan `plan(initial_state)` whose every
`yield` is the state after an iteration. Only step loops can be checkpointed: a generator's
suspended frame cannot be serialized. A graph run inside a step keeps its own checkpoint.

An iteration interrupted before its checkpoint was saved runs again on resume, with the same
`ctx.idempotency_key` (loop id, run id and iteration), so its effects can be made idempotent.
On resume `initial_state` is ignored; a completed checkpoint returns its state at once.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Mapping,
)
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from ditto_jupyter.worker.canonical import sha256_digest
from ditto_jupyter.worker.graph import (
    CheckpointMismatchError,
    GraphError,
    InvalidCheckpointError,
    json_copy,
)

LOOP_CHECKPOINT_FORMAT = "ditto.loop-checkpoint/1"

LoopStatus = Literal["running", "completed"]


class LoopDefinitionError(GraphError, TypeError):
    """The loop cannot run as asked (for example a generator plan with a checkpoint)."""


class LoopCheckpoint(TypedDict):
    """The JSON document handed to `save` after every iteration."""

    format: str
    id: str
    version: str
    run_id: str
    status: LoopStatus
    next_index: int
    state: Any
    digest: str


LoopSaveFn = Callable[[LoopCheckpoint], "Awaitable[object] | object"]
LoopPlan = Callable[..., Any] | Iterator[Any] | AsyncIterator[Any]
"""A step function `step(state, ctx)`, or a generator plan (function or generator object)."""


@dataclass(frozen=True)
class LoopCheckpointOptions:
    """Checkpointing for `Runtime.loop`; `version` must identify the loop's definition."""

    id: str
    version: str
    save: LoopSaveFn
    resume: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise TypeError("LoopCheckpointOptions.id must be a non-empty string")
        if not isinstance(self.version, str) or not self.version:
            raise TypeError("LoopCheckpointOptions.version must be a non-empty string")
        if not callable(self.save):
            raise TypeError("LoopCheckpointOptions.save must be callable")
        if self.resume is not None and not isinstance(self.resume, Mapping):
            raise TypeError("LoopCheckpointOptions.resume must be a checkpoint dict or None")


@dataclass(frozen=True)
class LoopDone:
    """Returned by a step to end the loop with `state`."""

    state: Any


@dataclass(frozen=True)
class LoopContext:
    """What a step receives besides the state; the key is stable across a resume."""

    loop_id: str
    run_id: str
    iteration: int
    idempotency_key: str

    def done(self, state: Any) -> LoopDone:
        """End the loop after this iteration with `state`."""
        return LoopDone(state)


def is_generator_plan(plan: object) -> bool:
    """True for generator functions, async generator functions and generator objects."""
    call = getattr(plan, "__call__", None)  # noqa: B004 - callable objects too
    return (
        inspect.isgenerator(plan)
        or inspect.isasyncgen(plan)
        or inspect.isgeneratorfunction(plan)
        or inspect.isasyncgenfunction(plan)
        or (
            call is not None
            and (inspect.isgeneratorfunction(call) or inspect.isasyncgenfunction(call))
        )
    )


_GENERATOR_REFUSAL = (
    "a generator-based loop plan cannot be checkpointed (a suspended generator cannot be "
    "serialized); write it as step(state, ctx) returning the next state"
)


def _digest(loop_id: str, version: str, next_index: int, state: Any) -> str:
    return sha256_digest(
        {"id": loop_id, "version": version, "next_index": next_index, "state": state}
    )


def _parse_checkpoint(
    checkpoint: Mapping[str, Any], options: LoopCheckpointOptions
) -> LoopCheckpoint:
    """Check a loop checkpoint against `options`; return a private copy."""
    if not isinstance(checkpoint, Mapping):
        raise InvalidCheckpointError("a loop checkpoint must be a dict")
    if checkpoint.get("format") != LOOP_CHECKPOINT_FORMAT:
        raise InvalidCheckpointError(
            f"not a loop checkpoint: format is {checkpoint.get('format')!r}, "
            f"expected {LOOP_CHECKPOINT_FORMAT!r}"
        )
    for key in ("id", "version", "run_id", "status", "digest"):
        if not isinstance(checkpoint.get(key), str):
            raise InvalidCheckpointError(f"loop checkpoint field {key!r} is missing or malformed")
    next_index = checkpoint.get("next_index")
    if isinstance(next_index, bool) or not isinstance(next_index, int) or next_index < 0:
        raise InvalidCheckpointError("loop checkpoint field 'next_index' is missing or malformed")
    status = checkpoint["status"]
    if status not in ("running", "completed"):
        raise InvalidCheckpointError(f"loop checkpoint has unknown status {status!r}")
    if checkpoint["id"] != options.id:
        raise CheckpointMismatchError(
            f"checkpoint belongs to loop {checkpoint['id']!r}, not {options.id!r}"
        )
    if checkpoint["version"] != options.version:
        raise CheckpointMismatchError(
            f"checkpoint of loop {options.id!r} has version {checkpoint['version']!r}, "
            f"this loop has version {options.version!r}"
        )
    if "state" not in checkpoint:
        raise InvalidCheckpointError("loop checkpoint field 'state' is missing")
    state = json_copy(checkpoint["state"], "$.state")
    if _digest(options.id, options.version, next_index, state) != checkpoint["digest"]:
        raise InvalidCheckpointError(
            f"checkpoint of loop {options.id!r} fails its digest check (corrupted)"
        )
    return LoopCheckpoint(
        format=LOOP_CHECKPOINT_FORMAT,
        id=options.id,
        version=options.version,
        run_id=checkpoint["run_id"],
        status=status,
        next_index=next_index,
        state=state,
        digest=checkpoint["digest"],
    )


async def _resolve(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _check_max(max_iterations: int) -> None:
    if (
        isinstance(max_iterations, bool)
        or not isinstance(max_iterations, int)
        or max_iterations < 0
    ):
        raise ValueError(f"max_iterations must be a non-negative int, got {max_iterations!r}")


async def run_loop(
    step: LoopPlan,
    initial_state: Any,
    *,
    max_iterations: int,
    state_checkpoint: LoopCheckpointOptions | None = None,
) -> Any:
    """Run `step` up to `max_iterations` times; see `Runtime.loop`."""
    _check_max(max_iterations)
    if is_generator_plan(step):
        if state_checkpoint is not None:
            raise LoopDefinitionError(_GENERATOR_REFUSAL)
        return await _run_generator(step, initial_state, max_iterations)
    if not callable(step):
        raise TypeError(f"loop needs a step function or generator plan, got {step!r}")
    return await _run_steps(step, initial_state, max_iterations, state_checkpoint)


async def _run_generator(plan: Any, initial_state: Any, max_iterations: int) -> Any:
    """Drive a generator plan: each yielded value is the state after one iteration."""
    gen = plan if inspect.isgenerator(plan) or inspect.isasyncgen(plan) else plan(initial_state)
    state = initial_state
    count = 0
    if inspect.isasyncgen(gen):
        agen: AsyncGenerator[Any, Any] = gen
        try:
            while count < max_iterations:
                try:
                    state = await agen.__anext__()
                except StopAsyncIteration:
                    break
                count += 1
        finally:
            await agen.aclose()
        return state
    if not inspect.isgenerator(gen):
        raise LoopDefinitionError(f"generator plan returned {type(gen).__name__}, not a generator")
    sgen: Generator[Any, Any, Any] = gen
    try:
        while count < max_iterations:
            try:
                state = next(sgen)
            except StopIteration:
                break
            count += 1
    finally:
        sgen.close()
    return state


async def _run_steps(
    step: Callable[..., Any],
    initial_state: Any,
    max_iterations: int,
    options: LoopCheckpointOptions | None,
) -> Any:
    """Run a step loop, saving a checkpoint after every iteration when `options` is given."""
    state = initial_state
    index = 0
    loop_id = options.id if options is not None else "loop"
    run_id = uuid.uuid4().hex
    if options is not None:
        if options.resume is not None:
            restored = _parse_checkpoint(options.resume, options)
            if restored["status"] == "completed":
                return restored["state"]
            state, index, run_id = restored["state"], restored["next_index"], restored["run_id"]
        else:
            json_copy(initial_state, "$initial_state")
    while index < max_iterations:
        ctx = LoopContext(
            loop_id=loop_id,
            run_id=run_id,
            iteration=index,
            idempotency_key=f"{loop_id}/{run_id}/{index}",
        )
        result = step(state, ctx)
        if inspect.isgenerator(result) or inspect.isasyncgen(result):
            if isinstance(result, Generator):
                result.close()
            raise LoopDefinitionError(
                _GENERATOR_REFUSAL
                if options is not None
                else "loop step returned a generator; pass the generator function as the plan"
            )
        result = await _resolve(result)
        done = isinstance(result, LoopDone)
        state = result.state if done else result
        index += 1
        if options is not None:
            saved = json_copy(state, "$state")  # the checkpoint keeps its own copy
            status: LoopStatus = "completed" if done or index >= max_iterations else "running"
            checkpoint = LoopCheckpoint(
                format=LOOP_CHECKPOINT_FORMAT,
                id=options.id,
                version=options.version,
                run_id=run_id,
                status=status,
                next_index=index,
                state=saved,
                digest=_digest(options.id, options.version, index, saved),
            )
            await _resolve(options.save(checkpoint))
        if done:
            break
    return state

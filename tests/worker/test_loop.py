"""Loops: step and generator plans, state checkpoints, resume, refusals, inner graphs."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.worker.errors import StateValidationError
from ditto_jupyter.worker.graph import (
    CheckpointMismatchError,
    Graph,
    GraphCheckpoint,
    GraphCheckpointOptions,
    InvalidCheckpointError,
    NodeContext,
    UncertainCheckpointError,
)
from ditto_jupyter.worker.loop import (
    LoopCheckpoint,
    LoopCheckpointOptions,
    LoopContext,
    LoopDefinitionError,
)
from ditto_jupyter.worker.runtime import Runtime


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Saves:
    """Keeps a JSON round trip of every loop checkpoint."""

    def __init__(self) -> None:
        self.items: list[LoopCheckpoint] = []

    async def __call__(self, checkpoint: LoopCheckpoint) -> None:
        self.items.append(json.loads(json.dumps(checkpoint)))


def counting_step(calls: list[int]) -> Any:
    def step(state: dict[str, Any], ctx: LoopContext) -> dict[str, Any]:
        calls.append(ctx.iteration)
        return {"total": state["total"] + ctx.iteration, "seen": [*state["seen"], ctx.iteration]}

    return step


def test_step_loop_runs_max_iterations_and_can_stop_early() -> None:
    calls: list[int] = []
    final = run(Runtime().loop(counting_step(calls), {"total": 0, "seen": []}, max_iterations=4))
    assert final == {"total": 6, "seen": [0, 1, 2, 3]} and calls == [0, 1, 2, 3]

    async def until_three(state: int, ctx: LoopContext) -> Any:
        await asyncio.sleep(0)
        return ctx.done(state) if state >= 3 else state + 1

    assert run(Runtime().loop(until_three, 0, max_iterations=100)) == 3
    assert run(Runtime().loop(until_three, 0, max_iterations=0)) == 0
    with pytest.raises(ValueError, match="max_iterations"):
        run(Runtime().loop(until_three, 0, max_iterations=-1))
    with pytest.raises(TypeError, match="step function"):
        run(Runtime().loop(42, 0, max_iterations=1))  # type: ignore[arg-type]


def test_generator_plans_run_without_checkpoint_and_are_closed() -> None:
    closed: list[str] = []

    def plan(state: int) -> Iterator[int]:
        try:
            while True:
                state += 2
                yield state
        finally:
            closed.append("sync")

    async def aplan(state: int) -> AsyncIterator[int]:
        try:
            for _ in range(3):
                state *= 10
                yield state
        finally:
            closed.append("async")

    assert run(Runtime().loop(plan, 1, max_iterations=5)) == 11
    assert run(Runtime().loop(aplan, 1, max_iterations=10)) == 1000
    assert run(Runtime().loop(aplan, 1, max_iterations=2)) == 100
    assert closed == ["sync", "async", "async"]


def test_generator_plans_with_state_checkpoint_are_refused() -> None:
    saves = Saves()
    options = LoopCheckpointOptions("loop-1", "v1", saves)

    def plan(state: int) -> Iterator[int]:
        yield state + 1

    async def aplan(state: int) -> AsyncIterator[int]:
        yield state + 1

    class Planner:
        def __call__(self, state: int) -> Iterator[int]:
            yield state

    for candidate in (plan, aplan, Planner(), plan(0)):
        with pytest.raises(LoopDefinitionError, match="generator-based loop plan cannot"):
            run(Runtime().loop(candidate, 0, max_iterations=3, state_checkpoint=options))

    def sneaky(state: int, ctx: LoopContext) -> Iterator[int]:  # returns a generator at run time
        return iter_plan(state)

    def iter_plan(state: int) -> Iterator[int]:
        yield state

    assert saves.items == []
    with pytest.raises(LoopDefinitionError, match="cannot be checkpointed"):
        run(Runtime().loop(sneaky, 0, max_iterations=3, state_checkpoint=options))
    assert saves.items == []


def test_state_checkpoint_holds_state_and_next_index_and_resume_continues() -> None:
    calls: list[int] = []
    saves = Saves()
    options = LoopCheckpointOptions("loop-1", "v1", saves)
    start = {"total": 0, "seen": []}
    final = run(
        Runtime().loop(counting_step(calls), start, max_iterations=5, state_checkpoint=options)
    )
    assert [c["next_index"] for c in saves.items] == [1, 2, 3, 4, 5]
    assert [c["status"] for c in saves.items] == ["running"] * 4 + ["completed"]
    assert saves.items[1]["state"] == {"total": 1, "seen": [0, 1]}
    assert start == {"total": 0, "seen": []}

    # Resume from the checkpoint after iteration 2: only iterations 2..4 run again.
    calls.clear()
    resumed = run(
        Runtime().loop(
            counting_step(calls),
            start,
            max_iterations=5,
            state_checkpoint=LoopCheckpointOptions("loop-1", "v1", Saves(), resume=saves.items[1]),
        )
    )
    assert resumed == final and calls == [2, 3, 4]

    # A completed checkpoint returns its state without running a step.
    calls.clear()
    done = LoopCheckpointOptions("loop-1", "v1", Saves(), resume=saves.items[-1])
    again = run(
        Runtime().loop(counting_step(calls), start, max_iterations=5, state_checkpoint=done)
    )
    assert again == final and calls == []


def test_loop_idempotency_key_is_stable_across_resume() -> None:
    keys: list[str] = []
    saves = Saves()

    def step(state: int, ctx: LoopContext) -> int:
        keys.append(ctx.idempotency_key)
        return state + 1

    run(
        Runtime().loop(
            step, 0, max_iterations=3, state_checkpoint=LoopCheckpointOptions("l", "v", saves)
        )
    )
    options = LoopCheckpointOptions("l", "v", Saves(), resume=saves.items[0])
    run(Runtime().loop(step, 0, max_iterations=3, state_checkpoint=options))
    assert keys[1:3] == keys[3:5] and len(set(keys[:3])) == 3
    assert keys[0] == f"l/{saves.items[0]['run_id']}/0"


def test_loop_checkpoint_mismatch_corruption_and_bad_state_are_refused() -> None:
    saves = Saves()
    step = counting_step([])
    start = {"total": 0, "seen": []}
    run(
        Runtime().loop(
            step, start, max_iterations=2, state_checkpoint=LoopCheckpointOptions("a", "v1", saves)
        )
    )
    first = saves.items[0]
    cases: list[tuple[LoopCheckpointOptions, type[Exception], str]] = [
        (LoopCheckpointOptions("b", "v1", Saves(), first), CheckpointMismatchError, "loop 'a'"),
        (LoopCheckpointOptions("a", "v2", Saves(), first), CheckpointMismatchError, "'v1'"),
        (
            LoopCheckpointOptions("a", "v1", Saves(), {**first, "state": {"total": 99}}),
            InvalidCheckpointError,
            "digest",
        ),
        (
            LoopCheckpointOptions("a", "v1", Saves(), {**first, "next_index": -1}),
            InvalidCheckpointError,
            "next_index",
        ),
        (
            LoopCheckpointOptions("a", "v1", Saves(), {**first, "format": "x"}),
            InvalidCheckpointError,
            "not a loop checkpoint",
        ),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            run(Runtime().loop(step, start, max_iterations=2, state_checkpoint=options))
        assert options.save.items == []  # type: ignore[attr-defined]

    bad = Saves()
    with pytest.raises(StateValidationError, match=r"\$state\.when"):
        run(
            Runtime().loop(
                lambda state, ctx: {"when": (1, 2)},
                {},
                max_iterations=2,
                state_checkpoint=LoopCheckpointOptions("a", "v1", bad),
            )
        )
    assert bad.items == []
    with pytest.raises(StateValidationError, match="initial_state"):
        run(
            Runtime().loop(
                step,
                {"s": {1}},
                max_iterations=2,
                state_checkpoint=LoopCheckpointOptions("a", "v1", bad),
            )
        )
    with pytest.raises(TypeError, match="id"):
        LoopCheckpointOptions("", "v1", bad)


def test_graph_inside_a_loop_keeps_its_own_checkpoint() -> None:
    calls: Counter[str] = Counter()
    loop_saves = Saves()
    graph_saves: dict[int, list[GraphCheckpoint]] = {}
    failing = {"iteration": 1}

    def node(ctx: NodeContext) -> int:
        calls[f"{ctx.input['i']}:{ctx.node}"] += 1
        if ctx.node == "score" and ctx.input["i"] == failing["iteration"]:
            raise RuntimeError("model timeout")
        return sum(int(v) for v in ctx.deps.values()) + 1

    g = Graph("inner").node("fetch", node).node("parse", node, deps=["fetch"])
    g.node("score", node, deps=["parse"])

    async def step(state: dict[str, Any], ctx: LoopContext) -> dict[str, Any]:
        i = ctx.iteration
        saved = graph_saves.setdefault(i, [])

        async def save(checkpoint: GraphCheckpoint) -> None:
            saved.append(json.loads(json.dumps(checkpoint)))

        resume = saved[-1] if saved else None
        accept = ["score"] if resume and resume["status"] == "failed" else []
        options = GraphCheckpointOptions("inner-v1", save, resume, accept_uncertain=accept)
        result = await Runtime().run(g, {"i": i}, checkpoint=options)
        return {"scores": [*state["scores"], result["score"]]}

    options = LoopCheckpointOptions("outer", "v1", loop_saves)
    with pytest.raises(RuntimeError, match="model timeout"):
        run(Runtime().loop(step, {"scores": []}, max_iterations=3, state_checkpoint=options))
    assert [c["next_index"] for c in loop_saves.items] == [1]
    assert graph_saves[1][-1]["uncertain"] == ["score"]

    # Resuming the loop alone refuses nothing but the inner graph refuses its uncertain node
    # unless accepted; the step above accepts it, so fetch and parse are restored, not rerun.
    failing["iteration"] = -1
    resume = LoopCheckpointOptions("outer", "v1", loop_saves, resume=loop_saves.items[-1])
    final = run(Runtime().loop(step, {"scores": []}, max_iterations=3, state_checkpoint=resume))
    assert final == {"scores": [3, 3, 3]}
    assert calls == Counter(
        {
            "0:fetch": 1, "0:parse": 1, "0:score": 1,
            "1:fetch": 1, "1:parse": 1, "1:score": 2,
            "2:fetch": 1, "2:parse": 1, "2:score": 1,
        }
    )  # fmt: skip
    failed = next(c for c in graph_saves[1] if c["status"] == "failed")
    with pytest.raises(UncertainCheckpointError):
        run(
            Runtime().run(g, {"i": 1}, checkpoint=GraphCheckpointOptions("inner-v1", print, failed))
        )


LOOP_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from ditto_jupyter.worker.loop import LoopCheckpointOptions
    from ditto_jupyter.worker.runtime import Runtime

    work, mode = sys.argv[1], sys.argv[2]
    path = os.path.join(work, "loop.json")

    async def save(checkpoint):
        tmp = path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(checkpoint, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    async def step(state, ctx):
        with open(os.path.join(work, "steps.log"), "a") as handle:
            handle.write(f"{ctx.iteration}\\n")
        if mode == "crash" and ctx.iteration == 3:
            print("STUCK", flush=True)
            await asyncio.Event().wait()
        return {"sum": state["sum"] + ctx.iteration}

    resume = None if mode == "crash" else json.load(open(path))
    options = LoopCheckpointOptions("sum", "v1", save, resume=resume)
    print(json.dumps(asyncio.run(Runtime().loop(step, {"sum": 0}, max_iterations=6,
                                                state_checkpoint=options))), flush=True)
    """
)


def test_process_killed_mid_loop_resumes_from_the_saved_iteration(tmp_path: Path) -> None:
    script = tmp_path / "loop.py"
    script.write_text(LOOP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), "crash"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "STUCK"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = json.loads((tmp_path / "loop.json").read_text())
    assert saved["next_index"] == 3 and saved["state"] == {"sum": 3}
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "resume"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(out.stdout) == {"sum": 15}
    steps = (tmp_path / "steps.log").read_text().split()
    assert steps == ["0", "1", "2", "3", "3", "4", "5"]  # only the interrupted step ran twice

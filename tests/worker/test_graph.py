"""Graphs: definition checks, the async scheduler, checkpointed waves, resume and refusal."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_jupyter.worker.budget import TokenBudget
from ditto_jupyter.worker.errors import StateValidationError
from ditto_jupyter.worker.graph import (
    CheckpointMismatchError,
    Graph,
    GraphCheckpoint,
    GraphCheckpointError,
    GraphCheckpointOptions,
    GraphDefinitionError,
    InvalidCheckpointError,
    NodeContext,
    UncertainCheckpointError,
    accept_uncertain,
    uncertain_nodes,
)
from ditto_jupyter.worker.runtime import Runtime


class Saves:
    """An in-memory save target that keeps a JSON round trip of every checkpoint."""

    def __init__(self) -> None:
        self.items: list[GraphCheckpoint] = []

    async def __call__(self, checkpoint: GraphCheckpoint) -> None:
        self.items.append(json.loads(json.dumps(checkpoint)))

    @property
    def last(self) -> GraphCheckpoint:
        return self.items[-1]


class Boom(RuntimeError):
    """The failure a test node raises on purpose."""


def recording(calls: Counter[str], value: Callable[[NodeContext], Any] | None = None) -> Any:
    """A sync node function that counts its calls and returns a JSON output."""

    def fn(ctx: NodeContext) -> Any:
        calls[ctx.node] += 1
        if value is not None:
            return value(ctx)
        return {"node": ctx.node, "deps": sorted(ctx.deps), "input": ctx.input}

    return fn


def diamond(
    calls: Counter[str], fail: set[str] | None = None, log: list[str] | None = None
) -> Graph:
    """load -> (left, right) -> join, with optional failing nodes and a log of runs."""
    failing = fail if fail is not None else set()

    def node(ctx: NodeContext) -> Any:
        calls[ctx.node] += 1
        if log is not None:
            log.append(f"run:{ctx.node}")
        if ctx.node in failing:
            raise Boom(f"{ctx.node} failed")
        total = sum(dep["total"] for dep in ctx.deps.values()) + len(ctx.node)
        return {"total": total + ctx.input["n"]}

    g = Graph("diamond")
    g.node("load", node)
    g.node("left", node, deps=["load"])
    g.node("right", node, deps=["load"])
    g.node("join", node, deps=["left", "right"])
    return g


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# --- definition --------------------------------------------------------------------------------


def test_definition_refuses_duplicates_unknown_deps_and_cycles() -> None:
    g = Graph("g")
    g.node("a", lambda ctx: 1)
    with pytest.raises(GraphDefinitionError, match="duplicate node name 'a'"):
        g.node("a", lambda ctx: 2)
    with pytest.raises(GraphDefinitionError, match="unknown node 'missing'"):
        g.node("b", lambda ctx: 2, deps=["missing"])
    with pytest.raises(GraphDefinitionError, match="cycle, node 'c' depends on itself"):
        g.node("c", lambda ctx: 2, deps=["a", "c"])
    with pytest.raises(GraphDefinitionError, match="lists a dependency twice"):
        g.node("d", lambda ctx: 2, deps=["a", "a"])
    with pytest.raises(GraphDefinitionError, match="must be a list of node names"):
        g.node("e", lambda ctx: 2, deps="a")
    with pytest.raises(GraphDefinitionError, match="needs a callable"):
        g.node("f", 42)  # type: ignore[arg-type]
    with pytest.raises(GraphDefinitionError, match="non-empty string"):
        g.node("", lambda ctx: 2)
    with pytest.raises(GraphDefinitionError):
        Graph("")
    # Every refusal left the graph as it was; a back edge is impossible because a node's
    # deps must exist when it is declared, and a node cannot be declared twice.
    assert list(g) == ["a"]
    g.node("b", lambda ctx: 2, deps=["a"])
    with pytest.raises(GraphDefinitionError, match="duplicate"):
        g.node("a", lambda ctx: 3, deps=["b"])
    assert list(g) == ["a", "b"]


def test_shape_hash_covers_names_deps_and_bound_functions() -> None:
    def one(ctx: NodeContext) -> int:
        return 1

    def two(ctx: NodeContext) -> int:
        return 2

    def build(fn: Callable[[NodeContext], int], deps: list[str], name: str = "b") -> Graph:
        return Graph("g").node("a", one).node(name, fn, deps=deps)

    base = build(two, ["a"]).shape_hash()
    assert build(two, ["a"]).shape_hash() == base
    assert build(one, ["a"]).shape_hash() != base
    assert build(two, []).shape_hash() != base
    assert build(two, ["a"], name="c").shape_hash() != base
    assert "test_shape_hash_covers_names_deps_and_bound_functions.<locals>.two" in json.dumps(
        build(two, ["a"]).binding()
    )


def test_bad_run_arguments_are_refused_before_anything_runs() -> None:
    calls: Counter[str] = Counter()
    g = diamond(calls)

    async def save(checkpoint: GraphCheckpoint) -> None:
        raise AssertionError("nothing may be saved")

    with pytest.raises(TypeError, match="version"):
        GraphCheckpointOptions("", save)
    with pytest.raises(TypeError, match="save must be callable"):
        GraphCheckpointOptions("v1", "not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="accept_uncertain must be a list"):
        GraphCheckpointOptions("v1", save, accept_uncertain="left")
    with pytest.raises(TypeError, match="resume must be a checkpoint dict"):
        GraphCheckpointOptions("v1", save, resume=[])  # type: ignore[arg-type]
    with pytest.raises(GraphCheckpointError, match="needs a checkpoint to resume"):
        opts = GraphCheckpointOptions("v1", save, accept_uncertain=["left"])
        run(Runtime().run(g, {"n": 1}, checkpoint=opts))
    with pytest.raises(TypeError, match="needs a Graph"):
        run(Runtime().run("diamond", {"n": 1}))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="run_id"):
        run(Runtime().run(g, {"n": 1}, run_id=""))
    with pytest.raises(ValueError, match="max_concurrency"):
        Runtime(max_concurrency=0)
    assert not calls


# --- ordinary scheduler ------------------------------------------------------------------------


def test_sync_and_async_nodes_see_input_deps_and_keys() -> None:
    seen: dict[str, NodeContext] = {}

    def load(ctx: NodeContext) -> int:
        seen[ctx.node] = ctx
        return int(ctx.input) * 2

    async def double(ctx: NodeContext) -> int:
        seen[ctx.node] = ctx
        await asyncio.sleep(0)
        return int(ctx.deps["load"]) * 2

    g = Graph("pipeline").node("load", load).node("double", double, deps=["load"])
    result = run(Runtime().run(g, 5))
    assert dict(result) == {"load": 10, "double": 20}
    assert result.executed == ("load", "double") and result.restored == ()
    assert seen["double"].deps == {"load": 10} and seen["double"].input == 5
    assert seen["load"].idempotency_key == f"pipeline/{result.run_id}/load"
    assert seen["double"].idempotency_key != seen["load"].idempotency_key
    again = run(Runtime().run(g, 5, run_id="fixed"))
    assert again.run_id == "fixed"
    assert seen["load"].idempotency_key == "pipeline/fixed/load"


def test_scheduler_starts_a_node_as_soon_as_its_deps_finish() -> None:
    events: list[str] = []

    async def slow(ctx: NodeContext) -> str:
        events.append("slow:start")
        for _ in range(1000):
            if "after_fast:start" in events:
                break
            await asyncio.sleep(0)
        events.append("slow:end")
        return "slow"

    async def fast(ctx: NodeContext) -> str:
        events.append("fast:end")
        return "fast"

    async def after_fast(ctx: NodeContext) -> str:
        events.append("after_fast:start")
        return "after"

    g = Graph("g").node("slow", slow).node("fast", fast)
    g.node("after_fast", after_fast, deps=["fast"])
    run(Runtime().run(g))
    assert events.index("after_fast:start") < events.index("slow:end")


def concurrency_probe() -> tuple[Callable[[NodeContext], Any], list[int]]:
    active = [0]
    peaks: list[int] = []

    async def node(ctx: NodeContext) -> int:
        active[0] += 1
        peaks.append(active[0])
        for _ in range(5):
            await asyncio.sleep(0)
        active[0] -= 1
        return 1

    return node, peaks


def test_max_concurrency_bounds_running_nodes() -> None:
    node, peaks = concurrency_probe()
    g = Graph("wide")
    for i in range(10):
        g.node(f"n{i}", node)
    run(Runtime().run(g, max_concurrency=3))
    assert max(peaks) == 3 and len(peaks) == 10
    node, peaks = concurrency_probe()
    g2 = Graph("wide")
    for i in range(10):
        g2.node(f"n{i}", node)
    run(Runtime(max_concurrency=2).run(g2))
    assert max(peaks) == 2
    with pytest.raises(ValueError, match="max_concurrency"):
        run(Runtime().run(g2, max_concurrency=0))


def test_failure_without_checkpoint_drains_running_nodes_and_starts_no_more() -> None:
    calls: Counter[str] = Counter()

    async def slow(ctx: NodeContext) -> str:
        for _ in range(20):
            await asyncio.sleep(0)
        calls["slow:end"] += 1
        return "done"

    def bad(ctx: NodeContext) -> None:
        raise Boom("bad node")

    g = Graph("g").node("slow", slow).node("bad", bad)
    g.node("later", recording(calls), deps=["slow"])
    with pytest.raises(Boom, match="bad node") as info:
        run(Runtime().run(g))
    assert calls == Counter({"slow:end": 1})
    assert any("node 'bad' of graph 'g'" in note for note in getattr(info.value, "__notes__", []))


# --- checkpointed waves -----------------------------------------------------------------------


def test_checkpoint_waves_save_before_each_wave_and_at_the_end() -> None:
    calls: Counter[str] = Counter()
    log: list[str] = []

    async def save(checkpoint: GraphCheckpoint) -> None:
        log.append(f"save:start:{checkpoint['admitted']}")
        await asyncio.sleep(0)
        saved.append(json.loads(json.dumps(checkpoint)))
        log.append("save:end")

    saved: list[GraphCheckpoint] = []
    g = diamond(calls, log=log)
    result = run(Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", save)))
    assert [c["admitted"] for c in saved] == [["load"], ["left", "right"], ["join"], []]
    assert [c["status"] for c in saved] == ["running", "running", "running", "completed"]
    assert [c["seq"] for c in saved] == [0, 1, 2, 3]
    assert [sorted(c["completed"]) for c in saved] == [
        [],
        ["load"],
        ["left", "load", "right"],
        ["join", "left", "load", "right"],
    ]
    assert saved[-1]["completed"] == {name: result[name] for name in g}
    assert log == [
        "save:start:['load']",
        "save:end",
        "run:load",
        "save:start:['left', 'right']",
        "save:end",
        "run:left",
        "run:right",
        "save:start:['join']",
        "save:end",
        "run:join",
        "save:start:[]",
        "save:end",
    ]
    first = saved[0]
    assert first["graph"] == "diamond" and first["version"] == "v1"
    assert first["graph_hash"] == g.shape_hash() and first["input_hash"].startswith("sha256")
    assert all(c["run_id"] == result.run_id for c in saved)


def test_checkpoint_mode_bounds_wave_size() -> None:
    node, peaks = concurrency_probe()
    g = Graph("wide")
    for i in range(7):
        g.node(f"n{i}", node)
    saves = Saves()
    run(Runtime().run(g, checkpoint=GraphCheckpointOptions("v1", saves), max_concurrency=3))
    assert [len(c["admitted"]) for c in saves.items] == [3, 3, 1, 0]
    assert max(peaks) == 3


def test_failure_drains_the_wave_saves_uncertain_and_reraises() -> None:
    calls: Counter[str] = Counter()
    g = Graph("g")
    g.node("load", recording(calls))

    async def slow(ctx: NodeContext) -> dict[str, str]:
        for _ in range(20):
            await asyncio.sleep(0)
        calls[ctx.node] += 1
        return {"slow": "ok"}

    declined = [True]

    async def charge(ctx: NodeContext) -> dict[str, str]:
        calls[ctx.node] += 1
        if declined[0]:
            raise Boom("card declined")
        return {"charged": ctx.idempotency_key}

    g.node("slow", slow, deps=["load"])
    g.node("charge", charge, deps=["load"])
    g.node("report", recording(calls), deps=["slow", "charge"])
    saves = Saves()
    with pytest.raises(Boom, match="card declined"):
        run(Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves)))
    failed = saves.last
    assert failed["status"] == "failed"
    assert failed["uncertain"] == ["charge"] and failed["admitted"] == []
    assert sorted(failed["completed"]) == ["load", "slow"]  # the slow sibling was drained
    assert failed["errors"] == {"charge": "Boom: card declined"}
    assert calls == Counter({"load": 1, "slow": 1, "charge": 1})

    # Automatic resume refuses the uncertain node, naming it, and runs nothing.
    with pytest.raises(UncertainCheckpointError, match="'charge'") as info:
        run(
            Runtime().run(
                g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves, resume=failed)
            )
        )
    assert info.value.nodes == ("charge",)
    assert len(saves.items) == 3 and calls["load"] == 1

    # Once the effect is resolved the caller accepts it; the node runs again, nothing else.
    calls_before = Counter(calls)
    declined[0] = False
    options = GraphCheckpointOptions("v1", saves, resume=failed, accept_uncertain=["charge"])
    result = run(Runtime().run(g, {"n": 1}, checkpoint=options))
    assert [c["seq"] for c in saves.items] == [0, 1, 2, 3, 4, 5]
    assert result.restored == ("load", "slow")
    assert result.executed == ("charge", "report")
    assert calls - calls_before == Counter({"charge": 1, "report": 1})
    assert result["charge"] == {"charged": f"g/{failed['run_id']}/charge"}


def test_uncertain_accepted_with_a_known_output_is_not_run_again() -> None:
    calls: Counter[str] = Counter()
    saves = Saves()
    g = diamond(calls, fail={"left"})
    with pytest.raises(Boom):
        run(Runtime().run(g, {"n": 2}, checkpoint=GraphCheckpointOptions("v1", saves)))
    failed = saves.last
    assert uncertain_nodes(failed) == ["left"]
    snapshot = json.dumps(failed, sort_keys=True)
    cleaned = accept_uncertain(failed, ["left"], outputs={"left": {"total": 100}})
    assert json.dumps(failed, sort_keys=True) == snapshot  # the argument is unchanged
    assert cleaned["uncertain"] == [] and cleaned["status"] == "running"
    with pytest.raises(GraphCheckpointError, match="'join' is not uncertain"):
        accept_uncertain(failed, ["join"])
    with pytest.raises(GraphCheckpointError, match="not uncertain"):
        run(
            Runtime().run(
                g,
                {"n": 2},
                checkpoint=GraphCheckpointOptions(
                    "v1", saves, resume=failed, accept_uncertain=["left", "join"]
                ),
            )
        )
    with pytest.raises(StateValidationError):
        accept_uncertain(failed, ["left"], outputs={"left": {1, 2}})
    before = Counter(calls)
    g2 = diamond(calls)
    result = run(
        Runtime().run(g2, {"n": 2}, checkpoint=GraphCheckpointOptions("v1", saves, cleaned))
    )
    assert calls - before == Counter({"join": 1})
    assert result["left"] == {"total": 100}
    assert result.restored == ("load", "left", "right")


def test_resume_refuses_other_graph_input_or_version_and_changes_nothing() -> None:
    calls: Counter[str] = Counter()
    saves = Saves()
    g = diamond(calls)
    run(Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves)))
    done = saves.last
    count = len(saves.items)
    calls.clear()
    other = Graph("diamond").node("load", recording(calls))
    cases: list[tuple[Graph, Any, str, str]] = [
        (other, {"n": 1}, "v1", "different graph"),
        (g, {"n": 2}, "v1", "different input"),
        (g, {"n": 1}, "v2", "version 'v1'"),
    ]
    for graph, value, version, message in cases:
        options = GraphCheckpointOptions(version, saves, resume=done)
        with pytest.raises(CheckpointMismatchError, match=message):
            run(Runtime().run(graph, value, checkpoint=options))
    assert len(saves.items) == count and not calls


def test_an_earlier_checkpoint_of_a_finished_run_is_refused() -> None:
    """Retrying an old checkpoint against already-mutated resources is refused by default."""
    calls: Counter[str] = Counter()
    saves = Saves()
    g = diamond(calls)
    run(Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves)))
    calls.clear()
    for old, names in ((saves.items[1], ("left", "right")), (saves.items[2], ("join",))):
        with pytest.raises(UncertainCheckpointError) as info:
            run(Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves, old)))
        assert info.value.nodes == names
    assert not calls and len(saves.items) == 4


def test_resume_of_a_completed_checkpoint_runs_and_saves_nothing() -> None:
    calls: Counter[str] = Counter()
    saves = Saves()
    g = diamond(calls)
    first = run(Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves)))
    count = len(saves.items)
    calls.clear()
    again = run(
        Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves, saves.last))
    )
    assert dict(again) == dict(first) and again.run_id == first.run_id
    assert again.restored == tuple(g) and again.executed == ()
    assert not calls and len(saves.items) == count


def test_malformed_checkpoints_are_refused() -> None:
    calls: Counter[str] = Counter()
    saves = Saves()
    g = diamond(calls)
    run(Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves)))
    good = saves.items[2]

    def broken(**changes: Any) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(json.dumps(good))
        doc.update(changes)
        return doc

    bad: list[tuple[dict[str, Any], str]] = [
        (broken(format="other"), "not a graph checkpoint"),
        (broken(status="weird"), "unknown status"),
        (broken(completed=[]), "'completed'"),
        (broken(completed={**good["completed"], "ghost": 1}), "unknown node 'ghost'"),
        (broken(completed={"join": {"total": 1}}), "not its deps"),
        (broken(tokens={"load": -1}), "bad token count"),
        (broken(uncertain=["load"]), "completed and uncertain"),
        (broken(run_id=None), "'run_id'"),
        (broken(seq=-3), "'seq'"),
        (broken(seq=True), "'seq'"),
    ]
    for doc, message in bad:
        with pytest.raises(InvalidCheckpointError, match=message):
            run(Runtime().run(g, {"n": 1}, checkpoint=GraphCheckpointOptions("v1", saves, doc)))


def test_outputs_and_input_must_be_json_state_when_checkpointing() -> None:
    saves = Saves()
    g = Graph("g").node("a", lambda ctx: {"when": {1, 2}})
    with pytest.raises(StateValidationError, match=r"completed\.a"):
        run(Runtime().run(g, None, checkpoint=GraphCheckpointOptions("v1", saves)))
    assert saves.last["status"] == "failed" and saves.last["uncertain"] == ["a"]
    saves = Saves()
    with pytest.raises(StateValidationError, match="input"):
        run(Runtime().run(g, (1, 2), checkpoint=GraphCheckpointOptions("v1", saves)))
    assert saves.items == []
    # Without a checkpoint any value may flow between nodes.
    assert run(Runtime().run(g, (1, 2)))["a"] == {"when": {1, 2}}


def test_outputs_are_recorded_as_copies() -> None:
    saves = Saves()
    kept: list[dict[str, Any]] = []

    def make(ctx: NodeContext) -> dict[str, Any]:
        out: dict[str, Any] = {"items": [1]}
        kept.append(out)
        return out

    async def save(checkpoint: GraphCheckpoint) -> None:
        saves.items.append(checkpoint)  # kept by reference, no round trip

    def mutate(ctx: NodeContext) -> int:
        ctx.deps["make"]["items"].append(2)
        return 0

    g = Graph("g").node("make", make).node("mutate", mutate, deps=["make"])
    run(Runtime().run(g, None, checkpoint=GraphCheckpointOptions("v1", save)))
    assert kept[0] == {"items": [1, 2]}
    assert saves.last["completed"]["make"] == {"items": [1]}


def test_idempotent_nodes_rerun_automatically_after_a_stop_mid_wave() -> None:
    calls: Counter[str] = Counter()
    saves = Saves()
    keys: list[str] = []

    def fetch(ctx: NodeContext) -> int:
        calls[ctx.node] += 1
        keys.append(ctx.idempotency_key)
        return 1

    def build(idempotent: bool) -> Graph:
        g = Graph("g").node("load", recording(calls))
        return g.node("fetch", fetch, deps=["load"], idempotent=idempotent)

    run(Runtime().run(build(True), None, checkpoint=GraphCheckpointOptions("v1", saves)))
    stopped = saves.items[1]  # saved just before the wave of "fetch" was admitted
    assert stopped["admitted"] == ["fetch"] and uncertain_nodes(stopped) == ["fetch"]
    result = run(
        Runtime().run(build(True), None, checkpoint=GraphCheckpointOptions("v1", saves, stopped))
    )
    assert result.executed == ("fetch",) and calls == Counter({"load": 1, "fetch": 2})
    assert keys[0] == keys[1]  # same run, same node: same idempotency key
    with pytest.raises(CheckpointMismatchError):  # idempotency is part of the graph hash
        run(
            Runtime().run(
                build(False), None, checkpoint=GraphCheckpointOptions("v1", saves, stopped)
            )
        )


def test_cancelling_the_run_cancels_running_nodes_and_leaves_them_uncertain() -> None:
    saves = Saves()
    finished: list[str] = []
    gates: list[asyncio.Event] = []

    async def hang(ctx: NodeContext) -> None:
        gates[0].set()
        try:
            await asyncio.Event().wait()
        finally:
            finished.append(ctx.node)

    g = Graph("g").node("load", lambda ctx: 1).node("hang", hang, deps=["load"])

    async def main() -> None:
        gates.append(asyncio.Event())
        gate = gates[0]
        task = asyncio.ensure_future(
            Runtime().run(g, None, checkpoint=GraphCheckpointOptions("v1", saves))
        )
        await gate.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert finished == ["hang"]
    assert uncertain_nodes(saves.last) == ["hang"]
    with pytest.raises(UncertainCheckpointError, match="'hang'"):
        run(Runtime().run(g, None, checkpoint=GraphCheckpointOptions("v1", saves, saves.last)))


def test_a_failing_save_stops_the_run_before_the_next_wave() -> None:
    calls: Counter[str] = Counter()
    count = [0]

    def save(checkpoint: GraphCheckpoint) -> None:  # a sync save is accepted too
        count[0] += 1
        if count[0] == 2:
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        run(Runtime().run(diamond(calls), {"n": 1}, checkpoint=GraphCheckpointOptions("v", save)))
    assert calls == Counter({"load": 1})


def test_restored_nodes_report_their_token_cost_as_replayed() -> None:
    saves = Saves()

    def costly(ctx: NodeContext) -> int:
        ctx.record_tokens(120)
        ctx.record_tokens(30)
        return 1

    def fails(ctx: NodeContext) -> int:
        raise Boom("later")

    g = Graph("g").node("think", costly).node("act", fails, deps=["think"])
    with pytest.raises(Boom):
        run(Runtime().run(g, None, checkpoint=GraphCheckpointOptions("v1", saves)))
    assert saves.last["tokens"] == {"think": 150}
    budget = TokenBudget(1000)
    options = GraphCheckpointOptions("v1", saves, saves.last, accept_uncertain=["act"])
    with pytest.raises(Boom):
        run(Runtime().run(g, None, checkpoint=options, budget=budget))
    assert budget.replayed == 150 and budget.charged == 0 and budget.remaining == 1000
    scopes = [dict(record.scope) for record in budget.records]
    assert scopes == [{"graph": "g", "run_id": saves.last["run_id"], "node": "think"}]
    with pytest.raises(ValueError, match="record_tokens"):
        NodeContext("n", None, {}, "g", "r", "k").record_tokens(-1)


# --- property: random DAGs -------------------------------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[list[int]], int | None, int]:
    size = draw(st.integers(min_value=1, max_value=9))
    deps = [
        sorted(draw(st.sets(st.integers(min_value=0, max_value=i - 1), max_size=3))) if i else []
        for i in range(size)
    ]
    limit = draw(st.one_of(st.none(), st.integers(min_value=1, max_value=4)))
    fail_at = draw(st.integers(min_value=0, max_value=size - 1))
    return deps, limit, fail_at


@settings(max_examples=60, deadline=None)
@given(dags())
def test_random_dags_agree_and_resume_runs_each_completed_node_once(
    case: tuple[list[list[int]], int | None, int],
) -> None:
    deps, limit, fail_at = case
    calls: Counter[str] = Counter()
    failing = {f"n{fail_at}"}

    async def node(ctx: NodeContext) -> int:
        calls[ctx.node] += 1
        await asyncio.sleep(0)
        if ctx.node in failing:
            raise Boom(ctx.node)
        return 1 + sum(int(v) for v in ctx.deps.values())

    g = Graph("random")
    for i, ds in enumerate(deps):
        g.node(f"n{i}", node, deps=[f"n{d}" for d in ds])
    failing.clear()
    plain = run(Runtime().run(g, None, max_concurrency=limit))
    saves = Saves()
    waves = run(
        Runtime().run(g, None, max_concurrency=limit, checkpoint=GraphCheckpointOptions("v", saves))
    )
    assert dict(plain) == dict(waves)
    assert calls == Counter({name: 2 for name in g})

    calls.clear()
    failing.add(f"n{fail_at}")
    saves = Saves()
    with pytest.raises(Boom):
        run(
            Runtime().run(
                g, None, max_concurrency=limit, checkpoint=GraphCheckpointOptions("v", saves)
            )
        )
    failed = saves.last
    assert failed["uncertain"] == [f"n{fail_at}"]
    failing.clear()
    options = GraphCheckpointOptions("v", saves, failed, accept_uncertain=[f"n{fail_at}"])
    resumed = run(Runtime().run(g, None, max_concurrency=limit, checkpoint=options))
    assert dict(resumed) == dict(plain)
    for name in g:
        expected = 2 if name == f"n{fail_at}" else 1
        assert calls[name] == expected, (name, calls)
    assert set(resumed.restored) == set(failed["completed"])


# --- a process killed mid-graph ---------------------------------------------------------------


CRASH_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, sqlite3, sys
    from ditto_jupyter.worker.graph import (
        Graph, GraphCheckpointOptions, UncertainCheckpointError, accept_uncertain,
    )
    from ditto_jupyter.worker.runtime import Runtime

    work = sys.argv[1]
    mode = sys.argv[2]
    db = sqlite3.connect(os.path.join(work, "checkpoints.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS checkpoints (seq INTEGER PRIMARY KEY, body TEXT)")

    def log(line):
        with open(os.path.join(work, "calls.log"), "a") as handle:
            handle.write(line + "\\n")
            handle.flush()
            os.fsync(handle.fileno())

    async def save(checkpoint):
        db.execute("INSERT INTO checkpoints (body) VALUES (?)", (json.dumps(checkpoint),))

    def latest():
        row = db.execute("SELECT body FROM checkpoints ORDER BY seq DESC LIMIT 1").fetchone()
        return json.loads(row[0])

    def load(ctx):
        log(f"load {ctx.idempotency_key}")
        return {"rows": ctx.input["rows"]}

    def enrich(ctx):
        log(f"enrich {ctx.idempotency_key}")
        return {"rows": ctx.deps["load"]["rows"] + 1}

    def audit(ctx):
        log(f"audit {ctx.idempotency_key}")
        return {"audited": True}

    async def charge(ctx):
        log(f"charge {ctx.idempotency_key}")
        with open(os.path.join(work, "effects.log"), "a") as handle:
            handle.write(ctx.idempotency_key + "\\n")
        if mode == "crash":
            print("CHARGED", flush=True)
            await asyncio.Event().wait()
        return {"charged": ctx.idempotency_key}

    def report(ctx):
        log(f"report {ctx.idempotency_key}")
        return {k: v for k, v in sorted(ctx.deps.items())}

    g = Graph("billing")
    g.node("load", load)
    g.node("enrich", enrich, deps=["load"], idempotent=True)
    g.node("audit", audit, deps=["load"])
    g.node("charge", charge, deps=["load"])
    g.node("report", report, deps=["enrich", "audit", "charge"])

    async def main():
        resume = None if mode == "crash" else latest()
        accept = []
        if mode == "accept":
            # The operator checked the payment provider: the charge went through once.
            with open(os.path.join(work, "effects.log")) as handle:
                key = handle.read().split()[0]
            resume = accept_uncertain(
                resume, ["charge", "audit"], outputs={"charge": {"charged": key}}
            )
        options = GraphCheckpointOptions("billing-v1", save, resume=resume)
        try:
            result = await Runtime().run(g, {"rows": 41}, checkpoint=options)
        except UncertainCheckpointError as error:
            print(json.dumps({"refused": list(error.nodes)}), flush=True)
            return
        print(json.dumps({"result": dict(result), "restored": list(result.restored),
                          "executed": list(result.executed)}), flush=True)

    asyncio.run(main())
    """
)


def test_process_killed_mid_graph_restores_completed_and_refuses_uncertain(
    tmp_path: Path,
) -> None:
    script = tmp_path / "billing.py"
    script.write_text(CRASH_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    work = str(tmp_path)

    proc = subprocess.Popen(
        [sys.executable, str(script), work, "crash"], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "CHARGED"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    db = sqlite3.connect(tmp_path / "checkpoints.sqlite")
    saved = [json.loads(b) for (b,) in db.execute("SELECT body FROM checkpoints ORDER BY seq")]
    db.close()
    assert [c["admitted"] for c in saved] == [["load"], ["enrich", "audit", "charge"]]
    assert sorted(saved[-1]["completed"]) == ["load"]

    def calls() -> Counter[str]:
        lines = (tmp_path / "calls.log").read_text().split("\n")
        return Counter(line.split()[0] for line in lines if line)

    assert calls() == Counter({"load": 1, "enrich": 1, "audit": 1, "charge": 1})

    def again(mode: str) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, str(script), work, mode],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))

    # Automatic resume: "enrich" is idempotent, "audit" and "charge" may have had effects.
    assert again("resume") == {"refused": ["audit", "charge"]}
    assert calls() == Counter({"load": 1, "enrich": 1, "audit": 1, "charge": 1})

    accepted = again("accept")
    assert accepted["restored"] == ["load", "charge"]
    assert accepted["executed"] == ["enrich", "audit", "report"]
    assert accepted["result"]["enrich"] == {"rows": 42}
    assert calls() == Counter({"load": 1, "enrich": 2, "audit": 2, "charge": 1, "report": 1})
    effects = (tmp_path / "effects.log").read_text().split()
    assert len(effects) == 1 and accepted["result"]["charge"] == {"charged": effects[0]}
    keys = [line.split()[1] for line in (tmp_path / "calls.log").read_text().splitlines()]
    enrich_keys = [k for k in keys if k.endswith("/enrich")]
    assert len(set(enrich_keys)) == 1  # the re-run saw the same idempotency key

    # Resuming the completed run from the database runs nothing more.
    final = again("resume")
    assert final["executed"] == [] and calls()["report"] == 1

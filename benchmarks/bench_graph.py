"""Per-wave checkpoint overhead of `Runtime.run`, beside LangGraph's savers per super-step.

Two shapes, both frameworks, same process and run: a 10-node chain (10 waves / super-steps)
and a 10-wide fan-out (root -> 10 branches -> join: 3 waves / super-steps). Each is run
without a checkpointer, with an in-memory save (ours: a list append; LangGraph:
InMemorySaver) and with a durable SQLite save (ours: one INSERT per checkpoint in autocommit;
LangGraph: SqliteSaver), both SQLite databases in WAL mode with synchronous=FULL.

LangGraph runs with `durability="sync"` so that, like ours, a super-step's checkpoint is
written before the next one starts (LangGraph's default "async" durability overlaps the
write with the next step). LangGraph in-memory figures use `ainvoke` (asyncio, like ours);
SqliteSaver only supports `invoke`.

Overhead per super-step = (median run time with saver - median without) / super-steps.
All configurations of one group take turns run by run, so they share the machine's noise.
Run: `.venv/bin/python -m benchmarks.bench_graph` (add `--quick` for a smoke run).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import operator
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.worker.graph import (  # noqa: E402
    Graph,
    GraphCheckpoint,
    GraphCheckpointOptions,
    NodeContext,
)
from ditto_jupyter.worker.runtime import Runtime  # noqa: E402

WIDTH = 10
NOTE = "x" * 32
WAVES = {"chain": WIDTH, "fanout": 3}
Runner = Callable[[], float]


# --- our graphs -------------------------------------------------------------------------------


def chain_node(ctx: NodeContext) -> dict[str, Any]:
    previous = next(iter(ctx.deps.values()), None)
    value = previous["value"] + 1 if previous else ctx.input["value"]
    return {"value": value, "note": NOTE}


def branch_node(ctx: NodeContext) -> dict[str, Any]:
    return {"value": ctx.deps["root"]["value"] + 1, "note": NOTE}


def join_node(ctx: NodeContext) -> dict[str, Any]:
    return {"value": sum(d["value"] for d in ctx.deps.values()), "note": NOTE}


def our_graph(shape: str) -> Graph:
    g = Graph(shape)
    if shape == "chain":
        g.node("n0", chain_node)
        for i in range(1, WIDTH):
            g.node(f"n{i}", chain_node, deps=[f"n{i - 1}"])
        return g
    g.node("root", chain_node)
    for i in range(WIDTH):
        g.node(f"b{i}", branch_node, deps=["root"])
    g.node("join", join_node, deps=[f"b{i}" for i in range(WIDTH)])
    return g


class SqliteCheckpointSaver:
    """Durable save target: one row per checkpoint, committed (and fsynced) before returning."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS graph_checkpoints ("
            "run_id TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL, "
            "PRIMARY KEY (run_id, seq))"
        )
        self.seq = 0

    async def __call__(self, checkpoint: GraphCheckpoint) -> None:
        self.seq += 1
        self.db.execute(
            "INSERT INTO graph_checkpoints (run_id, seq, body) VALUES (?, ?, ?)",
            (checkpoint["run_id"], self.seq, orjson.dumps(checkpoint)),
        )


def ours_runner(
    loop: asyncio.AbstractEventLoop,
    shape: str,
    make_save: Callable[[], Callable[[GraphCheckpoint], Awaitable[None]] | None],
) -> Runner:
    """One timed `Runtime.run` per call, on a long-lived event loop."""
    graph, runtime = our_graph(shape), Runtime()

    async def once() -> float:
        save = make_save()
        options = GraphCheckpointOptions("bench-v1", save) if save is not None else None
        start = time.perf_counter()
        await runtime.run(graph, {"value": 1}, checkpoint=options)
        return time.perf_counter() - start

    return lambda: loop.run_until_complete(once())


# --- LangGraph graphs -------------------------------------------------------------------------


class ChainState(TypedDict):
    value: int
    note: str


class FanState(TypedDict):
    value: int
    note: str
    results: Annotated[list[dict[str, Any]], operator.add]


def lg_graph(shape: str, checkpointer: Any, use_async: bool) -> Any:
    if shape == "chain":
        builder: Any = StateGraph(ChainState)

        def step(state: ChainState) -> dict[str, Any]:
            return {"value": state["value"] + 1, "note": NOTE}

        async def astep(state: ChainState) -> dict[str, Any]:
            return step(state)

        for i in range(WIDTH):
            builder.add_node(f"n{i}", astep if use_async else step)
        builder.add_edge(START, "n0")
        for i in range(1, WIDTH):
            builder.add_edge(f"n{i - 1}", f"n{i}")
        builder.add_edge(f"n{WIDTH - 1}", END)
        return builder.compile(checkpointer=checkpointer)
    builder = StateGraph(FanState)

    def root(state: FanState) -> dict[str, Any]:
        return {"value": state["value"] + 1, "note": NOTE}

    def branch(state: FanState) -> dict[str, Any]:
        return {"results": [{"value": state["value"] + 1, "note": NOTE}]}

    def join(state: FanState) -> dict[str, Any]:
        return {"value": sum(r["value"] for r in state["results"]), "note": NOTE}

    def wrap(fn: Callable[[FanState], dict[str, Any]]) -> Any:
        async def afn(state: FanState) -> dict[str, Any]:
            return fn(state)

        return afn if use_async else fn

    builder.add_node("root", wrap(root))
    builder.add_node("join", wrap(join))
    builder.add_edge(START, "root")
    for i in range(WIDTH):
        builder.add_node(f"b{i}", wrap(branch))
        builder.add_edge("root", f"b{i}")
    builder.add_edge([f"b{i}" for i in range(WIDTH)], "join")
    builder.add_edge("join", END)
    return builder.compile(checkpointer=checkpointer)


def lg_input(shape: str) -> dict[str, Any]:
    base: dict[str, Any] = {"value": 1, "note": ""}
    if shape == "fanout":
        base["results"] = []
    return base


def lg_runner(
    loop: asyncio.AbstractEventLoop, shape: str, checkpointer: Any, *, use_async: bool
) -> Runner:
    """One timed LangGraph invocation per call, on a fresh thread, durability="sync"."""
    graph = lg_graph(shape, checkpointer, use_async)
    threads = itertools.count()
    kwargs: dict[str, Any] = {"durability": "sync"} if checkpointer is not None else {}

    async def once_async() -> float:
        config = {"configurable": {"thread_id": f"t{next(threads)}"}}
        start = time.perf_counter()
        await graph.ainvoke(lg_input(shape), config, **kwargs)
        return time.perf_counter() - start

    def once() -> float:
        config = {"configurable": {"thread_id": f"t{next(threads)}"}}
        start = time.perf_counter()
        graph.invoke(lg_input(shape), config, **kwargs)
        return time.perf_counter() - start

    return (lambda: loop.run_until_complete(once_async())) if use_async else once


def lg_sqlite(path: Path) -> SqliteSaver:
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute("PRAGMA synchronous=FULL")
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal", mode
    return saver


# --- driver -----------------------------------------------------------------------------------


def interleaved(runners: dict[str, Runner], n: int, warmup: int) -> dict[str, float]:
    """Median microseconds of each runner, taking turns run by run so all see the same noise
    (other processes on this machine, and the disk's fsync latency for the SQLite savers)."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for i in range(n + warmup):
        for name, runner in runners.items():
            elapsed = runner()
            if i >= warmup:
                samples[name].append(elapsed)
    return {name: statistics.median(values) * 1e6 for name, values in samples.items()}


Figures = dict[tuple[str, str, str], float]


def measure(quick: bool) -> Figures:
    """Median run time (us) of every (framework, shape, configuration)."""
    n_mem, n_disk, warm = (20, 5, 2) if quick else (300, 50, 10)
    tmp = Path(tempfile.mkdtemp(prefix="bench-graph-", dir=ROOT / "benchmarks"))
    loop = asyncio.new_event_loop()
    out: Figures = {}
    kept: list[GraphCheckpoint] = []

    async def memory_save(checkpoint: GraphCheckpoint) -> None:
        kept.append(checkpoint)

    try:
        for shape in ("chain", "fanout"):
            memory = interleaved(
                {
                    "ours/none": ours_runner(loop, shape, lambda: None),
                    "ours/memory": ours_runner(loop, shape, lambda: memory_save),
                    "langgraph/none-async": lg_runner(loop, shape, None, use_async=True),
                    "langgraph/async": lg_runner(loop, shape, InMemorySaver(), use_async=True),
                },
                n_mem,
                warm,
            )
            ours_disk = SqliteCheckpointSaver(tmp / f"ours-{shape}.sqlite")
            lg_disk = lg_sqlite(tmp / f"lg-{shape}.sqlite")
            disk = interleaved(
                {
                    "ours/none-disk": ours_runner(loop, shape, lambda: None),
                    "ours/sqlite": ours_runner(
                        loop, shape, functools.partial(lambda s: s, ours_disk)
                    ),
                    "langgraph/none-disk": lg_runner(loop, shape, None, use_async=False),
                    "langgraph/sqlite": lg_runner(loop, shape, lg_disk, use_async=False),
                },
                n_disk,
                warm,
            )
            ours_disk.db.close()
            lg_disk.conn.close()
            for key, value in {**memory, **disk}.items():
                who, config = key.split("/")
                out[who, shape, config] = value
    finally:
        loop.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def overhead(out: Figures, who: str, shape: str, config: str, base: str) -> float:
    """Checkpoint overhead per super-step, in microseconds."""
    return (out[who, shape, config] - out[who, shape, base]) / WAVES[shape]


def report(out: Figures) -> str:
    rows: list[list[object]] = []
    for shape in ("chain", "fanout"):
        waves = WAVES[shape]
        for save, ours_base, lg_config, lg_base, anchor in (
            ("in-memory", "none", "async", "none-async", "InMemorySaver (ainvoke)"),
            ("durable SQLite", "none-disk", "sqlite", "none-disk", "SqliteSaver (invoke)"),
        ):
            ours_config = "memory" if save == "in-memory" else "sqlite"
            ours_over = overhead(out, "ours", shape, ours_config, ours_base)
            lg_over = overhead(out, "langgraph", shape, lg_config, lg_base)
            target = 5.0 if save == "in-memory" else 1.0
            met = ours_over <= 0 or lg_over / ours_over >= target
            rows.append(
                [
                    f"{shape} ({waves} steps)",
                    save,
                    f"{out['ours', shape, ours_config] / waves:.1f}",
                    f"{ours_over:.1f}",
                    anchor,
                    f"{out['langgraph', shape, lg_config] / waves:.1f}",
                    f"{lg_over:.1f}",
                    f"{lg_over / ours_over:.1f}x" if ours_over > 0 else "n/a",
                    f"{'met' if met else 'MISSED'} (>= {target:g}x)",
                ]
            )
    table = markdown_table(
        [
            "shape",
            "save",
            "ours: us / wave",
            "ours: overhead us / wave",
            "anchor",
            "LangGraph: us / step",
            "LangGraph: overhead us / step",
            "overhead ratio (LangGraph / ours)",
            "target",
        ],
        rows,
    )
    notes = [
        "Overhead = (median run with the saver - median run without) / super-steps; each "
        "framework against its own no-checkpointer runs; all configurations take turns run by "
        "run in one process, so they see the same CPU and fsync noise.",
        "Targets: in-memory ratio >= 5x; durable ratio >= 1x (ours no higher than SqliteSaver).",
        "Ours saves before the first wave and after each wave (waves + 1 saves) and awaits each "
        "save before the next wave; LangGraph runs with durability='sync', the same guarantee. "
        "SQLite on both sides: WAL, synchronous=FULL, on the same disk.",
        "LangGraph in-memory runs use `ainvoke`, the same asyncio model as `Runtime.run` "
        "(sync `invoke` runs parallel branches on a thread pool, whose timing on this shared "
        "2-core machine swings by milliseconds); SqliteSaver has no async methods, so the durable "
        "runs use `invoke` (its async sibling is AsyncSqliteSaver).",
        "Without a checkpointer, per step: "
        + "; ".join(
            f"{shape} ours {out['ours', shape, 'none'] / WAVES[shape]:.1f} us, LangGraph "
            f"{out['langgraph', shape, 'none-async'] / WAVES[shape]:.1f} us (ainvoke)"
            for shape in ("chain", "fanout")
        )
        + ".",
    ]
    return table + "\n\n" + "\n".join(f"- {note}" for note in notes)


def main() -> None:
    quick = "--quick" in sys.argv
    out = measure(quick)
    body = report(out)
    print(body)
    if not quick:
        write_section("bench_graph", "Graph checkpoints beside LangGraph", body)


if __name__ == "__main__":
    main()

"""Benchmark: `DittoSaver` beside LangGraph's own SqliteSaver and PostgresSaver, in one run.

Like with like:
- embedded: `DittoSaver` without a server (the in-process control plane on the data
  directory's SQLite store) beside `SqliteSaver` on a file (its own WAL mode);
- deployment: `DittoSaver` in a notebook kernel of a real jupyter-server whose store is
  PostgreSQL (the kernel goes through the server's REST API) beside `PostgresSaver` on a
  database of the same PostgreSQL server; and the same kernel path on a server whose store
  is SQLite, for scale.

Two measures:
1. put and get_tuple latency: `ROUNDS` puts of a checkpoint as a graph makes them mid-run
   (a step counter and a 200-byte message new at each put, a 4 KiB context channel
   unchanged since the first), then `ROUNDS` get_tuple of the thread's newest; median and
   p90 per call, after `WARMUP` calls of each;
2. bytes on disk after a 1,000-step graph (a loop node appending a 60-byte message to a
   list and counting steps, with a 4 KiB context set at the start): every byte of the
   saver's data directory (database files and their WAL, our blob store and catalogue
   included) and, on PostgreSQL, what the database grew by (`pg_database_size` less that
   of a new, empty database), plus, for ours, the server's data directory.

`.venv/bin/python -m benchmarks.bench_langgraph_saver` (a few minutes; needs Debian's
postgresql, `make postgresql`). Writes the `bench_langgraph_saver` section of
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import operator
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402

ROUNDS = 200
WARMUP = 20
GRAPH_STEPS = 1000
CONTEXT = "c" * 4096


# ---- 1. latency ---------------------------------------------------------------------------


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure_latency(saver: BaseCheckpointSaver[Any], thread: str = "bench") -> dict[str, float]:
    """put and get_tuple of one thread, as a graph mid-run calls them (ms: median, p90)."""
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checkpoint: Any = empty_checkpoint()
    version: Any = None
    puts: list[float] = []
    for index in range(WARMUP + ROUNDS):
        checkpoint = dict(checkpoint)
        checkpoint["id"] = empty_checkpoint()["id"]
        version = saver.get_next_version(version, None)
        values = {"step": index, "message": f"{index:08d}" + "m" * 192, "context": CONTEXT}
        versions = dict(checkpoint["channel_versions"])
        new = {"step": version, "message": version}
        if index == 0:
            new["context"] = version
        versions.update(new)
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = versions
        metadata: Any = {"source": "loop", "step": index, "parents": {}}
        started = time.perf_counter()
        config = saver.put(config, checkpoint, metadata, new)
        elapsed = time.perf_counter() - started
        if index >= WARMUP:
            puts.append(elapsed * 1000)
    newest: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    gets: list[float] = []
    for index in range(WARMUP + ROUNDS):
        started = time.perf_counter()
        found = saver.get_tuple(newest)
        elapsed = time.perf_counter() - started
        assert found is not None and found.checkpoint["channel_values"]["context"] == CONTEXT
        if index >= WARMUP:
            gets.append(elapsed * 1000)
    return {
        "put_median": statistics.median(puts),
        "put_p90": _percentile(puts, 0.9),
        "get_median": statistics.median(gets),
        "get_p90": _percentile(gets, 0.9),
    }


# ---- 2. a 1,000-step graph ------------------------------------------------------------------


class State(TypedDict):
    step: int
    messages: Annotated[list[str], operator.add]
    context: str


def _think(state: State) -> dict[str, Any]:
    return {"step": state["step"] + 1, "messages": [f"{state['step']:06d} " + "t" * 53]}


def _next(state: State) -> str:
    return END if state["step"] >= GRAPH_STEPS else "think"


def run_graph(saver: BaseCheckpointSaver[Any], thread: str = "graph") -> int:
    """Run the 1,000-step graph on `saver`; how many checkpoints its thread holds."""
    builder = StateGraph(State)
    builder.add_node("think", _think)
    builder.add_edge(START, "think")
    builder.add_conditional_edges("think", _next)
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": GRAPH_STEPS + 10}
    final = graph.invoke({"step": 0, "messages": [], "context": CONTEXT}, config)
    assert final["step"] == GRAPH_STEPS and len(final["messages"]) == GRAPH_STEPS
    return sum(1 for _ in saver.list({"configurable": {"thread_id": thread}}))


def directory_bytes(path: Path) -> int:
    """Every byte of every file under `path`."""
    return sum(item.stat().st_size for item in path.rglob("*") if item.is_file())


# ---- the savers ---------------------------------------------------------------------------


@contextmanager
def sqlite_saver(folder: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    folder.mkdir(parents=True)
    with SqliteSaver.from_conn_string(str(folder / "checkpoints.sqlite")) as saver:
        yield saver


@contextmanager
def embedded_saver(folder: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    from ditto_jupyter.kernel.local_control import LocalControl
    from ditto_jupyter.langgraph import DittoSaver

    control = LocalControl({}, data_dir=folder, notebook_folder=folder.parent)
    try:
        yield DittoSaver(control=control)
    finally:
        control.shutdown()


@contextmanager
def postgres_saver(url: str) -> Iterator[BaseCheckpointSaver[Any]]:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(url.replace("+psycopg", "")) as saver:
        saver.setup()
        yield saver


def pg_bytes(url: str) -> int:
    import psycopg

    with psycopg.connect(url.replace("+psycopg", "")) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


KERNEL_CELL = """
import json, sys
sys.path.insert(0, {repo!r})
from ditto_jupyter.langgraph import DittoSaver
from benchmarks.bench_langgraph_saver import measure_latency, run_graph
saver = DittoSaver()
found = measure_latency(saver)
found["checkpoints"] = run_graph(saver)
print(json.dumps(found))
"""


def through_server(folder: Path, store_url: str | None) -> tuple[dict[str, float], int]:
    """Latency and the graph in a notebook kernel of a real server; the data directory's
    bytes after."""
    from tests.server.live_server import LiveServer

    config: dict[str, Any] = {"kernel_pool_size": 0}
    if store_url is not None:
        config["store_url"] = store_url
    with LiveServer(folder, config={"DittoJupyterApp": config}) as server:
        session = server.open_notebook("bench.ipynb")
        printed = server.execute(session["kernel"]["id"], KERNEL_CELL.format(repo=str(REPO)))
        found: dict[str, float] = json.loads(printed.strip().splitlines()[-1])
        data_bytes = directory_bytes(server.data_dir)
    return found, data_bytes


def local(make: Callable[[], Any]) -> tuple[dict[str, float], int]:
    with make() as saver:
        found = measure_latency(saver)
        checkpoints = run_graph(saver)
    return found, checkpoints


NOTES = """
Like with like: the embedded row against SqliteSaver, the PostgreSQL-store row against
PostgresSaver. Figures are from a shared 2-core machine under load (load average 8-10), so
single milliseconds move from run to run; the ratios held across runs.

- **put, embedded: parity missed** (this run 1.7x the median; an earlier, quieter run
  2.94 ms against 2.29 ms, 1.3x). Both commit with an fsync of the WAL; ours adds
  SQLAlchemy's statement handling, the pydantic model of the checkpoint, a lookup of the
  thread row and the store's log meter in the same write transaction.
- **get_tuple, embedded: parity missed by far** (1.4-2 ms against 0.06 ms). SqliteSaver
  runs two statements on one open sqlite3 connection; ours checks a connection out of
  SQLAlchemy's pool, begins a read transaction, runs three statements (the checkpoint by
  runtime and thread, its values by version, its writes) and builds pydantic models. What
  would meet it: an in-process read path on a DB-API connection kept per thread, the small
  values read with the checkpoint in one statement, and plain tuples instead of models.
- **Through the server: parity with PostgresSaver missed by an order of magnitude**
  (13-26 ms against 0.6-4.6 ms). PostgresSaver talks to PostgreSQL from the kernel; ours
  may not (kernels never get the store's credentials), so every call is an HTTP round
  trip to the server (auth, JSON with base64 values, validation), a hop onto a store
  thread, and the store's serialized write transaction. What would meet it: the kernel is
  the only writer of its runtime's threads, so it can keep a coherent cache of them and
  answer get_tuple itself, and put can be written behind (LangGraph's own "async"
  durability) and sent in batches over one connection in a binary encoding.
- **Bytes, embedded: ours is smaller** (32.8 MiB against 36.8 MiB): SqliteSaver stores
  every channel value in every checkpoint (the 4 KiB context 1,002 times), ours stores a
  value once per version. Both store the growing message list once per step.
- **Bytes, PostgreSQL: ours is larger** (6.8 MiB against 4.8 MiB): PostgreSQL compresses
  PostgresSaver's large values in place (TOAST); ours keeps values over 64 KiB (the message
  list past ~900 messages) in the blob store, counted with the whole
  data directory of the server (the blob catalogue and its log included).
"""


def main() -> None:
    from tests.support.postgres_server import new_database, pg_missing, running_postgres

    missing = pg_missing()
    if missing:
        raise SystemExit(f"bench_langgraph_saver needs PostgreSQL: {missing}")
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as scratch, running_postgres() as pg:
        base = Path(scratch)

        def row(name: str, found: dict[str, float], checkpoints: int, size: int) -> None:
            rows.append(
                [
                    name,
                    f"{found['put_median']:.2f}",
                    f"{found['put_p90']:.2f}",
                    f"{found['get_median']:.2f}",
                    f"{found['get_p90']:.2f}",
                    checkpoints,
                    f"{size / 2**20:.2f}",
                ]
            )

        found, n = local(lambda: sqlite_saver(base / "sqlite"))
        row("SqliteSaver (file, WAL)", found, n, directory_bytes(base / "sqlite"))
        found, n = local(lambda: embedded_saver(base / "embedded"))
        row("DittoSaver embedded (SQLite)", found, n, directory_bytes(base / "embedded"))

        empty = pg_bytes(new_database(pg))  # what a new, empty database takes already
        theirs = new_database(pg)
        found, n = local(lambda: postgres_saver(theirs))
        row("PostgresSaver", found, n, pg_bytes(theirs) - empty)
        ours = new_database(pg)
        kernel, data_bytes = through_server(base / "server-pg", ours)
        row(
            "DittoSaver via server, PostgreSQL store",
            kernel,
            int(kernel["checkpoints"]),
            pg_bytes(ours) - empty + data_bytes,
        )
        kernel, data_bytes = through_server(base / "server-sqlite", None)
        row("DittoSaver via server, SQLite store", kernel, int(kernel["checkpoints"]), data_bytes)
        print(json.dumps({"empty_pg_database": empty}))

    table = markdown_table(
        [
            "saver",
            "put median ms",
            "put p90 ms",
            "get_tuple median ms",
            "get_tuple p90 ms",
            "checkpoints (1,000 steps)",
            "MiB on disk",
        ],
        rows,
    )
    print(table)
    write_section("bench_langgraph_saver", "LangGraph checkpoint savers", table + "\n" + NOTES)


if __name__ == "__main__":
    main()

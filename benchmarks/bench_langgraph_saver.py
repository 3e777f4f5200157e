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
   unchanged since the first), then `ROUNDS` get_tuple of the thread's newest (what a
   graph asks when it starts or resumes; ours answers it from the kernel's cache), then
   `ROUNDS` get_tuple of an older checkpoint by id (never cached: the store's read path);
   median and p90 per call, after `WARMUP` calls of each;
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
    stored: list[Any] = []
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
        stored.append(config)
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
    older: list[float] = []  # by id, an older checkpoint each time: never a cached newest
    for index in range(WARMUP + ROUNDS):
        started = time.perf_counter()
        found = saver.get_tuple(stored[index % (len(stored) - 1)])
        elapsed = time.perf_counter() - started
        assert found is not None and found.checkpoint["channel_values"]["context"] == CONTEXT
        if index >= WARMUP:
            older.append(elapsed * 1000)
    return {
        "put_median": statistics.median(puts),
        "put_p90": _percentile(puts, 0.9),
        "get_median": statistics.median(gets),
        "get_p90": _percentile(gets, 0.9),
        "older_median": statistics.median(older),
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
PostgresSaver. Two runs of this commit, minutes apart, on a shared 2-core machine under
load (load average 6-9; other helpers' tests ran meanwhile): the table is the second run;
"first run" gives the first one's figures where they differ much. Single milliseconds move
from run to run. The test PostgreSQL server runs with `fsync=off` (tests/support), so
PostgresSaver's put commits without a disk flush; ours on SQLite flush their WAL.

"get_tuple" is the thread's newest checkpoint, what a graph asks when it is invoked or
resumed and what `get_state` asks; ours answers it from the kernel's cache
(`ditto_jupyter/langgraph/cache.py`, docs/langgraph.md). "older by id" asks an older
checkpoint by its id each time: never cached, so it measures the store's read path.

- **Embedded put: parity met** (0.98 ms median against 3.97 ms; first run 1.13 against
  3.64). Both commit with a flush of the WAL; ours writes only the values new in the
  checkpoint (once per version), SqliteSaver every value with every checkpoint. The p90s
  are noise of the load (11.9 against 8.1 here, 4.6 against 5.5 in the first run).
- **Embedded get_tuple of the newest: parity met** (0.00-0.01 ms against 0.01-0.02 ms):
  answered from the cache, after one read of the store.
- **Embedded get_tuple of an older checkpoint: parity missed, by 3.5x** (0.07 ms against
  0.02 ms; it was 1.4-2 ms before). It now reads on a DB-API connection kept per thread,
  the checkpoint and the values its versions name in one statement, without SQLAlchemy or
  validation (`sqlite_langgraph_reads`). What is left is Python on our side: rows become
  `LangGraphTuple` models (unvalidated), then LangGraph's tuple, through the control
  plane's `LangGraphThreads` and the transport. What would meet it: the saver building
  LangGraph's tuple straight from the rows (plain tuples end to end). Not attempted: one
  attempt per design.
- **Through the server, get_tuple of the newest: parity met** on both stores (0.00 ms
  against PostgresSaver's 0.37 ms): the kernel is the only writer of its runtime's
  threads, so its cache answers without a request.
- **Through the server, put: parity missed, by far** (PostgreSQL store 26 ms against
  0.36 ms; first run 10.1 against 0.23; SQLite store 6.6-8.3 ms). PostgresSaver talks to
  PostgreSQL from the kernel; ours may not (kernels never get the store's credentials), so
  each put is an HTTP request on the kept-alive connection (auth, JSON with base64
  values, validation), a hop onto a store thread and the store's write transaction, and
  it returns only once that has committed (LangGraph's `durability="sync"` relies on it):
  no write-behind. A compact binary encoding (not done) would save the JSON and base64
  work, a fraction of a millisecond to a few; the round trip and the server's transaction
  stay. What would meet it: a saver with its own credentials to a database of its own
  (what PostgresSaver is), which this design rules out; short of that, LangGraph's
  `durability="async"` or `"exit"` take the put off the graph's path.
- **Through the server, get_tuple of an older checkpoint: parity missed, 10-30x** (2.4-6.7
  ms against 0.23-0.29 ms): one HTTP round trip each, for the same reasons. `list` reads
  the store through the server too.
- **Bytes, embedded: ours is smaller** (32.8 MiB against 36.8 MiB): SqliteSaver stores
  every channel value in every checkpoint (the 4 KiB context 1,002 times), ours stores a
  value once per version. Both store the growing message list once per step.
- **Bytes, PostgreSQL: ours is larger** (6.6-6.7 MiB against 4.8 MiB): PostgreSQL
  compresses PostgresSaver's large values in place (TOAST); ours keeps values over 64 KiB
  (the message list past ~900 messages) in the blob store, counted with the whole data
  directory of the server (the blob catalogue and its log included).
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
                    f"{found['older_median']:.2f}",
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
            "get_tuple older by id median ms",
            "checkpoints (1,000 steps)",
            "MiB on disk",
        ],
        rows,
    )
    print(table)
    write_section("bench_langgraph_saver", "LangGraph checkpoint savers", table + "\n" + NOTES)


if __name__ == "__main__":
    main()

"""`DittoSaver` under a real jupyter-server: the kernel reaches its runtime's threads
through the server's REST API (`self/langgraph/...`, its runtime token), never the store.

- LangGraph's conformance suite, run in a notebook's kernel, passes every base and
  extended capability, on the embedded SQLite store and on PostgreSQL.
- A graph run in a notebook keeps its thread through what a user does with the runtime:
  a checkout's child sees the thread as it stood at the checkpoint and goes on apart from
  its source; pause then resume brings the thread back to the new kernel; the owner lists
  the threads; another user gets exactly what an unknown runtime answers, and their
  kernel's saver finds no thread of that id.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.langgraph_saver.conformance import EVERY_CAPABILITY, failures_of
from tests.server.live_server import LiveServer

pytest_plugins = ["tests.support.postgres_fixtures"]
pytestmark = pytest.mark.slow  # real servers and kernels

REPO = Path(__file__).resolve().parents[2]

#: A cell that runs the conformance suite on `DittoSaver()` in this kernel (on a thread:
#: the kernel's own loop is busy running the cell) and prints the results as JSON.
CONFORMANCE_CELL = f"""
import json, sys, threading
sys.path.insert(0, {str(REPO)!r})
from ditto_jupyter.langgraph import DittoSaver
from tests.langgraph_saver.conformance import conformance
found = {{}}
worker = threading.Thread(target=lambda: found.update(conformance("DittoSaver-server", DittoSaver)))
worker.start()
worker.join()
print(json.dumps(found))
"""

GRAPH_CELL = """
import operator
from typing import Annotated, TypedDict
from langgraph.graph import END, START, StateGraph
from ditto_jupyter.langgraph import DittoSaver

class State(TypedDict):
    n: int
    seen: Annotated[list[int], operator.add]

def step(state: State) -> dict:
    return {"n": state["n"] + 1, "seen": [state["n"]]}

builder = StateGraph(State)
builder.add_node("step", step)
builder.add_edge(START, "step")
builder.add_edge("step", END)
graph = builder.compile(checkpointer=DittoSaver())
plan = {"configurable": {"thread_id": "plan"}}
"""

#: Prints the thread's state as this kernel's saver reads it: `[n, seen]`, or null.
READ_PLAN = """
import json
from ditto_jupyter.langgraph import DittoSaver
found = DittoSaver().get_tuple({"configurable": {"thread_id": "plan"}})
print(json.dumps(None if found is None else [found.checkpoint["channel_values"]["n"],
                                             found.checkpoint["channel_values"]["seen"]]))
"""


def run_conformance(server: LiveServer) -> dict[str, Any]:
    session = server.open_notebook("conformance.ipynb")
    printed = server.execute(session["kernel"]["id"], CONFORMANCE_CELL)
    results: dict[str, Any] = json.loads(printed.strip().splitlines()[-1])
    return results


def read_plan(server: LiveServer, kernel_id: str) -> Any:
    return json.loads(server.execute(kernel_id, READ_PLAN).strip().splitlines()[-1])


def test_conformance_through_a_server_on_sqlite(tmp_path: Path) -> None:
    with LiveServer(tmp_path, config={"DittoJupyterApp": {"kernel_pool_size": 0}}) as server:
        results = run_conformance(server)
    assert set(results) == EVERY_CAPABILITY
    assert failures_of(results) == {}


@pytest.mark.postgres
def test_conformance_through_a_server_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    config = {"DittoJupyterApp": {"store_url": postgres_url, "kernel_pool_size": 0}}
    with LiveServer(tmp_path, config=config) as server:
        results = run_conformance(server)
    assert set(results) == EVERY_CAPABILITY
    assert failures_of(results) == {}


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[LiveServer, LiveServer]]:
    """Alice's server, and Bob's on the same data directory (one SQLite store)."""
    config = {"DittoJupyterApp": {"kernel_pool_size": 0}}
    data = tmp_path / "ditto-data"
    alice = LiveServer(
        tmp_path / "alice", config=config, data_dir=data, environment={"JUPYTERHUB_USER": "alice"}
    )
    bob = LiveServer(
        tmp_path / "bob", config=config, data_dir=data, environment={"JUPYTERHUB_USER": "bob"}
    )
    with alice, bob:
        yield alice, bob


def test_a_graphs_thread_follows_the_runtime(servers: tuple[LiveServer, LiveServer]) -> None:
    alice, bob = servers
    session = alice.open_notebook("agent.ipynb")
    rid, kernel = session["id"], session["kernel"]["id"]
    alice.execute(kernel, GRAPH_CELL + "\ngraph.invoke({'n': 0, 'seen': []}, plan)")
    assert read_plan(alice, kernel) == [1, [0]]

    status, taken = alice.api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, taken
    alice.execute(kernel, "graph.invoke({'n': 10, 'seen': []}, plan)")
    assert read_plan(alice, kernel) == [11, [0, 10]]

    # A checkout's child: the thread as it stood at the checkpoint, then its own way.
    status, child = alice.api("POST", "checkout", {"checkpoint_id": taken["checkpoint_id"]})
    assert status == 200, child
    child_kernel = child["kernel_id"]
    assert read_plan(alice, child_kernel) == [1, [0]]
    alice.execute(child_kernel, GRAPH_CELL + "\ngraph.invoke({'n': 100, 'seen': []}, plan)")
    assert read_plan(alice, child_kernel) == [101, [0, 100]]
    assert read_plan(alice, kernel) == [11, [0, 10]]

    # Pause, then resume: the new kernel's saver goes on with the thread.
    status, paused = alice.api("POST", "pause", {"runtime_id": rid})
    assert status == 200, paused
    status, resumed = alice.api("POST", "resume", {"runtime_id": rid})
    assert status == 200, resumed
    assert read_plan(alice, resumed["kernel_id"]) == [11, [0, 10]]

    # The owner lists them; another user gets what an unknown runtime answers.
    status, listed = alice.api("GET", f"{rid}/langgraph/threads")
    assert status == 200, listed
    assert [(t["thread_id"], t["checkpoints"]) for t in listed["threads"]] == [("plan", 6)]
    nobody = "0" * 32
    assert bob.api("GET", f"{rid}/langgraph/threads") == (
        404,
        json.loads(
            json.dumps(bob.api("GET", f"{nobody}/langgraph/threads")[1]).replace(nobody, rid)
        ),
    )
    bobs = bob.open_notebook("bob.ipynb")
    assert read_plan(bob, bobs["kernel"]["id"]) is None


def test_a_kernel_reaches_only_its_own_runtimes_threads(tmp_path: Path) -> None:
    """The routes take the kernel's runtime token: any other token is refused, and the
    store is left as it was."""
    with LiveServer(tmp_path, config={"DittoJupyterApp": {"kernel_pool_size": 0}}) as server:
        session = server.open_notebook("a.ipynb")
        rid = session["id"]
        body = {"runtime_id": rid, "runtime_token": "not-its-token", "thread_id": "t"}
        status, answer = server.api("POST", "self/langgraph/get", body)
        assert (status, answer["error"]) == (400, "InvalidRequest"), answer
        assert "runtime_token" in answer["message"]
        status, answer = server.api("POST", "self/langgraph/delete-thread", body)
        assert (status, answer["error"]) == (400, "InvalidRequest"), answer
        status, listed = server.api("GET", f"{rid}/langgraph/threads")
        assert (status, listed["threads"]) == (200, [])


def test_a_closed_runtimes_threads_answer_409(tmp_path: Path) -> None:
    """With its kernel's own token, a write to a closed runtime's threads is refused with
    409 RuntimeClosed in one line, and its threads are kept as they were."""
    from ditto_jupyter.core.environment import RUNTIME_TOKEN_ENV

    with LiveServer(tmp_path, config={"DittoJupyterApp": {"kernel_pool_size": 0}}) as server:
        session = server.open_notebook("a.ipynb")
        rid, kernel = session["id"], session["kernel"]["id"]
        server.execute(kernel, GRAPH_CELL + "\ngraph.invoke({'n': 0, 'seen': []}, plan)")
        printed = server.execute(kernel, f"import os; print(os.environ[{RUNTIME_TOKEN_ENV!r}])")
        token = printed.strip().splitlines()[-1]
        status, closed = server.api("POST", "close", {"runtime_id": rid, "discard": True})
        assert status == 200, closed
        who = {"runtime_id": rid, "runtime_token": token}
        status, answer = server.api(
            "POST", "self/langgraph/delete-thread", {**who, "thread_id": "plan"}
        )
        assert (status, answer["error"]) == (409, "RuntimeClosed"), answer
        assert "closed" in answer["message"] and "\n" not in answer["message"]
        empty = {"type": "msgpack", "data": ""}
        put = {
            "thread_id": "new",
            "checkpoint_id": "01",
            "checkpoint": empty,
            "versions": {},
            "metadata": {},
        }
        status, answer = server.api("POST", "self/langgraph/put", {**who, "checkpoint": put})
        assert (status, answer["error"]) == (409, "RuntimeClosed"), answer
        status, listed = server.api("GET", f"{rid}/langgraph/threads")
        assert status == 200 and [t["thread_id"] for t in listed["threads"]] == ["plan"], listed

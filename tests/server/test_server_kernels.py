"""A runtime is a Jupyter session: real kernels under a real Jupyter server.

One scenario test walks a notebook session through the whole life cycle (few kernel
starts: each costs a second or two): registration, busy refusal, checkpoint, restore in
place, checkout to a child session whose kernel holds the variables and a notebook copy,
pause (kernel and session row gone), resume (same id, new kernel, same variables), close.
A second test is the magic's path: a kernel checkpoints and pauses ITSELF through the
`self/...` routes while busy running the cell, with the URL and token of its environment.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.notebook_sessions import open_notebook_session, run, wait_until_busy

pytestmark = pytest.mark.slow  # real kernels under a real Jupyter server

Api = Any  # the `api` fixture of conftest.py


async def jupyter_session(jp_fetch: Any, session_id: str) -> tuple[int, Any]:
    response = await jp_fetch("api", "sessions", session_id, raise_error=False)
    return response.code, json.loads(response.body) if response.body else None


async def test_notebook_session_life_cycle(
    api: Api, ditto_app: DittoJupyterApp, jp_fetch: Any, jp_root_dir: Path, tmp_path: Path
) -> None:
    session = await open_notebook_session(jp_fetch, jp_root_dir, "work/analysis.ipynb")
    runtime_id, kernel_id = session["id"], session["kernel"]["id"]
    await run(
        ditto_app,
        kernel_id,
        """
        import numpy as np
        x = 41
        arr = np.arange(1000)
        alias = arr
        def double(v):
            return 2 * v
        """,
    )
    env = await run(
        ditto_app,
        kernel_id,
        "import os; print(os.environ['DITTO_RUNTIME_ID'], os.environ['DITTO_SERVER_URL'], "
        "os.environ['DITTO_TOKEN'])",
    )
    magics = await run(
        ditto_app, kernel_id, "print(sorted(get_ipython().magics_manager.magics['line']))"
    )
    assert "'checkpoint'" in magics and "'restore'" in magics  # loaded at kernel start
    token = ditto_app.serverapp.identity_provider.token  # type: ignore[union-attr]
    assert env.split() == [runtime_id, ditto_app.serverapp.connection_url, token]  # type: ignore[union-attr]

    # the live Jupyter session is a runtime
    status, listing = await api("GET")
    assert status == 200
    [record] = listing["runtimes"]
    assert record["runtime_id"] == runtime_id
    assert record["conversation_id"] == "work/analysis.ipynb"
    assert record["status"] == "idle"
    assert record["sender_id"]  # the identity provider's user name

    # a kernel running a cell is busy: checkpoint, checkout and pause are refused
    flag = tmp_path / "release-the-kernel"
    running = asyncio.ensure_future(
        run(
            ditto_app,
            kernel_id,
            f"""
            import os, time
            while not os.path.exists({str(flag)!r}):
                time.sleep(0.02)
            """,
        )
    )
    await wait_until_busy(ditto_app, kernel_id)
    status, answer = await api("GET", runtime_id)
    assert answer["status"] == "busy"
    for route, body in [
        ("checkpoint", {"runtime_id": runtime_id}),
        ("pause", {"runtime_id": runtime_id}),
    ]:
        status, answer = await api("POST", route, body)
        assert (status, answer["error"]) == (409, "SessionBusy"), route
    flag.touch()
    await running

    status, first = await api("POST", "checkpoint", {"runtime_id": runtime_id, "name": "before"})
    assert status == 200, first
    status, rows = await api("GET", f"{runtime_id}/checkpoints")
    assert [c["name"] for c in rows["checkpoints"]] == ["before"]

    # busy refusal of checkout needs a checkpoint: hold the kernel again
    flag.unlink()
    running = asyncio.ensure_future(
        run(
            ditto_app,
            kernel_id,
            f"""
            while not os.path.exists({str(flag)!r}):
                time.sleep(0.02)
            """,
        )
    )
    await wait_until_busy(ditto_app, kernel_id)
    status, answer = await api("POST", "checkout", {"checkpoint_id": first["checkpoint_id"]})
    assert (status, answer["error"]) == (409, "SessionBusy")
    flag.touch()
    await running

    # restore in place
    await run(ditto_app, kernel_id, "x = -1\narr[0] = 99\nlater = 'gone after restore'")
    status, restored = await api(
        "POST", "restore", {"runtime_id": runtime_id, "checkpoint_id": "before"}
    )
    assert status == 200, restored
    out = await run(
        ditto_app, kernel_id, "print(x, arr[0], alias is arr, double(4), 'later' in dir())"
    )
    assert out.split() == ["41", "0", "True", "8", "False"]

    # checkout: a new session with its own kernel holding the variables, a notebook copy
    status, child = await api("POST", "checkout", {"checkpoint_id": first["checkpoint_id"]})
    assert status == 200, child
    child_id, child_kernel = child["runtime"]["runtime_id"], child["kernel_id"]
    assert child_id.startswith(f"{runtime_id}-") and child_kernel
    assert child_kernel != kernel_id
    notebook = child["notebook_path"]
    assert notebook.startswith("work/analysis-") and notebook.endswith(".ipynb")
    assert (jp_root_dir / notebook).is_file()
    assert child["runtime"]["conversation_id"] == notebook
    status, child_session = await jupyter_session(jp_fetch, child_id)
    assert status == 200
    assert child_session["kernel"]["id"] == child_kernel and child_session["path"] == notebook
    out = await run(
        ditto_app,
        child_kernel,
        "import os\nprint(x, int(arr.sum()), alias is arr, double(5), "
        "os.environ['DITTO_RUNTIME_ID'])",
    )
    assert out.split() == ["41", str(sum(range(1000))), "True", "10", child_id]
    await run(ditto_app, child_kernel, "x = 'child only'")
    assert (await run(ditto_app, kernel_id, "print(x)")).strip() == "41"

    # pause frees the kernel and the session row; the runtime stays, paused
    status, paused = await api("POST", "pause", {"runtime_id": runtime_id})
    assert status == 200, paused
    assert paused["runtime"]["status"] == "paused"
    assert kernel_id not in ditto_app.serverapp.kernel_manager  # type: ignore[union-attr]
    status, _ = await jupyter_session(jp_fetch, runtime_id)
    assert status == 404
    status, listing = await api("GET")
    states = {r["runtime_id"]: r["status"] for r in listing["runtimes"]}
    assert states == {runtime_id: "paused", child_id: "idle"}

    # resume: same id, a new kernel with the same variables, a session row again
    status, resumed = await api("POST", "resume", {"runtime_id": runtime_id})
    assert status == 200, resumed
    new_kernel = resumed["kernel_id"]
    assert resumed["runtime"]["runtime_id"] == runtime_id and new_kernel != kernel_id
    out = await run(ditto_app, new_kernel, "print(x, arr[0], alias is arr, double(6))")
    assert out.split() == ["41", "0", "True", "12"]
    status, model = await jupyter_session(jp_fetch, runtime_id)
    assert status == 200 and model["kernel"]["id"] == new_kernel
    assert model["path"] == "work/analysis.ipynb"

    # the child is a normal Jupyter session: it can be renamed through /api/sessions/{id}
    renamed = await jp_fetch(
        "api", "sessions", child_id, method="PATCH", body=json.dumps({"name": "branch.ipynb"})
    )
    assert json.loads(renamed.body)["name"] == "branch.ipynb"
    # a new path (JupyterLab sets it right after starting a session; a rename) moves the
    # runtime's notebook with it
    await jp_fetch(
        "api", "sessions", child_id, method="PATCH", body=json.dumps({"path": "work/branch.ipynb"})
    )
    status, child_record = await api("GET", child_id)
    assert (status, child_record["conversation_id"]) == (200, "work/branch.ipynb")

    # close shuts the kernel down for good
    status, closed = await api("POST", "close", {"runtime_id": child_id})
    assert status == 200 and closed["runtime"]["status"] == "closed"
    assert child_kernel not in ditto_app.serverapp.kernel_manager  # type: ignore[union-attr]
    status, _ = await jupyter_session(jp_fetch, child_id)
    assert status == 404
    status, answer = await api("POST", "resume", {"runtime_id": child_id})
    assert (status, answer["error"]) == (409, "RuntimeClosed")


async def test_kernel_shut_down_in_jupyterlab_is_marked_lost(
    api: Api, ditto_app: DittoJupyterApp, jp_fetch: Any, jp_root_dir: Path
) -> None:
    session = await open_notebook_session(jp_fetch, jp_root_dir, "lost.ipynb")
    runtime_id = session["id"]
    await run(ditto_app, session["kernel"]["id"], "v = [1, 2, 3]")
    status, _ = await api("POST", "checkpoint", {"runtime_id": runtime_id})
    assert status == 200
    await jp_fetch("api", "sessions", runtime_id, method="DELETE")
    assert ditto_app.watcher is not None
    await ditto_app.watcher.check_once()  # the watcher, not a read, records it lost
    status, record = await api("GET", runtime_id)
    assert (status, record["status"]) == (200, "paused")
    status, resumed = await api("POST", "resume", {"runtime_id": runtime_id})
    assert status == 200, resumed
    assert (await run(ditto_app, resumed["kernel_id"], "print(sum(v))")).strip() == "6"
    await api("POST", "close", {"runtime_id": runtime_id})


SELF_CALL = """
import os, httpx
from ditto_jupyter.kernel.capture import capture_namespace, open_blob_store
def _ditto(route, **body):
    url = os.environ["DITTO_SERVER_URL"] + "api/v1/runtimes/" + route
    headers = {"Authorization": "token " + os.environ["DITTO_TOKEN"]}
    body["runtime_id"] = os.environ["DITTO_RUNTIME_ID"]
    body["runtime_token"] = os.environ["DITTO_RUNTIME_TOKEN"]
    return httpx.post(url, headers=headers, json=body, timeout=120)
"""


async def test_a_busy_kernel_checkpoints_and_pauses_itself(
    api: Api, ditto_app: DittoJupyterApp, jp_fetch: Any, jp_root_dir: Path
) -> None:
    session = await open_notebook_session(jp_fetch, jp_root_dir, "self.ipynb")
    runtime_id, kernel_id = session["id"], session["kernel"]["id"]
    await run(ditto_app, kernel_id, SELF_CALL + "\nsecret = {'k': 'v'}")
    out = await run(
        ditto_app,
        kernel_id,
        """
        blobs = os.environ["DITTO_DATA_DIR"] + "/blobs"
        cap = capture_namespace(
            get_ipython().user_ns, open_blob_store(blobs), runtime_id=os.environ["DITTO_RUNTIME_ID"]
        )
        answer = _ditto("self/checkpoint", capture=cap.model_dump(mode="json"), name="mine")
        print(answer.status_code, answer.json()["checkpoint_id"])
        """,
    )
    code, checkpoint_id = out.split()
    assert code == "200"
    status, detail = await api("GET", f"{runtime_id}/checkpoints/mine")
    assert detail["checkpoint"]["checkpoint_id"] == checkpoint_id

    token = (await run(ditto_app, kernel_id, "print(os.environ['DITTO_RUNTIME_TOKEN'])")).strip()
    status, answer = await api(
        "POST",
        "self/checkpoint",
        {"runtime_id": runtime_id, "runtime_token": token, "capture": {"manifest_id": "forged"}},
    )
    assert (status, answer["error"]) == (400, "InvalidRequest")
    assert "manifest" in answer["message"]

    out = await run(
        ditto_app,
        kernel_id,
        """
        secret["k"] = "changed"
        cap = capture_namespace(
            get_ipython().user_ns, open_blob_store(blobs), runtime_id=os.environ["DITTO_RUNTIME_ID"]
        )
        answer = _ditto("self/pause", capture=cap.model_dump(mode="json"))
        print(answer.status_code, answer.json()["runtime"]["status"])
        """,
    )
    assert out.split() == ["200", "paused"]  # the magic got its answer before the kernel went
    await ditto_app.host.wait_deferred()  # type: ignore[union-attr]
    assert kernel_id not in ditto_app.serverapp.kernel_manager  # type: ignore[union-attr]
    status, resumed = await api("POST", "resume", {"runtime_id": runtime_id})
    assert status == 200, resumed
    out = await run(ditto_app, resumed["kernel_id"], "print(secret['k'])")
    assert out.strip() == "changed"
    await api("POST", "close", {"runtime_id": runtime_id})

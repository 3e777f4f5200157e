"""Pause, resume and checkout keep `%autocheckpoint` on (issue 40 section 10).

Walked in a user's order on a real Jupyter server with real kernels: `%autocheckpoint on`,
a cell, pause (the panel's REST pause, or `%pause`), resume, more cells. The resumed kernel
keeps taking a checkpoint after every cell, undo works, and the automatic checkpoints'
names stay unique although the new kernel counts its cells from 1 again.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run, user_variables

Api = Any  # the `api` fixture of conftest.py

pytestmark = pytest.mark.slow

FLUSH = "get_ipython().magics_manager.registry['DittoMagics'].autocheckpointer.flush()"


@pytest.fixture
def ditto_load_magics() -> bool:
    return True


async def names(api: Api, rid: str) -> list[str]:
    status, listed = await api("GET", f"{rid}/checkpoints")
    assert status == 200, listed
    return [str(c["name"]) for c in listed["checkpoints"]]


@pytest.mark.parametrize("pause_by", ["panel", "magic"])
async def test_autocheckpoint_stays_on_across_pause_and_resume(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, pause_by: str
) -> None:
    runtime = await open_runtime(f"notebooks/resumed-{pause_by}.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await run(ditto_app, kernel, "%autocheckpoint on --keep 7")
    await run(ditto_app, kernel, "x = 1")
    await run(ditto_app, kernel, "x = 2")
    if pause_by == "panel":
        status, paused = await api("POST", "pause", {"runtime_id": rid})
        assert status == 200, paused
    else:
        await run(ditto_app, kernel, "%pause")
        status, record = await api("GET", rid)
        assert (status, record["status"]) == (200, "paused"), record
    status, resumed = await api("POST", "resume", {"runtime_id": rid})
    assert status == 200, resumed
    kernel = resumed["kernel_id"]

    state = await run(ditto_app, kernel, "%autocheckpoint")
    assert state.startswith("autocheckpoint on: ") and "the newest 7 kept" in state, state
    before = await names(api, rid)
    await run(ditto_app, kernel, "x = 3")
    await run(ditto_app, kernel, "y = 4")
    await run(ditto_app, kernel, FLUSH)
    status, listed = await api("GET", f"{rid}/checkpoints")
    fresh = listed["checkpoints"][len(before) :]
    assert [c["automatic"]["source"] for c in fresh] == ["x = 3", "y = 4"]  # they keep coming
    every = await names(api, rid)
    assert len(set(every)) == len(every), every  # unique, though the counts restarted

    status, undone = await api("POST", "undo", {"runtime_id": rid})
    assert status == 200, undone
    assert undone["undone_cell"]["source"] == "y = 4"
    variables = await user_variables(ditto_app, kernel)
    assert variables["x"] == 3 and "y" not in variables


async def test_a_checked_out_kernel_keeps_autocheckpoint_on(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("notebooks/source.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    await run(ditto_app, kernel, "%autocheckpoint on")
    await run(ditto_app, kernel, "x = 1")
    await run(ditto_app, kernel, FLUSH)
    head = (await api("GET", f"{rid}/lineage"))[1]["head"]["checkpoint_id"]
    status, child = await api("POST", "checkout", {"checkpoint_id": head})
    assert status == 200, child
    state = await run(ditto_app, child["kernel_id"], "%autocheckpoint")
    assert state.startswith("autocheckpoint on: "), state


async def test_names_stay_unique_across_resumes(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("notebooks/names.ipynb")
    rid, kernel = runtime.runtime_id, runtime.kernel_id
    for turn in (1, 2):
        await run(ditto_app, kernel, "%autocheckpoint on")  # as a user would, each time
        await run(ditto_app, kernel, f"x = {turn}")
        status, paused = await api("POST", "pause", {"runtime_id": rid})
        assert status == 200, paused
        status, resumed = await api("POST", "resume", {"runtime_id": rid})
        assert status == 200, resumed
        kernel = resumed["kernel_id"]
    every = await names(api, rid)
    assert len(set(every)) == len(every), every
    assert "pause" in every and "pause-2" in every, every
    _, listed = await api("GET", f"{rid}/checkpoints")
    sources = {c["automatic"]["source"]: c["name"] for c in listed["checkpoints"] if c["automatic"]}
    assert set(sources) >= {"x = 1", "x = 2"}, sources  # recorded before each pause
    out = await run(ditto_app, kernel, f"%restore {sources['x = 1']}\nprint(x)")
    assert out.strip().splitlines()[-1] == "1", out

"""Restore stays within the runtime's own tree: another runtime's checkpoint is checked out.

A real Jupyter server with the extension, a real SQLite store and real kernels. A full
checkpoint id of another runtime is refused (400, pointing to checkout), and the runtime's
head and variables stay as they were; a checkout child may still go back to the
checkpoint it was checked out from.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import user_variables

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def test_restore_by_another_runtimes_full_id_is_refused_pointing_to_checkout(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    mine = await open_runtime("mine.ipynb", x=1)
    other = await open_runtime("other.ipynb", y=2)
    _, own = await api("POST", "checkpoint", {"runtime_id": mine.runtime_id})
    _, theirs = await api("POST", "checkpoint", {"runtime_id": other.runtime_id})
    body = {"runtime_id": mine.runtime_id, "checkpoint_id": theirs["checkpoint_id"]}
    status, refused = await api("POST", "restore", body)
    assert (status, refused["error"]) == (400, "InvalidRequest"), refused
    assert "checkout" in refused["message"] and other.runtime_id in refused["message"]
    _, lineage = await api("GET", f"{mine.runtime_id}/lineage")
    assert lineage["head"]["checkpoint_id"] == own["checkpoint_id"]
    assert await user_variables(ditto_app, mine.kernel_id) == {"x": 1}


async def test_a_checkout_child_may_restore_the_checkpoint_it_came_from(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    source = await open_runtime("source.ipynb", x=1)
    _, made = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})
    cid = made["checkpoint_id"]
    status, child = await api("POST", "checkout", {"checkpoint_id": cid})
    assert status == 200, child
    child_id = child["runtime"]["runtime_id"]
    status, restored = await api("POST", "restore", {"runtime_id": child_id, "checkpoint_id": cid})
    assert status == 200, restored

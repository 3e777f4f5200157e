"""What the side panel reads to draw a checkpoint tree: bytes, head, checkout origins.

A real Jupyter server with the extension, a real SQLite store and real kernels. The panel
draws each runtime's checkpoints from the listing (now with the bytes each wrote) and its
branches from `GET /api/v1/runtimes/{runtime_id}/lineage`: the head, the checkpoint the
runtime was checked out from, and the runtimes checked out from its checkpoints.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def test_listing_says_how_many_bytes_each_checkpoint_wrote(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("bytes.ipynb")
    await run(ditto_app, runtime.kernel_id, "import os\npayload = os.urandom(200_000)")
    status, first = await api("POST", "checkpoint", {"runtime_id": runtime.runtime_id})
    assert status == 200, first
    status, again = await api("POST", "checkpoint", {"runtime_id": runtime.runtime_id})
    assert status == 200, again

    status, listing = await api("GET", f"{runtime.runtime_id}/checkpoints")
    assert status == 200, listing
    written = [c["bytes_written"] for c in listing["checkpoints"]]
    assert written[0] > 200_000  # the random bytes went out once
    assert 0 <= written[1] < written[0] // 10  # nothing changed: chunks were reused


async def test_lineage_names_head_origin_and_checkouts(api: Api, open_runtime: OpenRuntime) -> None:
    source = await open_runtime("lineage.ipynb", x=1)
    rid = source.runtime_id
    status, lineage = await api("GET", f"{rid}/lineage")
    assert status == 200, lineage
    assert lineage == {"runtime_id": rid, "head": None, "source": None, "checkouts": []}

    _, first = await api("POST", "checkpoint", {"runtime_id": rid, "name": "one"})
    _, second = await api("POST", "checkpoint", {"runtime_id": rid, "name": "two"})
    status, child = await api("POST", "checkout", {"checkpoint_id": first["checkpoint_id"]})
    assert status == 200, child
    child_id = child["runtime"]["runtime_id"]

    status, lineage = await api("GET", f"{rid}/lineage")
    assert status == 200, lineage
    assert lineage["head"]["checkpoint_id"] == second["checkpoint_id"]
    assert lineage["head"]["name"] == "two"
    assert lineage["source"] is None
    assert lineage["checkouts"] == [
        {
            "runtime_id": child_id,
            "checkpoint_id": first["checkpoint_id"],
            "conversation_id": child["notebook_path"],
            "status": "idle",
            "fanout": None,  # a single checkout is no fan-out
        }
    ]

    status, child_lineage = await api("GET", f"{child_id}/lineage")
    assert status == 200, child_lineage
    assert child_lineage["source"] == {"runtime_id": rid, "checkpoint_id": first["checkpoint_id"]}
    assert child_lineage["head"]["checkpoint_id"] == first["checkpoint_id"]
    assert child_lineage["checkouts"] == []

    _, restored = await api(
        "POST", "restore", {"runtime_id": rid, "checkpoint_id": first["checkpoint_id"]}
    )
    assert restored["checkpoint_id"] == first["checkpoint_id"]
    _, lineage = await api("GET", f"{rid}/lineage")
    assert lineage["head"]["checkpoint_id"] == first["checkpoint_id"]


async def test_lineage_of_an_unknown_runtime_is_404(api: Api) -> None:
    status, body = await api("GET", "no-such-runtime/lineage")
    assert status == 404
    assert body["error"] == "RuntimeNotFound"

"""%autocheckpoint in a real kernel of a real Jupyter server: the kernel records each cell's
capture through `self/checkpoint` from its write-behind thread, just after the cell's reply
(the public route would wait for the kernel to be idle), and prunes through `self/prune`
with the kernel's token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from tests.server.live_server import LiveServer
from tests.support.kernel_cells import clean, run_cell, value, wait_for_autocheckpoints
from tests.support.magic_display import printed_once

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("autocheckpoint-server")) as server:
        yield server


def connect(live: LiveServer, kernel_id: str) -> BlockingKernelClient:
    client: BlockingKernelClient = live.connect(kernel_id)
    return client


def listed(live: LiveServer, rid: str) -> list[dict[str, Any]]:
    code, answer = live.api("GET", f"{rid}/checkpoints")
    assert code == 200, answer
    checkpoints: list[dict[str, Any]] = answer["checkpoints"]
    return checkpoints


def test_cells_checkpoint_through_the_self_routes(live: LiveServer) -> None:
    session = live.open_notebook("auto.ipynb")
    rid, kernel_id = session["id"], session["kernel"]["id"]
    client = connect(live, kernel_id)
    try:
        on = printed_once(clean(run_cell(client, "%autocheckpoint on --keep 2")))
        assert on.startswith("autocheckpoint on: ")
        clean(run_cell(client, "total = 0"))
        for step in range(1, 4):
            clean(run_cell(client, f"total += {step}"))
        clean(run_cell(client, "print(total)"))  # unchanged: no checkpoint
        failed = run_cell(client, "total = -1\nundefined_name")
        assert failed.error is not None and "NameError" in failed.error

        wait_for_autocheckpoints(client)  # the last cells' writes may still be under way
        checkpoints = listed(live, rid)
        auto = [c for c in checkpoints if c["automatic"] is not None]
        assert all("autocheckpoint" not in c["metadata"] for c in auto)  # not the user's
        sources = [c["automatic"]["source"] for c in auto]
        assert sources[-5:] == [
            "total = 0",
            "total += 1",
            "total += 2",
            "total += 3",
            "total = -1\nundefined_name",
        ]
        assert auto[-1]["automatic"]["failed"] is True
        whole = [c for c in auto if not c["pruned"]]
        assert [c["name"] for c in whole] == [c["name"] for c in auto[-2:]]  # --keep 2

        # %restore by cell name, under the server
        before_failure = auto[-2]["name"]
        restored = printed_once(clean(run_cell(client, f"%restore {before_failure}")))
        assert restored.startswith("restored ")
        assert value(client, "total") == 6
        code, runtime = live.api("GET", rid)
        assert code == 200 and runtime["status"] in ("idle", "busy")
        pruned_name = next(c["name"] for c in auto if c["pruned"])
        refused = run_cell(client, f"%restore {pruned_name}")
        assert refused.stderr.startswith("ditto: InvalidRequest: ") and "pruned" in refused.stderr
        assert value(client, "total") == 6
    finally:
        client.stop_channels()


def test_self_prune_needs_the_kernels_token(live: LiveServer) -> None:
    session = live.open_notebook("token.ipynb")
    rid = session["id"]
    code, answer = live.api(
        "POST", "self/prune", {"runtime_id": rid, "runtime_token": "forged", "keep": 1}
    )
    assert code == 400 and answer["error"] == "InvalidRequest"
    assert "\n" not in answer["message"]
    code, answer = live.api(
        "POST", "self/prune", {"runtime_id": rid, "runtime_token": "forged", "keep": 0}
    )
    assert code == 400 and "keep" in answer["message"]

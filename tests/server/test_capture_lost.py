"""A kernel whose own capture its server refuses as CaptureLost (bytes it names were
collected from the bucket meanwhile) captures again by itself (issue 24 section 2).

A real Jupyter server (pytest-jupyter) and a real kernel with the magics: the refusal
travels over REST as 409 `CaptureLost`, the kernel forgets what it knew was stored and
captures again, whole, and `%checkpoint` records one checkpoint instead of printing an
error. The refusal comes from a test double in place of the server's check (the race it
stands for is staged for real on the gateway in tests/control/test_bucket_gc.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.fakes.lost_capture import RefusesFirstCapture
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run

pytestmark = pytest.mark.slow  # a real kernel under a real Jupyter server

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return True


async def test_checkpoint_magic_captures_again_when_its_capture_was_lost(
    api: Api,
    ditto_app: DittoJupyterApp,
    open_runtime: OpenRuntime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runtime = await open_runtime(x=1, rows=[1, 2, 3])
    assert ditto_app.service is not None
    replication = ditto_app.service.replication
    double = RefusesFirstCapture(replication.require_backed)
    monkeypatch.setattr(replication, "require_backed", double)

    printed = await run(ditto_app, runtime.kernel_id, "%checkpoint kept")
    assert printed.startswith("checkpoint ") and "'kept'" in printed, printed
    assert len(double.asked) == 2  # refused, captured again, recorded
    status, listed = await api("GET", f"{runtime.runtime_id}/checkpoints")
    assert status == 200, listed
    assert [c["name"] for c in listed["checkpoints"]] == ["kept"]
    status, detail = await api("GET", f"{runtime.runtime_id}/checkpoints/kept")
    assert status == 200, detail
    assert detail["context_manifest_id"] == double.asked[1][0]  # the capture taken again

"""The `self/...` routes trust nothing they are sent (issue 10, section 4).

A real Jupyter server (pytest-jupyter) with real kernels. The routes are meant for a
runtime's own kernel, which holds its runtime's id and token in its environment
(`DITTO_RUNTIME_ID`, `DITTO_RUNTIME_TOKEN`); here they are called directly with forged
bodies, as the outside probe did. Each test also shows the honest request succeeding, so a
refusal is the rule at work and not a body the route cannot read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime, Runtime
from tests.server.notebook_sessions import run, sleeping, user_variables

pytestmark = pytest.mark.slow  # real kernels under a real Jupyter server

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def runtime_token(app: DittoJupyterApp, runtime: Runtime) -> str:
    """The token the runtime's kernel was started with."""
    code = "print(__import__('os').environ['DITTO_RUNTIME_TOKEN'])"
    return (await run(app, runtime.kernel_id, code)).strip()


async def checkpoint_with_manifest(api: Api, runtime_id: str) -> tuple[str, str]:
    """A server-initiated checkpoint of the runtime: its id and its namespace manifest id."""
    status, answer = await api("POST", "checkpoint", {"runtime_id": runtime_id})
    assert status == 200, answer
    checkpoint_id = answer["checkpoint_id"]
    status, detail = await api("GET", f"{runtime_id}/checkpoints/{checkpoint_id}")
    assert status == 200, detail
    return checkpoint_id, detail["context_manifest_id"]


async def checkpoint_ids(api: Api, runtime_id: str) -> list[str]:
    status, listed = await api("GET", f"{runtime_id}/checkpoints")
    assert status == 200, listed
    return [c["checkpoint_id"] for c in listed["checkpoints"]]


async def test_self_checkpoint_takes_only_this_runtimes_namespace_manifest(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    a = await open_runtime("a.ipynb", x=1)
    b = await open_runtime("b.ipynb", secret="b's")
    token_a = await runtime_token(ditto_app, a)
    own_checkpoint, own_manifest = await checkpoint_with_manifest(api, a.runtime_id)
    _, b_manifest = await checkpoint_with_manifest(api, b.runtime_id)

    status, answer = await api(
        "POST",
        "self/checkpoint",
        {
            "runtime_id": a.runtime_id,
            "runtime_token": token_a,
            "capture": {"manifest_id": b_manifest},
        },
    )
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert (
        f"captured for runtime {b.runtime_id}, not for runtime {a.runtime_id}"
        in (answer["message"])
    )
    assert await checkpoint_ids(api, a.runtime_id) == [own_checkpoint]

    # a manifest written before manifests named their runtime: refused as a new capture,
    # still restorable as the checkpoint that recorded it
    old_manifest = (
        await run(
            ditto_app,
            a.kernel_id,
            "from ditto_jupyter.kernel.capture import capture_namespace, open_blob_store\n"
            "print(capture_namespace(get_ipython().user_ns, open_blob_store("
            "__import__('os').environ['DITTO_DATA_DIR'] + '/blobs')).manifest_id)",
        )
    ).strip()
    status, answer = await api(
        "POST",
        "self/checkpoint",
        {
            "runtime_id": a.runtime_id,
            "runtime_token": token_a,
            "capture": {"manifest_id": old_manifest},
        },
    )
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert "captured for no runtime" in answer["message"]
    assert ditto_app.service is not None
    store = ditto_app.service.store
    old_record = store.get_checkpoint(own_checkpoint)
    assert old_record is not None
    old_checkpoint = "0" * 31 + "1"
    store.put_checkpoint(
        old_record.model_copy(
            update={"checkpoint_id": old_checkpoint, "context_manifest_id": old_manifest}
        )
    )
    await run(ditto_app, a.kernel_id, "x = 'changed'")
    status, answer = await api(
        "POST", "restore", {"runtime_id": a.runtime_id, "checkpoint_id": old_checkpoint}
    )
    assert status == 200, answer
    assert (await user_variables(ditto_app, a.kernel_id))["x"] == 1

    # the runtime's own capture is recorded
    status, answer = await api(
        "POST",
        "self/checkpoint",
        {
            "runtime_id": a.runtime_id,
            "runtime_token": token_a,
            "capture": {"manifest_id": own_manifest},
        },
    )
    assert status == 200, answer
    assert answer["checkpoint_id"] in await checkpoint_ids(api, a.runtime_id)


async def test_self_capture_counts_are_never_negative(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    a = await open_runtime("a.ipynb", x=1)
    token = await runtime_token(ditto_app, a)
    first, manifest = await checkpoint_with_manifest(api, a.runtime_id)
    for field in ("bytes_written", "execution_count"):
        status, answer = await api(
            "POST",
            "self/checkpoint",
            {
                "runtime_id": a.runtime_id,
                "runtime_token": token,
                "capture": {"manifest_id": manifest, field: -1},
            },
        )
        assert (status, answer["error"]) == (400, "InvalidRequest"), answer
        assert f"'capture.{field}'" in answer["message"], answer
    assert await checkpoint_ids(api, a.runtime_id) == [first]

    status, answer = await api(
        "POST",
        "self/checkpoint",
        {
            "runtime_id": a.runtime_id,
            "runtime_token": token,
            "capture": {"manifest_id": manifest, "bytes_written": 0, "execution_count": 0},
        },
    )
    assert status == 200, answer


async def test_self_pause_that_could_not_resume_is_refused_before_anything_stops(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    a = await open_runtime("a.ipynb", x=1)
    token = await runtime_token(ditto_app, a)
    checkpoint_id, manifest = await checkpoint_with_manifest(api, a.runtime_id)
    assert ditto_app.service is not None and ditto_app.serverapp is not None
    ref = ditto_app.service.get_checkpoint(checkpoint_id).backend_ref
    assert ref is not None and ref.provider_snapshot_id
    workspace_manifest = ref.provider_snapshot_id

    status, answer = await api(
        "POST",
        "self/pause",
        {
            "runtime_id": a.runtime_id,
            "runtime_token": token,
            "capture": {"manifest_id": workspace_manifest},
        },
    )
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert "'workspace' manifest" in answer["message"]
    assert ditto_app.host is not None
    await ditto_app.host.wait_deferred()
    assert a.kernel_id in ditto_app.serverapp.kernel_manager  # nothing stopped
    status, record = await api("GET", a.runtime_id)
    assert record["status"] == "idle"
    assert (await user_variables(ditto_app, a.kernel_id))["x"] == 1
    assert await checkpoint_ids(api, a.runtime_id) == [checkpoint_id]

    status, paused = await api(
        "POST",
        "self/pause",
        {"runtime_id": a.runtime_id, "runtime_token": token, "capture": {"manifest_id": manifest}},
    )
    assert (status, paused["runtime"]["status"]) == (200, "paused"), paused
    status, resumed = await api("POST", "resume", {"runtime_id": a.runtime_id})
    assert status == 200, resumed
    assert (await user_variables(ditto_app, resumed["kernel_id"]))["x"] == 1


async def test_self_checkout_of_a_busy_source_needs_the_sources_own_kernel(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, tmp_path: Path
) -> None:
    a = await open_runtime("a.ipynb", x=1)
    b = await open_runtime("b.ipynb", y=2)
    token_a = await runtime_token(ditto_app, a)
    token_b = await runtime_token(ditto_app, b)
    b_checkpoint, _ = await checkpoint_with_manifest(api, b.runtime_id)

    async with sleeping(ditto_app, b.kernel_id, tmp_path):
        for forged in (token_a, ""):  # claims to be B's kernel, without B's token
            status, answer = await api(
                "POST",
                "self/checkout",
                {
                    "runtime_id": b.runtime_id,
                    "runtime_token": forged,
                    "checkpoint_id": b_checkpoint,
                },
            )
            assert (status, answer["error"]) == (400, "InvalidRequest"), answer
            assert "runtime_token" in answer["message"]
        # A's kernel asking about B's checkpoint: the public rule, B is busy
        status, answer = await api(
            "POST",
            "self/checkout",
            {"runtime_id": a.runtime_id, "runtime_token": token_a, "checkpoint_id": b_checkpoint},
        )
        assert (status, answer["error"]) == (409, "SessionBusy"), answer
        status, listing = await api("GET")
        assert len(listing["runtimes"]) == 2  # no child was made

        # B's own kernel (its magic) is busy with the very request that asks
        status, child = await api(
            "POST",
            "self/checkout",
            {"runtime_id": b.runtime_id, "runtime_token": token_b, "checkpoint_id": b_checkpoint},
        )
        assert status == 200, child
    assert (await user_variables(ditto_app, child["kernel_id"]))["y"] == 2


async def test_self_restore_cannot_move_another_runtimes_head(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    a = await open_runtime("a.ipynb", x=1)
    b = await open_runtime("b.ipynb", y=2)
    token_a = await runtime_token(ditto_app, a)
    token_b = await runtime_token(ditto_app, b)
    a_checkpoint, _ = await checkpoint_with_manifest(api, a.runtime_id)
    b_checkpoint, _ = await checkpoint_with_manifest(api, b.runtime_id)
    assert ditto_app.service is not None
    store = ditto_app.service.store

    for forged in (token_b, ""):  # not A's kernel
        status, answer = await api(
            "POST",
            "self/restore",
            {"runtime_id": a.runtime_id, "runtime_token": forged, "checkpoint_id": b_checkpoint},
        )
        assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert store.get_head(a.runtime_id) == a_checkpoint
    status, answer = await api("POST", "checkpoint", {"runtime_id": a.runtime_id})
    assert answer["previous_checkpoint_id"] == a_checkpoint

    # A's own kernel, having restored a checkpoint into itself, records it
    status, answer = await api(
        "POST",
        "self/restore",
        {"runtime_id": a.runtime_id, "runtime_token": token_a, "checkpoint_id": a_checkpoint},
    )
    assert status == 200, answer
    assert store.get_head(a.runtime_id) == a_checkpoint

"""The REST error matrix on real kernels: every error code, what causes it, what it leaves.

A real Jupyter server (pytest-jupyter) with the extension and real kernels, as in
test_server_api.py: busy is a kernel running `time.sleep`, lost is a kernel whose process
was killed, provider refusals come from the fake E2B cloud. Every refused operation leaves
the store as it was. The last test derives the codes from the error types themselves and
reaches each one with a real request.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import nbformat
import pytest

from ditto_jupyter.control.store import SqlCheckpointStore
from ditto_jupyter.core import errors
from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.handlers import CONFIGURATION_ERROR
from tests.fakes.e2b_cloud import ROUTE_CREATE_SNAPSHOT, FakeE2BCloud
from tests.fakes.e2b_fixtures import fake_e2b  # noqa: F401
from tests.fakes.lost_capture import RefusesFirstCapture
from tests.fakes.refusing_sqlite import disk_full, locked_error, refusing_writes
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import kill_kernel, run, sleeping

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def test_not_found_codes(api: Api, open_runtime: OpenRuntime) -> None:
    rid = (await open_runtime()).runtime_id
    for method, route, body in [
        ("GET", "nope", None),
        ("GET", "nope/checkpoints", None),
        ("GET", "nope/checkpoints/x", None),
        ("POST", "checkpoint", {"runtime_id": "nope"}),
        ("POST", "pause", {"runtime_id": "nope"}),
        ("POST", "resume", {"runtime_id": "nope"}),
        ("POST", "close", {"runtime_id": "nope"}),
    ]:
        status, answer = await api(method, route, body)
        assert (status, answer["error"]) == (404, "RuntimeNotFound"), (route, answer)
    for route, body in [
        ("checkout", {"checkpoint_id": "0" * 32}),
        ("checkpoint/delete-snapshot", {"checkpoint_id": "0" * 32}),
        ("restore", {"runtime_id": rid, "checkpoint_id": "missing"}),
    ]:
        status, answer = await api("POST", route, body)
        assert (status, answer["error"]) == (404, "CheckpointNotFound"), (route, answer)
    for route in (f"{rid}/checkpoints/missing", "checkpoints/missing"):
        status, answer = await api("GET", route)
        assert (status, answer["error"]) == (404, "CheckpointNotFound"), route


async def test_busy_runtime_is_409_and_nothing_changes(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, tmp_path: Path
) -> None:
    r1 = await open_runtime(x=1)
    rid = r1.runtime_id
    status, cp = await api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200
    async with sleeping(ditto_app, r1.kernel_id, tmp_path):
        status, record = await api("GET", rid)
        assert record["status"] == "busy"
        for route, body in [
            ("checkpoint", {"runtime_id": rid}),
            ("checkout", {"checkpoint_id": cp["checkpoint_id"]}),
            ("pause", {"runtime_id": rid}),
            ("restore", {"runtime_id": rid, "checkpoint_id": cp["checkpoint_id"]}),
            ("undo", {"runtime_id": rid}),  # at once: it does not wait behind the cell
        ]:
            status, answer = await api("POST", route, body)
            assert (status, answer["error"]) == (409, "SessionBusy"), (route, answer)
        _, listing = await api("GET")
        assert [r["runtime_id"] for r in listing["runtimes"]] == [rid]
        _, rows = await api("GET", f"{rid}/checkpoints")
        assert len(rows["checkpoints"]) == 1


async def test_state_conflicts_are_409(api: Api, open_runtime: OpenRuntime) -> None:
    rid = (await open_runtime(x=1)).runtime_id
    status, answer = await api("POST", "resume", {"runtime_id": rid})
    assert (status, answer["error"]) == (409, "RuntimeNotPaused")
    await api("POST", "pause", {"runtime_id": rid})
    for route in ("checkpoint", "pause"):
        status, answer = await api("POST", route, {"runtime_id": rid})
        assert (status, answer["error"]) == (409, "RuntimePaused"), route
    await api("POST", "close", {"runtime_id": rid})
    for route in ("checkpoint", "pause", "resume", "close"):
        status, answer = await api("POST", route, {"runtime_id": rid})
        assert (status, answer["error"]) == (409, "RuntimeClosed"), route


async def test_checkout_of_a_deleted_snapshot_is_unsupported(
    api: Api, open_runtime: OpenRuntime
) -> None:
    rid = (await open_runtime(x=1)).runtime_id
    _, cp = await api("POST", "checkpoint", {"runtime_id": rid})
    await api("POST", "checkpoint/delete-snapshot", {"checkpoint_id": cp["checkpoint_id"]})
    _, before = await api("GET")
    status, answer = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    assert (status, answer["error"]) == (422, "UnsupportedBackend")
    _, after = await api("GET")
    assert after == before


async def test_checkout_copies_the_notebook_and_a_failed_one_leaves_no_copy(
    api: Api, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    rid = (await open_runtime("notebooks/work.ipynb", "x = 1", x=1)).runtime_id
    _, cp = await api("POST", "checkpoint", {"runtime_id": rid})

    status, child = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    assert status == 200, child
    copy = child["notebook_path"]
    assert copy.startswith("notebooks/work-") and copy.endswith(".ipynb")
    assert nbformat.read(str(jp_root_dir / copy), as_version=4).cells[0].source == "x = 1"
    assert child["runtime"]["conversation_id"] == copy

    status, named = await api(
        "POST",
        "checkout",
        {"checkpoint_id": cp["checkpoint_id"], "conversation_id": "notebooks/branch.ipynb"},
    )
    assert status == 200 and named["notebook_path"] == "notebooks/branch.ipynb"
    assert (jp_root_dir / "notebooks" / "branch.ipynb").is_file()

    status, chat = await api(
        "POST", "checkout", {"checkpoint_id": cp["checkpoint_id"], "conversation_id": "chat-42"}
    )
    assert status == 200 and chat["notebook_path"] is None  # not a notebook path: no copy

    before = sorted(p.name for p in (jp_root_dir / "notebooks").iterdir())
    await api("POST", "checkpoint/delete-snapshot", {"checkpoint_id": cp["checkpoint_id"]})
    status, answer = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    assert (status, answer["error"]) == (422, "UnsupportedBackend")
    assert sorted(p.name for p in (jp_root_dir / "notebooks").iterdir()) == before


@pytest.fixture
def no_autorestart_config(jp_server_config: Any) -> Any:
    """Kernels that die stay dead (Jupyter would start an empty one in their place)."""
    jp_server_config.KernelManager.autorestart = False
    return jp_server_config


async def test_killed_kernel_is_a_backend_error(
    no_autorestart_config: Any, api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    r1 = await open_runtime(x=1)
    await kill_kernel(ditto_app, r1.kernel_id)
    status, answer = await api("POST", "checkpoint", {"runtime_id": r1.runtime_id})
    assert (status, answer["error"]) == (502, "BackendError"), answer
    assert "died" in answer["message"]
    _, rows = await api("GET", f"{r1.runtime_id}/checkpoints")
    assert rows["checkpoints"] == []


@pytest.fixture
def e2b_server_config(jp_server_config: Any, fake_e2b: FakeE2BCloud) -> Any:  # noqa: F811
    jp_server_config["DittoJupyterApp"]["default_backend"] = "e2b"
    return jp_server_config


def clear_faults(cloud: FakeE2BCloud, route: str) -> None:
    while cloud.pending_faults(route):
        cloud.take_fault(route)


async def test_provider_refusals_map_to_429_and_502(
    e2b_server_config: Any,
    fake_e2b: FakeE2BCloud,  # noqa: F811
    api: Api,
    open_runtime: OpenRuntime,
) -> None:
    rid = (await open_runtime(x=1)).runtime_id
    fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, 429, times=10)
    status, answer = await api("POST", "checkpoint", {"runtime_id": rid})
    assert (status, answer["error"]) == (429, "RateLimited"), answer
    clear_faults(fake_e2b, ROUTE_CREATE_SNAPSHOT)
    fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, 500, times=10)
    status, answer = await api("POST", "checkpoint", {"runtime_id": rid})
    assert (status, answer["error"]) == (502, "BackendError"), answer
    clear_faults(fake_e2b, ROUTE_CREATE_SNAPSHOT)
    _, rows = await api("GET", f"{rid}/checkpoints")
    assert rows["checkpoints"] == []
    status, answer = await api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200, answer
    status, answer = await api("POST", "close", {"runtime_id": rid})
    assert status == 200 and answer["provider_sandbox_deleted"] is True


def error_types() -> dict[str, type[errors.DittoError]]:
    """Every error type of `core/errors.py` by its code (InvalidRequest is one of them)."""
    found = {
        cls.code: cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.DittoError)
        and cls is not errors.DittoError
        and cls.__module__ == errors.__name__
    }
    found[errors.InvalidRequest.code] = errors.InvalidRequest
    return found


async def test_every_error_code_is_reachable(
    e2b_server_config: Any,
    fake_e2b: FakeE2BCloud,  # noqa: F811
    api: Api,
    ditto_app: DittoJupyterApp,
    open_runtime: OpenRuntime,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each error type is answered to a real request, with its status.

    The codes are not listed here: they come from the error types, so a new error type that
    no request can produce fails this test until a scenario below reaches it.
    """
    answered: dict[str, set[int]] = {}

    async def call(method: str, route: str = "", body: Any = None, **kw: Any) -> Any:
        status, answer = await api(method, route, body, **kw)
        if status >= 400:
            answered.setdefault(answer["error"], set()).add(status)
        return answer

    rt = await open_runtime(x=1)
    rid = rt.runtime_id
    await call("POST", "checkpoint", raw=b"{}")
    await call("GET", "nope")
    await call("GET", f"{rid}/checkpoints/missing")
    cp = await call("POST", "checkpoint", {"runtime_id": rid})
    await call("POST", "undo", {"runtime_id": rid})  # no %autocheckpoint cell to undo: Conflict
    assert ditto_app.service is not None
    replication = ditto_app.service.replication
    with monkeypatch.context() as patch:  # a kernel's own capture whose bytes were collected
        patch.setattr(
            replication, "require_backed", RefusesFirstCapture(replication.require_backed)
        )
        token = await run(
            ditto_app, rt.kernel_id, "print(__import__('os').environ['DITTO_RUNTIME_TOKEN'])"
        )
        detail = await call("GET", f"{rid}/checkpoints/{cp['checkpoint_id']}")
        capture = {"manifest_id": detail["context_manifest_id"]}
        body = {"runtime_id": rid, "runtime_token": token.strip(), "capture": capture}
        await call("POST", "self/checkpoint", body)
    async with sleeping(ditto_app, rt.kernel_id, tmp_path):
        await call("POST", "checkpoint", {"runtime_id": rid})
    for status in (429, 500):  # the provider refuses: rate limit, then its own failure
        fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, status, times=10)
        await call("POST", "checkpoint", {"runtime_id": rid})
        clear_faults(fake_e2b, ROUTE_CREATE_SNAPSHOT)
    store = ditto_app.service.store
    assert isinstance(store, SqlCheckpointStore)
    with disk_full(store):  # the store's disk is full, then its database is held elsewhere
        await call("POST", "checkpoint", {"runtime_id": rid})
    with refusing_writes(store, locked_error()):
        await call("POST", "checkpoint", {"runtime_id": rid})
    await call("POST", "checkpoint/delete-snapshot", {"checkpoint_id": cp["checkpoint_id"]})
    await call("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    await call("POST", "resume", {"runtime_id": rid})
    await call("POST", "pause", {"runtime_id": rid})
    await call("POST", "checkpoint", {"runtime_id": rid})
    await call("POST", "close", {"runtime_id": rid})
    await call("POST", "checkpoint", {"runtime_id": rid})
    with monkeypatch.context() as patch:  # the extension off (tests/server/test_bad_settings)
        settings = ditto_app.serverapp.web_app.settings
        patch.setitem(settings, CONFIGURATION_ERROR, "store_url (DITTO_STORE_URL) is wrong")
        await call("GET", "")

    types = error_types()
    assert len(types) >= 10
    unreached = sorted(set(types) - set(answered))
    assert not unreached, f"no request here produced {unreached}; add a scenario that does"
    for code, cls in types.items():
        assert answered[code] == {cls.http_status}, (code, answered[code])

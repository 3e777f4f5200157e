"""The E2B backend's whole life cycle on the real `e2b` SDK, against the FAKE E2B cloud.

The fake (tests/fakes/e2b_cloud.py) serves E2B's control-plane REST API and the envd
Connect-RPC services on 127.0.0.1; each fake sandbox is a real directory and commands are
real subprocesses, so what the backend reads back is what the SDK really moved.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_jupyter.backends.base import BackendLocator, BackendProvider
from ditto_jupyter.backends.e2b import E2B_KIND, E2BBackend, E2BConfig, E2BProvider, _normalize
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import (
    BackendError,
    InvalidRequest,
    RateLimited,
    UnsupportedBackend,
)
from ditto_jupyter.core.models import BackendCheckpointRef
from tests.fakes.e2b_cloud import (
    ROUTE_CONNECT_SANDBOX,
    ROUTE_CREATE_SANDBOX,
    ROUTE_CREATE_SNAPSHOT,
    ROUTE_DELETE_TEMPLATE,
    ROUTE_FILES_READ,
    ROUTE_FILES_WRITE,
    ROUTE_FS_STAT,
    ROUTE_KILL_SANDBOX,
    ROUTE_PROCESS_START,
    FakeE2BCloud,
)

pytest_plugins = ["tests.fakes.e2b_fixtures"]  # the `fake_e2b` fixture

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine on a fresh event loop (the SDK's transports are loop-independent)."""
    return asyncio.run(coro)


def provider(**overrides: Any) -> E2BProvider:
    """A provider with no SDK retries unless asked, so an injected fault surfaces at once."""
    return E2BProvider(E2BConfig(**{"retries": 0, **overrides}))


async def make(prov: E2BProvider, runtime_id: str = "rt-1") -> E2BBackend:
    backend = await prov.create(runtime_id)
    assert isinstance(backend, E2BBackend)
    return backend


# ---- the life cycle -----------------------------------------------------------------------


def test_protocols_are_implemented() -> None:
    prov = E2BProvider()
    assert isinstance(prov, BackendProvider)
    assert prov.kind == E2B_KIND
    ref = BackendCheckpointRef(backend_kind="e2b", backend_id="x", provider_snapshot_id="s")
    assert prov.referenced_manifests(ref) == []


def test_what_each_step_does_at_e2b(fake_e2b: FakeE2BCloud) -> None:
    """The life cycle as E2B sees it (what every backend does is `BackendContract`'s, run on
    E2B in test_backend_contract.py): a sandbox per backend, files in its workspace folder,
    a provider snapshot per checkpoint, a new sandbox per checkout, sandboxes killed on
    release."""

    async def scenario() -> None:
        prov = provider()
        parent = await make(prov, "rt-parent")
        assert parent.kind == "e2b" and parent.local_path is None
        assert fake_e2b.running_sandbox_ids() == [parent.backend_id]
        await parent.write_bytes("notes/a.txt", b"alpha\nbeta\n")
        home = fake_e2b.sandbox_home(parent.backend_id)
        assert (home / "workspace" / "notes" / "a.txt").read_bytes() == b"alpha\nbeta\n"
        tmp = await parent.temp_path(".json")
        assert (home / "workspace" / tmp).is_file()

        ref = await parent.checkpoint()
        assert ref.provider_snapshot_id in fake_e2b.snapshot_ids()
        assert ref.details["workdir"] == "workspace"
        assert prov.referenced_manifests(ref) == []  # E2B keeps its snapshots itself

        child = await prov.checkout(ref, "rt-child")
        assert sorted(fake_e2b.running_sandbox_ids()) == sorted(
            [parent.backend_id, child.backend_id]
        )
        assert await prov.delete_snapshot(ref) is True
        assert ref.provider_snapshot_id not in fake_e2b.snapshot_ids()

        assert await child.release() is True
        assert child.backend_id not in fake_e2b.running_sandbox_ids()
        assert child.backend_id in fake_e2b.killed
        with pytest.raises(BackendError, match="released"):
            await child.read_bytes("notes/a.txt")
        assert await parent.release() is True
        assert fake_e2b.running_sandbox_ids() == []

    run(scenario())


def test_attach_after_restart(fake_e2b: FakeE2BCloud) -> None:
    """A new provider (as in a new process, on a new event loop) re-attaches by locator."""

    async def first_process() -> BackendLocator:
        backend = await make(provider(workdir="proj"))
        await backend.write_bytes("keep.txt", b"kept")
        return backend.locator()

    locator = run(first_process())
    assert locator.kind == "e2b" and locator.details["workdir"] == "proj"

    async def second_process() -> None:
        prov = provider()  # default workdir differs: the locator's workdir wins
        backend = await prov.attach(locator)
        assert backend.backend_id == locator.backend_id
        assert await backend.read_bytes("keep.txt") == b"kept"
        res = await backend.exec("cat keep.txt")
        assert res.stdout == "kept"
        assert await backend.release() is True
        with pytest.raises(BackendError, match="not found"):
            await prov.attach(locator)

    run(second_process())
    assert fake_e2b.count_calls(ROUTE_CONNECT_SANDBOX, 200) == 1
    assert fake_e2b.count_calls(ROUTE_CONNECT_SANDBOX, 404) == 1


def test_exec_timeout_kills_the_command(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider())
        script = "echo $$ > shell.pid; sleep 30 & echo started; wait; echo never"
        res = await backend.exec(script, timeout=0.5)
        assert res.timed_out is True
        assert res.exit_code != 0
        # the result came back although `sleep 30` held the output pipe: the whole process
        # group was killed, and the shell itself is gone (reaped before the end event)
        assert res.stdout == "started\n"
        shell_pid = int((await backend.read_bytes("shell.pid")).decode())
        assert not _process_alive(shell_pid)
        assert fake_e2b.sandboxes[backend.backend_id].processes == {}
        assert (await backend.exec("echo after")).stdout == "after\n"

    run(scenario())


def _process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_exec_output_is_capped(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider(max_output_bytes=1000))
        res = await backend.exec("head -c 5000 /dev/zero | tr '\\0' a; echo -n e >&2")
        assert res.exit_code == 0
        assert res.truncated is True
        assert res.stdout == "a" * 1000
        assert res.stderr == "e"

    run(scenario())


def test_search_and_export_details(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider())
        for i in range(5):
            await backend.write_bytes(f"src/m{i}.py", f"x = {i}\ny = {i}\n".encode())
        await backend.write_bytes("src/blob.bin", b"\x00\x01x = binary\x00")
        hits = await backend.search(r"x = \d", "src")
        assert sorted((m.path, m.line_number) for m in hits) == [
            (f"src/m{i}.py", 1) for i in range(5)
        ]
        capped = await backend.search(r"[xy] = \d", max_results=3)
        assert [(m.path, m.line) for m in capped] == [
            ("src/m0.py", "x = 0"),
            ("src/m0.py", "y = 0"),
            ("src/m1.py", "x = 1"),
        ]
        with pytest.raises(BackendError, match="stat of 'nope'"):
            await backend.search("x", "nope")
        assert await backend.search("y = 4", "src/m4.py") == [
            hits[0].__class__(path="src/m4.py", line_number=2, line="y = 4")
        ]
        with pytest.raises(InvalidRequest, match="not a valid regex"):
            await backend.search("(unclosed")
        with pytest.raises(InvalidRequest, match="max_results"):
            await backend.search("x", max_results=0)
        # export of the whole workspace holds every file; a missing path is a clear error
        with tarfile.open(fileobj=io.BytesIO(await backend.export())) as tar:
            names = {n.lstrip("./") for n in tar.getnames()}
        assert {f"src/m{i}.py" for i in range(5)} <= names
        with pytest.raises(BackendError, match="stat of 'missing'"):
            await backend.export("missing")
        # the export's temp archive was removed from the sandbox
        box = fake_e2b.sandboxes[backend.backend_id]
        assert list(box.tmp.iterdir()) == []

    run(scenario())


def test_bad_paths_are_refused_before_any_provider_call(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider())
        before = len(fake_e2b.calls)
        for bad in ("/etc/passwd", "../outside", "a/../../b", "~/x", "bad\x00name", ""):
            with pytest.raises(InvalidRequest):
                await backend.read_bytes(bad)
            with pytest.raises(InvalidRequest):
                await backend.write_bytes(bad, b"x")
        with pytest.raises(InvalidRequest, match="cwd"):
            await backend.exec("true", cwd="../..")
        with pytest.raises(InvalidRequest, match="suffix"):
            await backend.temp_path("/x")
        with pytest.raises(InvalidRequest, match="workspace root"):
            await backend.write_bytes(".", b"x")
        assert len(fake_e2b.calls) == before

    run(scenario())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "c.txt"]), min_size=1, max_size=6))
def test_normalize_never_escapes(parts: list[str]) -> None:
    path = "/".join(parts)
    try:
        normal = _normalize(path)
    except InvalidRequest:
        return
    assert not normal.startswith("/") and normal != ".." and not normal.startswith("../")
    assert ".." not in normal.split("/")


def test_bad_config_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="workdir"):
        E2BConfig(workdir="/abs")
    with pytest.raises(InvalidRequest, match="retries"):
        E2BConfig(retries=-1)
    with pytest.raises(InvalidRequest, match="template"):
        E2BConfig(template="")


def test_foreign_refs_are_unsupported(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        prov = provider()
        local = BackendCheckpointRef(backend_kind="local", backend_id="w", provider_snapshot_id="m")
        with pytest.raises(UnsupportedBackend):
            await prov.checkout(local, "rt")
        with pytest.raises(UnsupportedBackend):
            await prov.delete_snapshot(local)
        with pytest.raises(UnsupportedBackend):
            await prov.attach(BackendLocator(kind="local", backend_id="w"))
        assert fake_e2b.calls == []

    run(scenario())


# ---- injected provider failures ----------------------------------------------------------


def test_create_rate_limited_then_retried(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        fake_e2b.fail_next(ROUTE_CREATE_SANDBOX, 429, message="concurrent sandboxes: 20 of 20")
        with pytest.raises(RateLimited, match="concurrent sandboxes: 20 of 20") as info:
            await provider().create("rt")
        assert info.value.http_status == 429 and info.value.code == "RateLimited"
        assert fake_e2b.running_sandbox_ids() == []
        # with SDK retries on, one 429 is absorbed (Retry-After: 0) and the create succeeds
        fake_e2b.fail_next(ROUTE_CREATE_SANDBOX, 429)
        backend = await provider(retries=2).create("rt")
        assert fake_e2b.running_sandbox_ids() == [backend.backend_id]
        assert fake_e2b.count_calls(ROUTE_CREATE_SANDBOX, 429) == 2

    run(scenario())


def test_create_server_error_and_unknown_template(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        fake_e2b.fail_next(ROUTE_CREATE_SANDBOX, 500, message="placement failed on node 7")
        with pytest.raises(BackendError, match="placement failed on node 7") as info:
            await provider().create("rt")
        assert info.value.http_status == 502
        with pytest.raises(BackendError, match="template 'no-such-template' not found"):
            await provider(template="no-such-template").create("rt")
        assert fake_e2b.running_sandbox_ids() == []

    run(scenario())


def test_failed_workspace_setup_kills_the_new_sandbox(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        fake_e2b.fail_next(ROUTE_FS_STAT, 500, message="envd stat broke")
        with pytest.raises(BackendError, match="envd stat broke"):
            await provider().create("rt")
        assert fake_e2b.running_sandbox_ids() == []
        assert len(fake_e2b.killed) == 1

    run(scenario())


def test_checkpoint_failures_leave_things_as_they_were(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        prov = provider()
        backend = await make(prov)
        await backend.write_bytes("f.txt", b"v1")
        fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, 500, message="snapshot storage unavailable")
        with pytest.raises(BackendError, match="snapshot storage unavailable"):
            await backend.checkpoint()
        fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, 429)
        with pytest.raises(RateLimited, match="injected rate limit"):
            await backend.checkpoint()
        fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, 404, message="sandbox paused elsewhere")
        with pytest.raises(BackendError, match="not found"):
            await backend.checkpoint()
        assert fake_e2b.snapshot_ids() == []
        assert await backend.read_bytes("f.txt") == b"v1"
        ref = await backend.checkpoint()
        assert fake_e2b.snapshot_ids() == [ref.provider_snapshot_id]

    run(scenario())


def test_checkout_failures(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        prov = provider()
        backend = await make(prov)
        await backend.write_bytes("f.txt", b"v1")
        ref = await backend.checkpoint()
        fake_e2b.fail_next(ROUTE_CREATE_SANDBOX, 404, message="snapshot build missing")
        with pytest.raises(BackendError, match="snapshot build missing"):
            await prov.checkout(ref, "rt-child")
        fake_e2b.fail_next(ROUTE_CREATE_SANDBOX, 429)
        with pytest.raises(RateLimited):
            await prov.checkout(ref, "rt-child")
        assert fake_e2b.running_sandbox_ids() == [backend.backend_id]
        # the snapshot is still there and a retry works
        child = await prov.checkout(ref, "rt-child")
        assert await child.read_bytes("f.txt") == b"v1"
        # a snapshot deleted behind our back: E2B answers 404 for the template
        assert await prov.delete_snapshot(ref) is True
        with pytest.raises(BackendError, match="not found"):
            await prov.checkout(ref, "rt-child-2")

    run(scenario())


def test_delete_snapshot_failures(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        prov = provider()
        backend = await make(prov)
        ref = await backend.checkpoint()
        fake_e2b.fail_next(ROUTE_DELETE_TEMPLATE, 500, message="template store is read-only")
        with pytest.raises(BackendError, match="template store is read-only"):
            await prov.delete_snapshot(ref)
        fake_e2b.fail_next(ROUTE_DELETE_TEMPLATE, 429)
        with pytest.raises(RateLimited):
            await prov.delete_snapshot(ref)
        assert fake_e2b.snapshot_ids() == [ref.provider_snapshot_id]
        fake_e2b.fail_next(ROUTE_DELETE_TEMPLATE, 404)
        assert await prov.delete_snapshot(ref) is False  # a 404 means already deleted
        assert await prov.delete_snapshot(ref) is True
        assert fake_e2b.snapshot_ids() == []

    run(scenario())


def test_release_failures_keep_the_sandbox(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider())
        fake_e2b.fail_next(ROUTE_KILL_SANDBOX, 429)
        with pytest.raises(RateLimited):
            await backend.release()
        fake_e2b.fail_next(ROUTE_KILL_SANDBOX, 500, message="kill queue full")
        with pytest.raises(BackendError, match="kill queue full"):
            await backend.release()
        assert fake_e2b.running_sandbox_ids() == [backend.backend_id]
        assert (await backend.exec("echo alive")).stdout == "alive\n"
        fake_e2b.fail_next(ROUTE_KILL_SANDBOX, 404)
        assert await backend.release() is False  # E2B says it is already gone
        assert await backend.release() is False

    run(scenario())


def test_envd_failures_map_and_change_nothing(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider())
        await backend.write_bytes("f.txt", b"v1")
        fake_e2b.fail_next(ROUTE_FILES_WRITE, 429)
        with pytest.raises(RateLimited, match="injected rate limit"):
            await backend.write_bytes("f.txt", b"v2")
        fake_e2b.fail_next(ROUTE_FILES_WRITE, 500, message="disk controller reset")
        with pytest.raises(BackendError, match="disk controller reset"):
            await backend.write_bytes("f.txt", b"v2")
        fake_e2b.fail_next(ROUTE_FILES_READ, 500, message="read path broken")
        with pytest.raises(BackendError, match="read path broken"):
            await backend.read_bytes("f.txt")
        fake_e2b.fail_next(ROUTE_FS_STAT, 404, message="vanished")
        with pytest.raises(BackendError, match="vanished"):
            await backend.stat("f.txt")
        fake_e2b.fail_next(ROUTE_PROCESS_START, 429)
        with pytest.raises(RateLimited):
            await backend.exec("echo hi > g.txt")
        fake_e2b.fail_next(ROUTE_PROCESS_START, 500, message="process table full")
        with pytest.raises(BackendError, match="process table full"):
            await backend.exec("echo hi > g.txt")
        # nothing changed
        assert await backend.read_bytes("f.txt") == b"v1"
        with pytest.raises(BackendError, match="not found"):
            await backend.stat("g.txt")
        home = fake_e2b.sandbox_home(backend.backend_id) / "workspace"
        assert sorted(p.name for p in home.iterdir()) == ["f.txt"]

    run(scenario())


def test_attach_failures(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider())
        locator = backend.locator()
        fake_e2b.fail_next(ROUTE_CONNECT_SANDBOX, 500, message="orchestrator down")
        with pytest.raises(BackendError, match="orchestrator down"):
            await provider().attach(locator)
        fake_e2b.fail_next(ROUTE_CONNECT_SANDBOX, 429)
        with pytest.raises(RateLimited):
            await provider().attach(locator)
        again = await provider().attach(locator)
        assert await again.exec("true") is not None

    run(scenario())


def test_sandbox_killed_behind_our_back(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider())
        await fake_e2b_kill(fake_e2b, backend.backend_id)
        with pytest.raises(BackendError, match=r"not running|not found"):
            await backend.read_bytes("x")
        assert await backend.release() is False

    run(scenario())


async def fake_e2b_kill(cloud: FakeE2BCloud, sandbox_id: str) -> None:
    """Kill a sandbox through the fake's own API, as the E2B dashboard would."""
    other = E2BProvider(E2BConfig(retries=0))
    victim = await other.attach(BackendLocator(kind="e2b", backend_id=sandbox_id))
    assert await victim.release() is True
    assert sandbox_id not in cloud.running_sandbox_ids()


def test_workspace_can_be_the_home_directory(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        backend = await make(provider(workdir="."))
        await backend.write_bytes("top.txt", b"t")
        assert backend.root == str(fake_e2b.sandbox_home(backend.backend_id))
        assert (fake_e2b.sandbox_home(backend.backend_id) / "top.txt").read_bytes() == b"t"
        assert (await backend.exec("pwd")).stdout.strip() == backend.root

    run(scenario())


def test_wrong_api_key_is_a_backend_error(fake_e2b: FakeE2BCloud) -> None:
    async def scenario() -> None:
        with pytest.raises(BackendError, match="Unauthorized"):
            await provider(api_key="e2b_wrong").create("rt")
        assert fake_e2b.running_sandbox_ids() == []

    run(scenario())


def test_fake_serves_the_sdk_defaults(fake_e2b: FakeE2BCloud) -> None:
    """The fake answers what the SDK sends by default (multipart upload, list, rename...)."""
    from e2b import AsyncSandbox
    from e2b.exceptions import FileNotFoundException, SandboxNotFoundException

    async def scenario() -> None:
        sandbox = await AsyncSandbox.create(timeout=120)
        assert await sandbox.is_running()
        info = await sandbox.files.write("d/one.txt", "one")  # multipart/form-data
        assert info.name == "one.txt"
        await sandbox.files.write_files(
            [{"path": "d/two.txt", "data": b"2"}, {"path": "d/e/three.txt", "data": b"3"}]
        )
        names = sorted(e.name for e in await sandbox.files.list("d", depth=2))
        assert names == ["e", "one.txt", "three.txt", "two.txt"]
        await sandbox.files.rename("d/one.txt", "d/uno.txt")
        assert await sandbox.files.read("d/uno.txt") == "one"
        assert not await sandbox.files.exists("d/one.txt")
        await sandbox.files.remove("d/e")
        with pytest.raises(FileNotFoundException):
            await sandbox.files.read("d/e/three.txt")
        listed = await AsyncSandbox.list().next_items()
        assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
        assert (await sandbox.get_info()).sandbox_id == sandbox.sandbox_id
        assert await sandbox.kill() is True
        assert not await sandbox.is_running()
        with pytest.raises(SandboxNotFoundException):
            await AsyncSandbox.connect(sandbox.sandbox_id, timeout=60)

    run(scenario())


# ---- the E2B backend under the RuntimeService ------------------------------------------


def test_runtime_service_on_e2b(fake_e2b: FakeE2BCloud, tmp_path: Path) -> None:
    """Checkpoint, checkout, pause, resume, close and delete-snapshot of E2B runtimes."""
    from ditto_jupyter.wiring import open_runtime_service
    from tests.fakes.fake_context_capture import InMemoryContextCapture

    def open_service() -> RuntimeService:
        return open_runtime_service(
            tmp_path / "data",
            context_factory=InMemoryContextCapture,
            extra_providers={"e2b": provider()},
            default_backend="e2b",
        )

    service = open_service()

    async def first_process() -> tuple[str, str, str]:
        rid = (await service.create_runtime("nb.ipynb", "ana")).runtime_id
        backend = service.backends.get(rid)
        assert backend is not None and backend.kind == "e2b"
        await backend.write_bytes("model.txt", b"v1")
        first = await service.checkpoint(rid, "one")
        snaps = fake_e2b.snapshot_ids()
        assert len(snaps) == 1
        # clean backend: the second checkpoint reuses the provider snapshot
        await service.checkpoint(rid, "two")
        assert fake_e2b.snapshot_ids() == snaps
        # checkout: a child runtime on a new sandbox made from the snapshot
        child = await service.checkout(first.checkpoint_id, conversation_id="branch.ipynb")
        child_rid = child.runtime.runtime_id
        child_backend = service.backends.get(child_rid)
        assert child_backend is not None
        assert child_backend.backend_id != backend.backend_id
        assert await child_backend.read_bytes("model.txt") == b"v1"
        await child_backend.write_bytes("model.txt", b"child")
        assert await backend.read_bytes("model.txt") == b"v1"
        assert len(fake_e2b.running_sandbox_ids()) == 2
        # pause: the snapshot is reused (the sandbox is clean), then the sandbox is killed
        parent_sandbox = backend.backend_id
        paused = await service.pause(rid)
        assert paused.runtime.status.value == "paused"
        assert fake_e2b.running_sandbox_ids() == [child_backend.backend_id]
        assert parent_sandbox in fake_e2b.killed
        assert fake_e2b.snapshot_ids() == snaps
        return rid, child_rid, first.checkpoint_id

    rid, child_rid, first_cp = run(first_process())
    service.close_store()

    # a new process over the same store: resume the paused runtime, re-attach the child
    service = open_service()

    async def second_process() -> None:
        resumed = await service.resume(rid)
        assert resumed.runtime.runtime_id == rid
        backend = service.backends.get(rid)
        assert backend is not None and backend.kind == "e2b"
        assert await backend.read_bytes("model.txt") == b"v1"
        binding = service.store.get_binding(child_rid)
        assert binding is not None and binding.kind == "e2b"
        child_backend = await service.backends.attach(
            child_rid, BackendLocator(binding.kind, binding.backend_id, dict(binding.details))
        )
        assert await child_backend.read_bytes("model.txt") == b"child"
        # close deletes the child's sandbox (no other runtime is bound to it); its context
        # did not survive the restart, so there is no final checkpoint to take: discard
        closed = await service.close(child_rid, discard=True)
        assert closed.provider_sandbox_deleted is True
        assert child_backend.backend_id not in fake_e2b.running_sandbox_ids()
        # delete-snapshot deletes the provider snapshot once; then it is already deleted
        deleted = await service.delete_snapshot(first_cp)
        assert deleted.deleted is True and deleted.already_deleted is False
        assert fake_e2b.snapshot_ids() == []
        again = await service.delete_snapshot(first_cp)
        assert again.already_deleted is True
        await service.close(rid)
        assert fake_e2b.running_sandbox_ids() == []

    run(second_process())
    service.close_store()


def test_unreachable_e2b_is_a_backend_error(fake_e2b: FakeE2BCloud) -> None:
    """A stopped control plane: connection refused becomes BackendError with the reason."""
    fake_e2b.stop()

    async def scenario() -> None:
        with pytest.raises(BackendError, match="Connection refused"):
            await provider().create("rt")

    run(scenario())

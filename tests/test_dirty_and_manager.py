"""DirtyTrackingBackend (every rule of the seed's "Dirty Tracking") and BackendManager."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.backends.base import Backend, BackendLocator, ExecResult
from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.backends.local import LocalBackend, LocalProvider
from ditto_jupyter.backends.manager import BackendManager, ReleaseResult
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import BackendError, InvalidRequest, UnsupportedBackend
from ditto_jupyter.core.models import BackendCheckpointRef

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class CountingLocalBackend(LocalBackend):
    """A real local workspace that counts the snapshots it is asked for."""

    checkpoints = 0
    gate: asyncio.Event | None = None

    async def checkpoint(self) -> BackendCheckpointRef:
        type(self).checkpoints += 1
        if self.gate is not None:
            await self.gate.wait()
        return await super().checkpoint()


@pytest.fixture
def provider(tmp_path: Path) -> LocalProvider:
    return LocalProvider(tmp_path / "ws", BlobStore(tmp_path / "blobs", durable=False))


@pytest.fixture
def inner(provider: LocalProvider) -> CountingLocalBackend:
    CountingLocalBackend.checkpoints = 0
    CountingLocalBackend.gate = None
    created = run(provider.create("rt"))
    return CountingLocalBackend(provider, created.backend_id, created.local_path)


def clean_wrapper(inner: CountingLocalBackend) -> DirtyTrackingBackend:
    """A wrapper that has just taken a snapshot (clean, with a last ref)."""
    wrapper = DirtyTrackingBackend(inner)
    run(wrapper.checkpoint())
    assert not wrapper.dirty
    CountingLocalBackend.checkpoints = 0
    return wrapper


# ---- DirtyTrackingBackend ----------------------------------------------------------------


def test_wrapper_is_a_backend(inner: CountingLocalBackend) -> None:
    wrapper = DirtyTrackingBackend(inner)
    assert isinstance(wrapper, Backend)
    assert wrapper.backend_id == inner.backend_id and wrapper.kind == "local"
    assert wrapper.local_path == inner.local_path and wrapper.inner is inner
    assert wrapper.locator() == inner.locator()


def test_a_new_wrapper_starts_dirty_without_a_ref(inner: CountingLocalBackend) -> None:
    wrapper = DirtyTrackingBackend(inner)
    assert wrapper.dirty and wrapper.last_ref is None
    ref = run(wrapper.checkpoint())
    assert CountingLocalBackend.checkpoints == 1
    assert wrapper.last_ref == ref and not wrapper.dirty


def test_a_wrapper_given_a_ref_starts_clean_and_reuses_it(inner: CountingLocalBackend) -> None:
    given = BackendCheckpointRef(
        backend_kind="local", backend_id=inner.backend_id, provider_snapshot_id="f" * 64
    )
    wrapper = DirtyTrackingBackend(inner, last_ref=given)
    assert not wrapper.dirty
    assert run(wrapper.checkpoint()) is given
    assert CountingLocalBackend.checkpoints == 0


def test_clean_checkpoint_reuses_the_ref_without_touching_inner(
    inner: CountingLocalBackend,
) -> None:
    wrapper = clean_wrapper(inner)
    ref = wrapper.last_ref
    for _ in range(3):
        assert run(wrapper.checkpoint()) is ref
    assert CountingLocalBackend.checkpoints == 0


def test_dirty_checkpoint_takes_a_new_snapshot_and_clears_the_flag(
    inner: CountingLocalBackend,
) -> None:
    wrapper = clean_wrapper(inner)
    first = wrapper.last_ref
    run(wrapper.write_bytes("a.txt", b"a"))
    assert wrapper.dirty
    second = run(wrapper.checkpoint())
    assert CountingLocalBackend.checkpoints == 1
    assert first is not None and second.provider_snapshot_id != first.provider_snapshot_id
    assert wrapper.last_ref == second and not wrapper.dirty


def test_successful_write_bytes_marks_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    run(wrapper.write_bytes("f", b"x"))
    assert wrapper.dirty


def test_failed_write_bytes_does_not_mark_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    run(wrapper.write_bytes("file", b"x"))
    run(wrapper.checkpoint())
    with pytest.raises(InvalidRequest):
        run(wrapper.write_bytes("../escape", b"x"))
    with pytest.raises(BackendError):
        run(wrapper.write_bytes("file/below-a-file", b"x"))
    assert not wrapper.dirty


def test_successful_create_dir_all_marks_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    run(wrapper.create_dir_all("a/b"))
    assert wrapper.dirty


def test_failed_create_dir_all_does_not_mark_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    (inner.local_path / "plain").write_bytes(b"")
    wrapper.mark_dirty()
    run(wrapper.checkpoint())
    with pytest.raises(BackendError):
        run(wrapper.create_dir_all("plain"))
    assert not wrapper.dirty


def test_temp_path_marks_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    run(wrapper.temp_path(".txt"))
    assert wrapper.dirty


def test_failed_temp_path_does_not_mark_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    with pytest.raises(InvalidRequest):
        run(wrapper.temp_path("bad/suffix"))
    assert not wrapper.dirty


def test_exec_with_zero_exit_marks_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    assert run(wrapper.exec("true")).exit_code == 0
    assert wrapper.dirty


def test_exec_with_non_zero_exit_marks_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    result = run(wrapper.exec("exit 7"))
    assert isinstance(result, ExecResult) and result.exit_code == 7
    assert wrapper.dirty


def test_exec_that_times_out_still_returns_a_result_and_marks_dirty(
    inner: CountingLocalBackend,
) -> None:
    wrapper = clean_wrapper(inner)
    assert run(wrapper.exec("sleep 10", timeout=0.2)).timed_out
    assert wrapper.dirty


def test_exec_that_raises_does_not_mark_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    with pytest.raises(InvalidRequest):
        run(wrapper.exec("true", cwd="no-such-dir"))
    assert not wrapper.dirty


@pytest.mark.parametrize("operation", ["stat", "read_bytes", "search", "export"])
def test_read_only_operations_never_mark_dirty(inner: CountingLocalBackend, operation: str) -> None:
    (inner.local_path / "f.txt").write_bytes(b"needle\n")
    wrapper = clean_wrapper(inner)

    async def succeed() -> object:
        if operation == "stat":
            return await wrapper.stat("f.txt")
        if operation == "read_bytes":
            return await wrapper.read_bytes("f.txt")
        if operation == "search":
            return await wrapper.search("needle")
        return await wrapper.export(".")

    async def fail() -> object:
        if operation == "stat":
            return await wrapper.stat("missing")
        if operation == "read_bytes":
            return await wrapper.read_bytes("missing")
        if operation == "search":
            return await wrapper.search("(bad regex")
        return await wrapper.export("missing")

    assert run(succeed())  # the operation really ran and returned something
    with pytest.raises((InvalidRequest, BackendError)):
        run(fail())
    assert not wrapper.dirty
    assert run(wrapper.checkpoint()) is wrapper.last_ref
    assert CountingLocalBackend.checkpoints == 0


def test_mark_dirty_forces_a_new_snapshot(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    first = wrapper.last_ref
    (inner.local_path / "written-by-a-cell").write_bytes(b"x")  # a notebook cell ran
    wrapper.mark_dirty()
    second = run(wrapper.checkpoint())
    assert CountingLocalBackend.checkpoints == 1
    assert first is not None and second.provider_snapshot_id != first.provider_snapshot_id


def test_a_write_during_a_snapshot_keeps_the_backend_dirty(inner: CountingLocalBackend) -> None:
    async def scenario() -> tuple[bool, int]:
        wrapper = DirtyTrackingBackend(inner)
        gate = asyncio.Event()
        CountingLocalBackend.gate = gate
        snapshot = asyncio.ensure_future(wrapper.checkpoint())
        await asyncio.sleep(0)
        await wrapper.write_bytes("late.txt", b"written while snapshotting")
        gate.set()
        await snapshot
        CountingLocalBackend.gate = None
        dirty_after = wrapper.dirty
        await wrapper.checkpoint()
        return dirty_after, CountingLocalBackend.checkpoints

    dirty_after, count = run(scenario())
    assert dirty_after
    assert count == 2


def test_concurrent_checkpoints_share_one_snapshot(inner: CountingLocalBackend) -> None:
    async def scenario() -> list[BackendCheckpointRef]:
        wrapper = DirtyTrackingBackend(inner)
        return list(await asyncio.gather(*(wrapper.checkpoint() for _ in range(5))))

    refs = run(scenario())
    assert CountingLocalBackend.checkpoints == 1
    assert all(ref == refs[0] for ref in refs)


def test_a_failed_snapshot_leaves_the_backend_dirty(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    first = wrapper.last_ref
    run(wrapper.write_bytes("x", b"x"))
    inner._released = True  # the workspace handle is gone: checkpoint fails
    with pytest.raises(BackendError):
        run(wrapper.checkpoint())
    assert wrapper.dirty and wrapper.last_ref is first


def test_forget_snapshot(inner: CountingLocalBackend) -> None:
    wrapper = clean_wrapper(inner)
    ref = wrapper.last_ref
    assert ref is not None and ref.provider_snapshot_id is not None
    assert not wrapper.forget_snapshot("other")
    assert not wrapper.dirty
    assert wrapper.forget_snapshot(ref.provider_snapshot_id)
    assert wrapper.dirty and wrapper.last_ref is None


# ---- BackendManager -----------------------------------------------------------------------


class FakeSandbox:
    """A fake remote sandbox for manager tests: files live in a real local workspace,
    release counts and reports a deleted provider sandbox, like E2B's kill."""

    def __init__(self, provider: FakeSandboxProvider, workspace: LocalBackend) -> None:
        self.provider = provider
        self.workspace = workspace

    @property
    def backend_id(self) -> str:
        return "sbx-" + self.workspace.backend_id

    @property
    def kind(self) -> str:
        return "fake-sandbox"

    @property
    def local_path(self) -> Path | None:
        return None

    def locator(self) -> BackendLocator:
        return BackendLocator(kind=self.kind, backend_id=self.backend_id)

    async def stat(self, path: str) -> Any:
        return await self.workspace.stat(path)

    async def read_bytes(self, path: str) -> bytes:
        return await self.workspace.read_bytes(path)

    async def write_bytes(self, path: str, data: bytes) -> None:
        await self.workspace.write_bytes(path, data)

    async def create_dir_all(self, path: str) -> None:
        await self.workspace.create_dir_all(path)

    async def temp_path(self, suffix: str = "") -> str:
        return await self.workspace.temp_path(suffix)

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        return await self.workspace.exec(command, cwd=cwd, timeout=timeout, env=env)

    async def search(self, pattern: str, path: str = ".", *, max_results: int = 1000) -> Any:
        return await self.workspace.search(pattern, path, max_results=max_results)

    async def export(self, path: str = ".") -> bytes:
        return await self.workspace.export(path)

    async def checkpoint(self) -> BackendCheckpointRef:
        self.provider.snapshots_taken += 1
        local_ref = await self.workspace.checkpoint()
        snapshot_id = f"snap-{self.provider.snapshots_taken}"
        self.provider.snapshots[snapshot_id] = local_ref
        return BackendCheckpointRef(
            backend_kind=self.kind, backend_id=self.backend_id, provider_snapshot_id=snapshot_id
        )

    async def release(self) -> bool:
        if self.provider.fail_next_release:
            self.provider.fail_next_release = False
            raise BackendError("the fake provider refused to kill the sandbox")
        self.provider.releases.append(self.backend_id)
        return await self.workspace.release()


class FakeSandboxProvider:
    """A fake provider of remote sandboxes that counts releases and snapshot deletions."""

    kind = "fake-sandbox"

    def __init__(self, local: LocalProvider) -> None:
        self.local = local
        self.releases: list[str] = []
        self.snapshots: dict[str, BackendCheckpointRef] = {}
        self.snapshots_taken = 0
        self.deleted: list[str] = []
        self.fail_next_release = False

    async def create(self, runtime_id: str) -> FakeSandbox:
        await asyncio.sleep(0)  # a remote call: other tasks run meanwhile
        return FakeSandbox(self, await self.local.create(runtime_id))

    async def checkout(self, ref: BackendCheckpointRef, runtime_id: str) -> FakeSandbox:
        assert ref.provider_snapshot_id is not None
        local_ref = self.snapshots[ref.provider_snapshot_id]
        return FakeSandbox(self, await self.local.checkout(local_ref, runtime_id))

    async def attach(self, locator: BackendLocator) -> FakeSandbox:
        await asyncio.sleep(0)
        inner = locator.backend_id.removeprefix("sbx-")
        return FakeSandbox(self, await self.local.attach(BackendLocator("local", inner)))

    async def delete_snapshot(self, ref: BackendCheckpointRef) -> bool:
        assert ref.provider_snapshot_id is not None
        if self.snapshots.pop(ref.provider_snapshot_id, None) is None:
            return False
        self.deleted.append(ref.provider_snapshot_id)
        return True

    def referenced_manifests(self, ref: BackendCheckpointRef) -> list[str]:
        return []


@pytest.fixture
def fake(provider: LocalProvider) -> FakeSandboxProvider:
    return FakeSandboxProvider(provider)


@pytest.fixture
def manager(provider: LocalProvider, fake: FakeSandboxProvider) -> BackendManager:
    return BackendManager({"local": provider, "fake-sandbox": fake})


def test_create_binds_the_runtime(manager: BackendManager) -> None:
    backend = run(manager.create("rt-1", "local"))
    assert isinstance(backend, DirtyTrackingBackend) and backend.dirty
    assert manager.get("rt-1") is backend
    assert manager.runtimes_bound_to(backend.backend_id) == {"rt-1"}
    assert manager.get("rt-2") is None
    with pytest.raises(InvalidRequest, match="already bound"):
        run(manager.create("rt-1", "local"))
    with pytest.raises(UnsupportedBackend, match="no backend provider"):
        run(manager.create("rt-3", "conch"))
    assert manager.get("rt-3") is None
    assert [manager.provider(kind).kind for kind in ("fake-sandbox", "local")] == [
        "fake-sandbox",
        "local",
    ]


def test_provider_lookup(manager: BackendManager, fake: FakeSandboxProvider) -> None:
    assert manager.provider("fake-sandbox") is fake
    with pytest.raises(UnsupportedBackend):
        manager.provider("e2b")
    with pytest.raises(InvalidRequest):
        BackendManager({"e2b": fake})


def test_shared_backend_is_released_only_by_the_last_runtime(
    manager: BackendManager, fake: FakeSandboxProvider
) -> None:
    backend = run(manager.create("rt-1", "fake-sandbox"))
    manager.bind("rt-2", backend.backend_id)
    manager.bind("rt-2", backend.backend_id)  # idempotent
    assert manager.get("rt-2") is backend
    assert manager.runtimes_bound_to(backend.backend_id) == {"rt-1", "rt-2"}
    first = run(manager.release("rt-1"))
    assert first == ReleaseResult(backend_released=False, provider_sandbox_deleted=False)
    assert fake.releases == []
    assert manager.get("rt-1") is None and manager.get("rt-2") is backend
    last = run(manager.release("rt-2"))
    assert last == ReleaseResult(backend_released=True, provider_sandbox_deleted=True)
    assert fake.releases == [backend.backend_id]
    assert manager.runtimes_bound_to(backend.backend_id) == set()
    assert run(manager.release("rt-2")) == ReleaseResult(False, False)
    assert fake.releases == [backend.backend_id]
    with pytest.raises(InvalidRequest, match="no live backend"):
        manager.bind("rt-3", backend.backend_id)


def test_concurrent_creates_for_one_runtime_leave_one_backend(
    manager: BackendManager, fake: FakeSandboxProvider
) -> None:
    async def scenario() -> list[object]:
        return list(
            await asyncio.gather(
                manager.create("rt-1", "fake-sandbox"),
                manager.create("rt-1", "fake-sandbox"),
                return_exceptions=True,
            )
        )

    winner, loser = run(scenario())
    assert isinstance(winner, DirtyTrackingBackend)
    assert isinstance(loser, InvalidRequest)
    assert manager.get("rt-1") is winner
    assert manager.runtimes_bound_to(winner.backend_id) == {"rt-1"}
    assert len(fake.releases) == 1 and fake.releases[0] != winner.backend_id  # loser freed


def test_an_attach_that_loses_a_race_never_destroys_the_backend(
    manager: BackendManager, fake: FakeSandboxProvider, provider: LocalProvider
) -> None:
    existing = run(provider.create("rt-old"))
    run(existing.write_bytes("keep.txt", b"keep"))
    locator = BackendLocator("fake-sandbox", "sbx-" + existing.backend_id)

    async def scenario() -> list[object]:
        return list(
            await asyncio.gather(
                manager.create("rt-1", "fake-sandbox"),
                manager.attach("rt-1", locator),
                return_exceptions=True,
            )
        )

    created, attached = run(scenario())
    assert isinstance(created, DirtyTrackingBackend) and isinstance(attached, InvalidRequest)
    assert fake.releases == []
    assert (existing.local_path / "keep.txt").read_bytes() == b"keep"


def test_bind_refuses_a_runtime_bound_elsewhere(manager: BackendManager) -> None:
    one = run(manager.create("rt-1", "local"))
    run(manager.create("rt-2", "local"))
    with pytest.raises(InvalidRequest, match="already bound"):
        manager.bind("rt-2", one.backend_id)


def test_a_failed_release_keeps_the_binding(
    manager: BackendManager, fake: FakeSandboxProvider
) -> None:
    backend = run(manager.create("rt-1", "fake-sandbox"))
    fake.fail_next_release = True
    with pytest.raises(BackendError):
        run(manager.release("rt-1"))
    assert manager.get("rt-1") is backend
    assert run(manager.release("rt-1")) == ReleaseResult(True, True)


def test_releasing_a_local_workspace_removes_it(manager: BackendManager) -> None:
    backend = run(manager.create("rt-1", "local"))
    assert backend.local_path is not None and backend.local_path.is_dir()
    assert run(manager.release("rt-1")) == ReleaseResult(True, True)
    assert not backend.local_path.exists()


def test_checkpoint_backend_by_runtime_or_backend_id(
    manager: BackendManager, fake: FakeSandboxProvider
) -> None:
    backend = run(manager.create("rt-1", "fake-sandbox"))
    by_runtime = run(manager.checkpoint_backend(runtime_id="rt-1"))
    by_backend = run(manager.checkpoint_backend(backend_id=backend.backend_id))
    both = run(manager.checkpoint_backend(runtime_id="rt-1", backend_id=backend.backend_id))
    assert by_runtime == by_backend == both  # clean: reused
    assert fake.snapshots_taken == 1
    run(backend.exec("echo hi > f"))
    fresh = run(manager.checkpoint_backend(runtime_id="rt-1"))
    assert fresh.provider_snapshot_id != by_runtime.provider_snapshot_id
    assert fake.snapshots_taken == 2
    with pytest.raises(InvalidRequest):
        run(manager.checkpoint_backend())
    with pytest.raises(InvalidRequest, match="no backend bound"):
        run(manager.checkpoint_backend(runtime_id="rt-unknown"))
    with pytest.raises(InvalidRequest, match="not bound to backend"):
        run(manager.checkpoint_backend(runtime_id="rt-1", backend_id="other"))
    with pytest.raises(InvalidRequest, match="no live backend"):
        run(manager.checkpoint_backend(backend_id="other"))


def test_checkout_backend(manager: BackendManager) -> None:
    source = run(manager.create("rt-1", "local"))
    run(source.write_bytes("data.txt", b"from the parent"))
    ref = run(manager.checkpoint_backend(runtime_id="rt-1"))
    child = run(manager.checkout_backend(ref, "rt-1-child"))
    assert child.backend_id != source.backend_id
    assert manager.get("rt-1-child") is child
    assert not child.dirty and child.last_ref == ref
    assert run(child.read_bytes("data.txt")) == b"from the parent"
    run(child.write_bytes("data.txt", b"child"))
    assert run(source.read_bytes("data.txt")) == b"from the parent"
    with pytest.raises(InvalidRequest, match="already bound"):
        run(manager.checkout_backend(ref, "rt-1-child"))


def test_checkout_backend_unsupported(manager: BackendManager, provider: LocalProvider) -> None:
    conch = BackendCheckpointRef(backend_kind="conch", backend_id="c", provider_snapshot_id="s")
    with pytest.raises(UnsupportedBackend, match="conch"):
        run(manager.checkout_backend(conch, "rt-x"))
    deleted = BackendCheckpointRef(backend_kind="local", backend_id="l", provider_snapshot_id=None)
    with pytest.raises(UnsupportedBackend, match="deleted"):
        run(manager.checkout_backend(deleted, "rt-x"))
    assert manager.get("rt-x") is None
    local_only = BackendManager({"local": provider})
    sandbox_ref = BackendCheckpointRef(
        backend_kind="fake-sandbox", backend_id="b", provider_snapshot_id="snap-1"
    )
    with pytest.raises(UnsupportedBackend):
        run(local_only.checkout_backend(sandbox_ref, "rt-y"))


def test_attach_after_a_restart(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs", durable=False)
    before = BackendManager({"local": LocalProvider(tmp_path / "ws", blobs)})
    backend = run(before.create("rt-1", "local"))
    run(backend.write_bytes("kept.txt", b"kept"))
    ref = run(before.checkpoint_backend(runtime_id="rt-1"))
    locator = backend.locator()

    after = BackendManager({"local": LocalProvider(tmp_path / "ws", BlobStore(tmp_path / "blobs"))})
    clean = run(after.attach("rt-1", locator, last_ref=ref))
    assert not clean.dirty
    assert run(after.checkpoint_backend(runtime_id="rt-1")) == ref
    assert run(clean.read_bytes("kept.txt")) == b"kept"
    shared = run(after.attach("rt-2", locator))
    assert shared is clean and after.runtimes_bound_to(clean.backend_id) == {"rt-1", "rt-2"}

    third = BackendManager({"local": LocalProvider(tmp_path / "ws", blobs)})
    unknown_state = run(third.attach("rt-1", locator))
    assert unknown_state.dirty
    with pytest.raises(UnsupportedBackend):
        run(third.attach("rt-9", BackendLocator("e2b", "sbx")))


def test_delete_snapshot_through_the_manager(
    manager: BackendManager, fake: FakeSandboxProvider
) -> None:
    backend = run(manager.create("rt-1", "fake-sandbox"))
    ref = run(manager.checkpoint_backend(runtime_id="rt-1"))
    assert run(manager.delete_snapshot(ref)) is True
    assert fake.deleted == [ref.provider_snapshot_id]
    assert run(manager.delete_snapshot(ref)) is False
    cleared = ref.model_copy(update={"provider_snapshot_id": None})
    assert run(manager.delete_snapshot(cleared)) is False
    # The live backend no longer hands out the deleted snapshot.
    assert backend.dirty and backend.last_ref is None
    again = run(manager.checkpoint_backend(runtime_id="rt-1"))
    assert again.provider_snapshot_id != ref.provider_snapshot_id
    with pytest.raises(UnsupportedBackend):
        run(manager.delete_snapshot(ref.model_copy(update={"backend_kind": "conch"})))


def test_local_snapshot_manifests_are_reported_for_gc(
    manager: BackendManager, provider: LocalProvider
) -> None:
    run(manager.create("rt-1", "local"))
    ref = run(manager.checkpoint_backend(runtime_id="rt-1"))
    assert manager.referenced_manifests(ref) == [ref.provider_snapshot_id]
    other = BackendCheckpointRef(backend_kind="conch", backend_id="c", provider_snapshot_id="s")
    assert manager.referenced_manifests(other) == []

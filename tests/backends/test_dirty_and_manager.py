"""DirtyTrackingBackend (every rule of the seed's "Dirty Tracking") and BackendManager.

Both run on real backends: a local workspace, and the real `E2BProvider` talking through
the `e2b` SDK to the fake E2B cloud of tests/fakes/ (sandboxes are real directories,
commands real processes), whose fault and latency injection stand in for a provider that
refuses a call or answers late. The two halves share those fixtures and are read together
(the manager's guarantees rest on the wrapper's), which is why this file runs past 600 lines.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.backends.base import Backend, BackendLocator, ExecResult
from ditto_jupyter.backends.dirty import DirtyTrackingBackend
from ditto_jupyter.backends.e2b import E2BBackend, E2BConfig, E2BProvider
from ditto_jupyter.backends.local import LocalBackend, LocalProvider
from ditto_jupyter.backends.manager import BackendManager, ReleaseResult
from ditto_jupyter.core.blobs import BlobStore
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
    ROUTE_FILES_WRITE,
    ROUTE_FS_MAKE_DIR,
    ROUTE_KILL_SANDBOX,
    ROUTE_PROCESS_START,
    FakeE2BCloud,
)

pytest_plugins = ["tests.fakes.e2b_fixtures"]  # the `fake_e2b` fixture

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


# ---- DirtyTrackingBackend on a remote sandbox (E2B) ------------------------------------


@pytest.fixture
def e2b() -> E2BProvider:
    """The real E2B provider, no SDK retries: an injected fault surfaces at once.

    It reaches the fake cloud through the SDK's environment, which `fake_e2b` sets.
    """
    return E2BProvider(E2BConfig(retries=0))


def snapshots_taken(cloud: FakeE2BCloud) -> int:
    """Provider snapshots the fake cloud has really made."""
    return cloud.count_calls(ROUTE_CREATE_SNAPSHOT, 201)


def test_a_clean_sandbox_reuses_its_snapshot_until_something_changes(
    e2b: E2BProvider, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        wrapper = DirtyTrackingBackend(await e2b.create("rt"))
        assert wrapper.dirty and wrapper.last_ref is None
        refs = await asyncio.gather(*(wrapper.checkpoint() for _ in range(5)))
        assert snapshots_taken(fake_e2b) == 1 and all(r == refs[0] for r in refs)
        ref = wrapper.last_ref
        assert ref == refs[0] and not wrapper.dirty
        assert fake_e2b.snapshot_ids() == [ref.provider_snapshot_id]
        # read-only operations, succeeding or failing, leave it clean
        await wrapper.write_bytes("f.txt", b"needle\n")
        ref = await wrapper.checkpoint()
        assert snapshots_taken(fake_e2b) == 2
        assert (await wrapper.stat("f.txt")).size == 7
        assert await wrapper.read_bytes("f.txt") == b"needle\n"
        assert [m.path for m in await wrapper.search("needle")] == ["f.txt"]
        assert await wrapper.export("f.txt")
        with pytest.raises(BackendError, match="not found"):
            await wrapper.read_bytes("missing")
        assert not wrapper.dirty
        assert await wrapper.checkpoint() is ref
        assert snapshots_taken(fake_e2b) == 2
        # a command that fails is still a result: dirty, and a new snapshot is taken
        assert (await wrapper.exec("exit 7")).exit_code == 7
        assert wrapper.dirty
        fresh = await wrapper.checkpoint()
        assert fresh.provider_snapshot_id != ref.provider_snapshot_id
        assert snapshots_taken(fake_e2b) == 3 and not wrapper.dirty

    run(scenario())


@pytest.mark.parametrize(
    ("operation", "route"),
    [
        ("write_bytes", ROUTE_FILES_WRITE),
        ("create_dir_all", ROUTE_FS_MAKE_DIR),
        ("temp_path", ROUTE_FILES_WRITE),
        ("exec", ROUTE_PROCESS_START),
    ],
)
def test_a_call_the_provider_refuses_does_not_mark_dirty(
    e2b: E2BProvider, fake_e2b: FakeE2BCloud, operation: str, route: str
) -> None:
    async def call(wrapper: DirtyTrackingBackend) -> None:
        if operation == "write_bytes":
            await wrapper.write_bytes("f.txt", b"x")
        elif operation == "create_dir_all":
            await wrapper.create_dir_all("a/b")
        elif operation == "temp_path":
            await wrapper.temp_path(".txt")
        else:
            await wrapper.exec("touch made-by-exec")

    async def scenario() -> None:
        wrapper = DirtyTrackingBackend(await e2b.create("rt"))
        ref = await wrapper.checkpoint()
        fake_e2b.fail_next(route, 500, message="provider refused the call")
        with pytest.raises(BackendError, match="provider refused the call"):
            await call(wrapper)
        fake_e2b.fail_next(route, 429)
        with pytest.raises(RateLimited):
            await call(wrapper)
        assert not wrapper.dirty
        assert await wrapper.checkpoint() is ref
        assert snapshots_taken(fake_e2b) == 1
        await call(wrapper)  # the same call, let through, marks it
        assert wrapper.dirty

    run(scenario())


def test_a_failed_sandbox_snapshot_leaves_it_dirty(
    e2b: E2BProvider, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        wrapper = DirtyTrackingBackend(await e2b.create("rt"))
        first = await wrapper.checkpoint()
        await wrapper.write_bytes("x", b"x")
        fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, 500, message="snapshot storage unavailable")
        with pytest.raises(BackendError, match="snapshot storage unavailable"):
            await wrapper.checkpoint()
        assert wrapper.dirty and wrapper.last_ref is first
        second = await wrapper.checkpoint()
        assert second.provider_snapshot_id != first.provider_snapshot_id
        assert not wrapper.dirty
        assert fake_e2b.snapshot_ids() == sorted(
            [first.provider_snapshot_id, second.provider_snapshot_id]
        )

    run(scenario())


def test_a_write_while_the_provider_snapshots_keeps_it_dirty(
    e2b: E2BProvider, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        wrapper = DirtyTrackingBackend(await e2b.create("rt"))
        gate = fake_e2b.hold_next(ROUTE_CREATE_SNAPSHOT)
        snapshot = asyncio.ensure_future(wrapper.checkpoint())
        await asyncio.sleep(0)  # the snapshot has started; the provider holds its answer
        await wrapper.write_bytes("late.txt", b"written while snapshotting")
        assert not snapshot.done()
        gate.set()
        ref = await snapshot
        assert wrapper.dirty and wrapper.last_ref == ref
        assert (await wrapper.checkpoint()).provider_snapshot_id != ref.provider_snapshot_id
        assert snapshots_taken(fake_e2b) == 2

    run(scenario())


# ---- BackendManager -----------------------------------------------------------------------


@pytest.fixture
def manager(provider: LocalProvider, e2b: E2BProvider) -> BackendManager:
    return BackendManager({"local": provider, "e2b": e2b})


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
    assert [manager.provider(kind).kind for kind in ("e2b", "local")] == ["e2b", "local"]


def test_provider_lookup(manager: BackendManager, e2b: E2BProvider) -> None:
    assert manager.provider("e2b") is e2b
    with pytest.raises(UnsupportedBackend):
        manager.provider("conch")
    with pytest.raises(InvalidRequest):
        BackendManager({"local": e2b})


def test_shared_sandbox_is_killed_only_by_the_last_runtime(
    manager: BackendManager, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        backend = await manager.create("rt-1", "e2b")
        assert isinstance(backend.inner, E2BBackend)
        manager.bind("rt-2", backend.backend_id)
        manager.bind("rt-2", backend.backend_id)  # idempotent
        assert manager.get("rt-2") is backend
        assert manager.runtimes_bound_to(backend.backend_id) == {"rt-1", "rt-2"}
        first = await manager.release("rt-1")
        assert first == ReleaseResult(backend_released=False, provider_sandbox_deleted=False)
        assert fake_e2b.killed == []
        assert fake_e2b.running_sandbox_ids() == [backend.backend_id]
        assert manager.get("rt-1") is None and manager.get("rt-2") is backend
        last = await manager.release("rt-2")
        assert last == ReleaseResult(backend_released=True, provider_sandbox_deleted=True)
        assert fake_e2b.killed == [backend.backend_id]
        assert fake_e2b.running_sandbox_ids() == []
        assert manager.runtimes_bound_to(backend.backend_id) == set()
        assert await manager.release("rt-2") == ReleaseResult(False, False)
        assert fake_e2b.count_calls(ROUTE_KILL_SANDBOX) == 1
        with pytest.raises(InvalidRequest, match="no live backend"):
            manager.bind("rt-3", backend.backend_id)

    run(scenario())


def test_concurrent_creates_for_one_runtime_leave_one_sandbox(
    manager: BackendManager, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> list[object]:
        return list(
            await asyncio.gather(
                manager.create("rt-1", "e2b"),
                manager.create("rt-1", "e2b"),
                return_exceptions=True,
            )
        )

    results = run(scenario())
    winners = [r for r in results if isinstance(r, DirtyTrackingBackend)]
    losers = [r for r in results if isinstance(r, InvalidRequest)]
    assert len(winners) == 1 and len(losers) == 1
    winner = winners[0]
    assert fake_e2b.count_calls(ROUTE_CREATE_SANDBOX, 201) == 2  # both really made one
    assert manager.get("rt-1") is winner and manager.runtimes_bound_to(winner.backend_id) == {
        "rt-1"
    }
    assert fake_e2b.running_sandbox_ids() == [winner.backend_id]
    assert len(fake_e2b.killed) == 1 and fake_e2b.killed[0] != winner.backend_id  # loser freed


def test_an_attach_that_loses_a_race_never_destroys_the_sandbox(
    manager: BackendManager, e2b: E2BProvider, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        existing = await e2b.create("rt-old")
        await existing.write_bytes("keep.txt", b"keep")
        gate = fake_e2b.hold_next(ROUTE_CONNECT_SANDBOX)  # the attach answers late
        create = asyncio.ensure_future(manager.create("rt-1", "e2b"))
        attach = asyncio.ensure_future(manager.attach("rt-1", existing.locator()))
        created = await create
        gate.set()
        with pytest.raises(InvalidRequest, match="bound to another backend meanwhile"):
            await attach
        assert isinstance(created, DirtyTrackingBackend) and manager.get("rt-1") is created
        assert fake_e2b.count_calls(ROUTE_CONNECT_SANDBOX, 200) == 1  # it really attached
        assert fake_e2b.killed == []
        assert existing.backend_id in fake_e2b.running_sandbox_ids()
        assert await existing.read_bytes("keep.txt") == b"keep"

    run(scenario())


def test_a_create_that_loses_a_race_to_an_attach_kills_only_its_own_sandbox(
    manager: BackendManager, e2b: E2BProvider, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        existing = await e2b.create("rt-old")
        gate = fake_e2b.hold_next(ROUTE_CREATE_SANDBOX)  # the create answers late
        create = asyncio.ensure_future(manager.create("rt-1", "e2b"))
        attach = asyncio.ensure_future(manager.attach("rt-1", existing.locator()))
        attached = await attach
        gate.set()
        with pytest.raises(InvalidRequest, match="bound to another backend meanwhile"):
            await create
        assert manager.get("rt-1") is attached
        assert attached.backend_id == existing.backend_id
        assert fake_e2b.running_sandbox_ids() == [existing.backend_id]
        assert len(fake_e2b.killed) == 1 and fake_e2b.killed[0] != existing.backend_id

    run(scenario())


def test_bind_refuses_a_runtime_bound_elsewhere(manager: BackendManager) -> None:
    one = run(manager.create("rt-1", "local"))
    run(manager.create("rt-2", "local"))
    with pytest.raises(InvalidRequest, match="already bound"):
        manager.bind("rt-2", one.backend_id)


def test_a_failed_release_keeps_the_binding(
    manager: BackendManager, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        backend = await manager.create("rt-1", "e2b")
        fake_e2b.fail_next(ROUTE_KILL_SANDBOX, 500, message="kill queue full")
        with pytest.raises(BackendError, match="kill queue full"):
            await manager.release("rt-1")
        fake_e2b.fail_next(ROUTE_KILL_SANDBOX, 429)
        with pytest.raises(RateLimited):
            await manager.release("rt-1")
        assert manager.get("rt-1") is backend
        assert manager.runtimes_bound_to(backend.backend_id) == {"rt-1"}
        assert fake_e2b.running_sandbox_ids() == [backend.backend_id]
        assert await manager.release("rt-1") == ReleaseResult(True, True)
        assert fake_e2b.killed == [backend.backend_id] and manager.get("rt-1") is None

    run(scenario())


def test_releasing_a_local_workspace_removes_it(manager: BackendManager) -> None:
    backend = run(manager.create("rt-1", "local"))
    assert backend.local_path is not None and backend.local_path.is_dir()
    assert run(manager.release("rt-1")) == ReleaseResult(True, True)
    assert not backend.local_path.exists()


def test_checkpoint_backend_by_runtime_or_backend_id(
    manager: BackendManager, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        backend = await manager.create("rt-1", "e2b")
        by_runtime = await manager.checkpoint_backend(runtime_id="rt-1")
        by_backend = await manager.checkpoint_backend(backend_id=backend.backend_id)
        both = await manager.checkpoint_backend(runtime_id="rt-1", backend_id=backend.backend_id)
        assert by_runtime == by_backend == both  # clean: reused
        assert snapshots_taken(fake_e2b) == 1
        await backend.exec("echo hi > f")
        fresh = await manager.checkpoint_backend(runtime_id="rt-1")
        assert fresh.provider_snapshot_id != by_runtime.provider_snapshot_id
        assert snapshots_taken(fake_e2b) == 2
        with pytest.raises(InvalidRequest):
            await manager.checkpoint_backend()
        with pytest.raises(InvalidRequest, match="no backend bound"):
            await manager.checkpoint_backend(runtime_id="rt-unknown")
        with pytest.raises(InvalidRequest, match="not bound to backend"):
            await manager.checkpoint_backend(runtime_id="rt-1", backend_id="other")
        with pytest.raises(InvalidRequest, match="no live backend"):
            await manager.checkpoint_backend(backend_id="other")
        assert snapshots_taken(fake_e2b) == 2

    run(scenario())


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


def test_checkout_backend_of_a_sandbox_snapshot(
    manager: BackendManager, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        source = await manager.create("rt-1", "e2b")
        await source.write_bytes("data.txt", b"from the parent")
        ref = await manager.checkpoint_backend(runtime_id="rt-1")
        child = await manager.checkout_backend(ref, "rt-1-child")
        assert child.backend_id != source.backend_id
        assert sorted(fake_e2b.running_sandbox_ids()) == sorted(
            [source.backend_id, child.backend_id]
        )
        assert manager.get("rt-1-child") is child
        assert not child.dirty and child.last_ref == ref
        assert await manager.checkpoint_backend(runtime_id="rt-1-child") == ref  # reused
        assert snapshots_taken(fake_e2b) == 1
        assert await child.read_bytes("data.txt") == b"from the parent"
        await child.write_bytes("data.txt", b"child")
        assert await source.read_bytes("data.txt") == b"from the parent"
        with pytest.raises(InvalidRequest, match="already bound"):
            await manager.checkout_backend(ref, "rt-1-child")
        fake_e2b.fail_next(ROUTE_CREATE_SANDBOX, 429)
        with pytest.raises(RateLimited):
            await manager.checkout_backend(ref, "rt-1-other")
        assert manager.get("rt-1-other") is None
        assert len(fake_e2b.running_sandbox_ids()) == 2

    run(scenario())


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
        backend_kind="e2b", backend_id="isb1", provider_snapshot_id="snap1"
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
    manager: BackendManager, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        backend = await manager.create("rt-1", "e2b")
        ref = await manager.checkpoint_backend(runtime_id="rt-1")
        assert fake_e2b.snapshot_ids() == [ref.provider_snapshot_id]
        assert await manager.delete_snapshot(ref) is True
        assert fake_e2b.snapshot_ids() == []
        assert await manager.delete_snapshot(ref) is False  # E2B answers 404: already gone
        assert fake_e2b.count_calls(ROUTE_DELETE_TEMPLATE) == 2
        cleared = ref.model_copy(update={"provider_snapshot_id": None})
        assert await manager.delete_snapshot(cleared) is False
        assert fake_e2b.count_calls(ROUTE_DELETE_TEMPLATE) == 2  # no provider call for it
        # The live backend no longer hands out the deleted snapshot.
        assert backend.dirty and backend.last_ref is None
        again = await manager.checkpoint_backend(runtime_id="rt-1")
        assert again.provider_snapshot_id != ref.provider_snapshot_id
        assert fake_e2b.snapshot_ids() == [again.provider_snapshot_id]
        with pytest.raises(UnsupportedBackend):
            await manager.delete_snapshot(ref.model_copy(update={"backend_kind": "conch"}))

    run(scenario())


def test_a_failed_snapshot_deletion_keeps_the_snapshot_in_use(
    manager: BackendManager, fake_e2b: FakeE2BCloud
) -> None:
    async def scenario() -> None:
        backend = await manager.create("rt-1", "e2b")
        ref = await manager.checkpoint_backend(runtime_id="rt-1")
        fake_e2b.fail_next(ROUTE_DELETE_TEMPLATE, 500, message="template store is read-only")
        with pytest.raises(BackendError, match="template store is read-only"):
            await manager.delete_snapshot(ref)
        assert fake_e2b.snapshot_ids() == [ref.provider_snapshot_id]
        assert not backend.dirty and backend.last_ref == ref
        assert await manager.checkpoint_backend(runtime_id="rt-1") == ref

    run(scenario())


def test_snapshot_manifests_are_reported_for_gc(
    manager: BackendManager, provider: LocalProvider
) -> None:
    run(manager.create("rt-1", "local"))
    ref = run(manager.checkpoint_backend(runtime_id="rt-1"))
    assert manager.referenced_manifests(ref) == [ref.provider_snapshot_id]
    other = BackendCheckpointRef(backend_kind="conch", backend_id="c", provider_snapshot_id="s")
    assert manager.referenced_manifests(other) == []
    sandbox = BackendCheckpointRef(backend_kind="e2b", backend_id="b", provider_snapshot_id="s")
    assert manager.referenced_manifests(sandbox) == []  # E2B snapshots live at the provider

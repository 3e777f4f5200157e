"""RuntimeService: every rule of the seed, on a real SQLite file and real local workspaces."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import (
    CheckpointNotFound,
    InvalidRequest,
    RuntimeClosed,
    RuntimeNotFound,
    RuntimeNotPaused,
    RuntimePaused,
    SessionBusy,
    UnsupportedBackend,
)
from ditto_jupyter.core.models import ContextCapture, SessionLifecycleStatus, SessionRecord
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture, ctx
from tests.support.stored_blobs import tamper_manifest

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion (the service is asyncio)."""
    return asyncio.run(coro)


class SlowContext(InMemoryContextCapture):
    """The in-memory context, but capture yields to the loop like a real kernel call."""

    async def capture(self, session: SessionRecord) -> ContextCapture:
        await asyncio.sleep(0.01)
        return await super().capture(session)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def service(data_dir: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(data_dir, context_factory=SlowContext)
    yield svc
    svc.close_store()


async def write(service: RuntimeService, runtime_id: str, path: str, data: bytes) -> None:
    backend = service.backends.get(runtime_id)
    assert backend is not None
    await backend.write_bytes(path, data)


def test_create_runtime_is_idle_and_listed(service: RuntimeService) -> None:
    record = run(service.create_runtime("nb.ipynb", "ana"))
    assert record.status is SessionLifecycleStatus.IDLE
    assert (record.conversation_id, record.sender_id) == ("nb.ipynb", "ana")
    assert set(record.model_dump()) == {
        "runtime_id",
        "conversation_id",
        "sender_id",
        "status",
        "created_at_ms",
        "updated_at_ms",
        "fanout",
    }
    assert record.fanout is None  # made by no fan-out
    assert [r.runtime_id for r in run(service.list_runtimes()).runtimes] == [record.runtime_id]
    assert run(service.get_runtime(record.runtime_id)) == record
    assert run(service.resume_session(record.runtime_id)) == record
    with pytest.raises(RuntimeNotFound):
        run(service.get_runtime("nope"))
    with pytest.raises(InvalidRequest):
        run(service.create_runtime("nb.ipynb", runtime_id=record.runtime_id))


def test_checkpoint_returns_previous_head_and_chains_parents(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    first = run(service.checkpoint(rid, "one", {"owner": "ana"}))
    assert first.previous_checkpoint_id is None
    second = run(service.checkpoint(rid, "two"))
    assert second.previous_checkpoint_id == first.checkpoint_id
    listed = run(service.list_checkpoints(rid)).checkpoints
    assert [c.checkpoint_id for c in listed] == [first.checkpoint_id, second.checkpoint_id]
    assert listed[0].metadata == {"owner": "ana"}
    assert listed[1].parent_checkpoint_id == first.checkpoint_id
    assert service.store.get_head(rid) == second.checkpoint_id
    assert service.resolve_checkpoint("one", rid).checkpoint_id == first.checkpoint_id
    assert service.resolve_checkpoint(first.checkpoint_id[:8]).checkpoint_id == first.checkpoint_id
    with pytest.raises(CheckpointNotFound):
        service.resolve_checkpoint("three", rid)


def test_busy_runtime_refuses_checkpoint_checkout_and_pause(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    cp = run(service.checkpoint(rid)).checkpoint_id
    ctx(service).busy.add(rid)
    assert run(service.get_runtime(rid)).status is SessionLifecycleStatus.BUSY
    with pytest.raises(SessionBusy):
        run(service.checkpoint(rid))
    with pytest.raises(SessionBusy):
        run(service.checkout(cp))
    with pytest.raises(SessionBusy):
        run(service.pause(rid))
    assert len(run(service.list_checkpoints(rid)).checkpoints) == 1
    assert len(run(service.list_runtimes()).runtimes) == 1


def test_twenty_concurrent_checkpoints_exactly_one_proceeds(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id

    async def race() -> list[Any]:
        return await asyncio.gather(
            *(service.checkpoint(rid, f"c{i}") for i in range(20)), return_exceptions=True
        )

    outcomes = run(race())
    wins = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(wins) == 1
    assert all(isinstance(o, SessionBusy) for o in outcomes if isinstance(o, BaseException))
    checkpoints = service.store.list_checkpoints(rid)
    assert [c.checkpoint_id for c in checkpoints] == [wins[0].checkpoint_id]
    assert service.store.get_head(rid) == wins[0].checkpoint_id


def test_checkout_branches_without_touching_the_source(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb", "ana")).runtime_id
    ctx(service).execute(rid, x=1, msg="hello")
    run(write(service, rid, "data/a.txt", b"parent"))
    cp = run(service.checkpoint(rid, "base")).checkpoint_id
    ctx(service).execute(rid, x=2)
    source_before = service.store.get_session(rid)
    head_before = service.store.get_head(rid)

    result = run(service.checkout(cp, conversation_id="branch.ipynb", sender_id="bob"))
    child = result.runtime.runtime_id
    assert re.fullmatch(re.escape(rid) + r"-[0-9a-f]{12}", child)
    assert result.source_runtime_id == rid and result.checkpoint_id == cp
    assert (result.runtime.conversation_id, result.runtime.sender_id) == ("branch.ipynb", "bob")
    assert service.store.get_head(child) == cp
    assert ctx(service).namespace(child) == {"x": 1, "msg": "hello"}
    assert ctx(service).namespace(rid)["x"] == 2
    assert service.store.get_session(rid) == source_before
    assert service.store.get_head(rid) == head_before

    child_dir, parent_dir = service.workspace_path(child), service.workspace_path(rid)
    assert child_dir is not None and parent_dir is not None and child_dir != parent_dir
    assert (child_dir / "data/a.txt").read_bytes() == b"parent"
    (child_dir / "data/a.txt").write_bytes(b"child")
    assert (parent_dir / "data/a.txt").read_bytes() == b"parent"
    again = run(service.checkout(cp))
    other_dir = service.workspace_path(again.runtime.runtime_id)
    assert other_dir is not None and (other_dir / "data/a.txt").read_bytes() == b"parent"
    assert again.runtime.runtime_id != child
    with pytest.raises(CheckpointNotFound):
        run(service.checkout("missing"))


def test_clean_recheckpoint_reuses_the_backend_ref(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    run(write(service, rid, "f.txt", b"1"))
    first = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    clean = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    assert first.backend_ref is not None and clean.backend_ref == first.backend_ref
    run(write(service, rid, "f.txt", b"2"))
    after_write = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    assert after_write.backend_ref is not None
    assert after_write.backend_ref.provider_snapshot_id != first.backend_ref.provider_snapshot_id
    ctx(service).execute(rid, y=1)  # a cell that wrote no file: the same snapshot
    after_cell = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    assert after_cell.backend_ref == after_write.backend_ref
    workspace = service.workspace_path(rid)
    assert workspace is not None
    (workspace / "f.txt").write_text("3")  # the kernel (or a terminal) writes it directly
    direct = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    assert direct.backend_ref is not None and direct.backend_ref != after_write.backend_ref


def test_pause_releases_and_resume_keeps_the_id(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ctx(service).execute(rid, model={"weights": [1, 2, 3]})
    run(write(service, rid, "out.bin", b"\x00\x01"))
    paused = run(service.pause(rid, "nightly", {"why": "idle"}))
    assert paused.runtime.status is SessionLifecycleStatus.PAUSED
    assert service.backends.get(rid) is None and service.store.get_binding(rid) is None
    assert rid not in ctx(service).namespaces
    assert service.get_checkpoint(paused.checkpoint_id).name == "nightly"
    for operation in (service.checkpoint(rid), service.pause(rid), service.resume_session(rid)):
        with pytest.raises(RuntimePaused):
            run(operation)

    resumed = run(service.resume(rid))
    assert resumed.runtime.runtime_id == rid
    assert resumed.runtime.status is SessionLifecycleStatus.IDLE
    assert resumed.checkpoint_id == paused.checkpoint_id
    assert ctx(service).namespace(rid) == {"model": {"weights": [1, 2, 3]}}
    workspace = service.workspace_path(rid)
    assert workspace is not None and (workspace / "out.bin").read_bytes() == b"\x00\x01"
    with pytest.raises(RuntimeNotPaused):
        run(service.resume(rid))


def test_close_refuses_everything_after(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    cp = run(service.checkpoint(rid)).checkpoint_id
    workspace = service.workspace_path(rid)
    closed = run(service.close(rid))
    assert closed.runtime.status is SessionLifecycleStatus.CLOSED
    # A local workspace is the runtime's sandbox: closing the last runtime on it removes it.
    assert closed.backend_released and closed.provider_sandbox_deleted
    assert workspace is not None and not workspace.exists()
    for operation in (
        service.checkpoint(rid),
        service.pause(rid),
        service.resume(rid),
        service.close(rid),
        service.resume_session(rid),
    ):
        with pytest.raises(RuntimeClosed):
            run(operation)
    final = closed.checkpoint_id  # close took a final checkpoint first, its new head
    assert final is not None and service.store.get_head(rid) == final
    listed = run(service.list_checkpoints(rid)).checkpoints
    assert [(c.checkpoint_id, c.name) for c in listed] == [(cp, None), (final, "close")]
    child = run(service.checkout(cp))  # a closed runtime's checkpoints still branch
    assert child.source_runtime_id == rid


def test_close_of_paused_runtime_releases_nothing(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    run(service.pause(rid))
    closed = run(service.close(rid))
    assert closed.runtime.status is SessionLifecycleStatus.CLOSED
    assert not closed.backend_released and not closed.provider_sandbox_deleted


def test_delete_snapshot_is_idempotent_and_keeps_the_record(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    run(write(service, rid, "big.bin", bytes(range(256)) * 4096))
    cp = run(service.checkpoint(rid)).checkpoint_id
    reused = run(service.checkpoint(rid)).checkpoint_id  # clean: shares the snapshot
    first = run(service.delete_snapshot(cp))
    assert (first.deleted, first.already_deleted) == (True, False)
    second = run(service.delete_snapshot(cp))
    assert (second.deleted, second.already_deleted) == (False, True)
    summaries = {c.checkpoint_id: c for c in run(service.list_checkpoints(rid)).checkpoints}
    assert set(summaries) == {cp, reused}
    assert not summaries[cp].has_provider_snapshot and not summaries[reused].has_provider_snapshot
    with pytest.raises(UnsupportedBackend):
        run(service.checkout(cp))
    # The live backend no longer reuses the deleted snapshot.
    fresh = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    assert fresh.backend_ref is not None and fresh.backend_ref.provider_snapshot_id
    run(service.checkout(fresh.checkpoint_id))
    with pytest.raises(CheckpointNotFound):
        run(service.delete_snapshot("missing"))


def test_gc_frees_deleted_snapshots_and_keeps_referenced_chunks(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    run(write(service, rid, "keep.bin", b"k" * 300_000 + bytes(range(256)) * 1000))
    kept = run(service.checkpoint(rid)).checkpoint_id
    run(write(service, rid, "drop.bin", bytes(reversed(range(256))) * 5000))
    dropped = run(service.checkpoint(rid)).checkpoint_id
    run(service.delete_snapshot(dropped))
    report = service.gc(grace_seconds=0)
    assert report.freed_chunks >= 1 and report.freed_bytes > 0  # drop.bin is gone
    child = run(service.checkout(kept)).runtime.runtime_id
    workspace = service.workspace_path(child)
    assert workspace is not None
    assert (workspace / "keep.bin").read_bytes()[:3] == b"kkk"
    assert not (workspace / "drop.bin").exists()


def test_failed_checkpoint_leaves_the_store_as_it_was(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    run(write(service, rid, "a.txt", b"a"))
    first = run(service.checkpoint(rid)).checkpoint_id
    run(write(service, rid, "a.txt", b"b"))

    def broken_set_head(runtime_id: str, checkpoint_id: str | None) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(service.store, "set_head", broken_set_head)
    with pytest.raises(OSError):
        run(service.checkpoint(rid))
    monkeypatch.undo()
    assert [c.checkpoint_id for c in service.store.list_checkpoints(rid)] == [first]
    assert service.store.get_head(rid) == first
    # The discarded snapshot is not reused by the next checkpoint.
    nxt = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    child = run(service.checkout(nxt.checkpoint_id)).runtime.runtime_id
    workspace = service.workspace_path(child)
    assert workspace is not None and (workspace / "a.txt").read_bytes() == b"b"


def test_failed_checkout_leaves_no_child(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    cp = run(service.checkpoint(rid)).checkpoint_id

    async def broken_restore(session: SessionRecord, manifest_id: str | None) -> list[Any]:
        raise RuntimeError("kernel died")

    monkeypatch.setattr(service.context, "restore", broken_restore)
    with pytest.raises(RuntimeError):
        run(service.checkout(cp))
    assert [s.session_id for s in service.store.list_sessions()] == [rid]
    assert [b.runtime_id for b in service.store.list_bindings()] == [rid]


def test_tampered_context_manifest_is_refused(service: RuntimeService, data_dir: Path) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ctx(service).execute(rid, secret=1)
    cp = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    assert cp.context_manifest_id is not None
    tamper_manifest(
        data_dir / "blobs",
        cp.context_manifest_id,
        lambda doc: doc.replace(b'"memory-context"', b'"evil-context"'),
    )
    with pytest.raises(Exception, match="signature"):
        run(service.checkout(cp.checkpoint_id))
    assert [s.session_id for s in service.store.list_sessions()] == [rid]


def test_blob_store_is_shared_with_the_context(service: RuntimeService) -> None:
    assert isinstance(service.blobs, BlobStore)
    assert ctx(service).blobs is service.blobs


def test_exec_runs_in_the_workspace_and_marks_it_dirty(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    first = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    result = run(service.exec(rid, "echo made > made.txt; echo out; exit 3"))
    assert (result.exit_code, result.stdout.strip()) == (3, "out")
    second = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    assert second.backend_ref != first.backend_ref
    child = run(service.checkout(second.checkpoint_id)).runtime.runtime_id
    workspace = service.workspace_path(child)
    assert workspace is not None and (workspace / "made.txt").read_text() == "made\n"
    run(service.pause(rid))
    with pytest.raises(RuntimePaused):
        run(service.exec(rid, "true"))

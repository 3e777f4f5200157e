"""RuntimeService across processes, crashes, and random operation sequences."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import (
    DittoError,
    RuntimeClosed,
    RuntimeNotPaused,
    RuntimePaused,
    UnsupportedBackend,
)
from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def python(script: str, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


PAUSE_IN_ANOTHER_PROCESS = """
    import asyncio, json, sys
    from ditto_jupyter.wiring import open_runtime_service
    from tests.fakes.fake_context_capture import InMemoryContextCapture

    async def main():
        service = open_runtime_service(sys.argv[1], context_factory=InMemoryContextCapture)
        rid = (await service.create_runtime("nb.ipynb", "ana")).runtime_id
        service.context.execute(rid, answer=42, items=["a", "b"])
        await service.backends.get(rid).write_bytes("results/table.csv", b"a,b\\n1,2\\n")
        paused = await service.pause(rid, "before-restart")
        print(json.dumps({"runtime_id": rid, "checkpoint_id": paused.checkpoint_id}))
        service.close_store()

    asyncio.run(main())
"""


def test_paused_runtime_survives_a_process_restart(tmp_path: Path) -> None:
    proc = python(PAUSE_IN_ANOTHER_PROCESS, str(tmp_path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    created = json.loads(out)
    service = open_runtime_service(tmp_path, context_factory=InMemoryContextCapture)
    try:
        rid = created["runtime_id"]
        record = run(service.get_runtime(rid))
        assert record.status is SessionLifecycleStatus.PAUSED
        resumed = run(service.resume(rid))
        assert resumed.checkpoint_id == created["checkpoint_id"]
        assert resumed.runtime.runtime_id == rid
        assert isinstance(service.context, InMemoryContextCapture)
        assert service.context.namespace(rid) == {"answer": 42, "items": ["a", "b"]}
        workspace = service.workspace_path(rid)
        assert workspace is not None
        assert (workspace / "results/table.csv").read_bytes() == b"a,b\n1,2\n"
    finally:
        service.close_store()


def test_live_runtime_backend_reattaches_after_restart(tmp_path: Path) -> None:
    """A new service over the same store finds a live runtime's workspace again."""
    first = open_runtime_service(tmp_path, context_factory=InMemoryContextCapture)
    rid = run(first.create_runtime("nb.ipynb")).runtime_id
    backend = first.backends.get(rid)
    assert backend is not None
    run(backend.write_bytes("notes.txt", b"kept"))
    first.close_store()
    # The context (a kernel) outlives the control plane here, as kernels of a server do.
    second = open_runtime_service(tmp_path, context_factory=lambda blobs: first.context)
    try:
        cp = run(second.checkpoint(rid)).checkpoint_id  # re-attaches the workspace
        child = run(second.checkout(cp)).runtime.runtime_id
        workspace = second.workspace_path(child)
        assert workspace is not None and (workspace / "notes.txt").read_bytes() == b"kept"
    finally:
        second.close_store()


def test_lost_context_pauses_at_head_or_closes(tmp_path: Path) -> None:
    service = open_runtime_service(tmp_path, context_factory=InMemoryContextCapture)
    try:
        with_head = run(service.create_runtime("a.ipynb")).runtime_id
        assert isinstance(service.context, InMemoryContextCapture)
        service.context.execute(with_head, v=1)
        run(service.checkpoint(with_head))
        without = run(service.create_runtime("b.ipynb")).runtime_id
        assert run(service.mark_lost(with_head)).status is SessionLifecycleStatus.PAUSED
        assert run(service.mark_lost(without)).status is SessionLifecycleStatus.CLOSED
        assert service.store.get_binding(with_head) is None
        run(service.resume(with_head))
        assert service.context.namespace(with_head) == {"v": 1}
    finally:
        service.close_store()


CHECKPOINT_FOREVER = """
    import asyncio, json, sys
    from ditto_jupyter.wiring import open_runtime_service
    from tests.fakes.fake_context_capture import InMemoryContextCapture

    async def main():
        service = open_runtime_service(sys.argv[1], context_factory=InMemoryContextCapture)
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        backend = service.backends.get(rid)
        for i in range(10_000):
            service.context.execute(rid, step=i)
            await backend.write_bytes(f"f{i % 7}.bin", bytes([i % 256]) * (50_000 + i))
            result = await service.checkpoint(rid, f"step-{i}")
            print(json.dumps({"checkpoint_id": result.checkpoint_id, "step": i}), flush=True)

    asyncio.run(main())
"""


def _read_committed(proc: subprocess.Popen[str], wanted: int) -> list[dict[str, Any]]:
    """Read the child's reports until `wanted` checkpoints are committed; fail if it stops."""
    assert proc.stdout is not None and proc.stderr is not None
    committed: list[dict[str, Any]] = []
    while len(committed) < wanted:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            pytest.fail(
                f"the checkpointing child exited ({proc.returncode}) after "
                f"{len(committed)} checkpoints, before the kill:\n{proc.stderr.read()}"
            )
        if line.startswith("{"):
            committed.append(json.loads(line))
    return committed


def _step_of(name: str | None) -> int:
    assert name is not None and name.startswith("step-"), name
    return int(name.removeprefix("step-"))


@pytest.mark.slow
def test_sigkill_during_checkpoints_leaves_a_consistent_store(tmp_path: Path) -> None:
    """SIGKILL a process that checkpoints in a loop, at a random point after it has
    committed a few checkpoints: every checkpoint it reported is stored and restores to
    exactly its state, and the store holds at most the one it was killed in, also whole."""
    rng = random.Random(7)
    for attempt in range(6):
        data = tmp_path / f"run{attempt}"
        proc = python(CHECKPOINT_FOREVER, str(data))
        wanted = rng.randint(1, 4)
        committed = _read_committed(proc, wanted)
        time.sleep(rng.random() * 0.3)  # the kill lands anywhere in a later checkpoint
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        assert proc.returncode == -signal.SIGKILL  # killed mid-loop, not finished
        committed += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(committed) >= wanted >= 1
        assert [c["step"] for c in committed] == list(range(len(committed)))
        service = open_runtime_service(data, context_factory=InMemoryContextCapture)
        try:
            stored = service.store.list_checkpoints()
            stored_ids = {c.checkpoint_id for c in stored}
            # Everything reported committed is there; at most one more (killed before print).
            assert {c["checkpoint_id"] for c in committed} <= stored_ids
            assert len(stored_ids) - len(committed) in (0, 1)
            assert sorted(_step_of(c.name) for c in stored) == list(range(len(stored)))
            for checkpoint in stored:  # no half checkpoint: every part loads, and restores
                assert checkpoint.context_manifest_id is not None
                service.blobs.get_manifest(checkpoint.context_manifest_id)
                assert checkpoint.backend_ref is not None
                assert checkpoint.backend_ref.provider_snapshot_id is not None
                service.blobs.get_manifest(checkpoint.backend_ref.provider_snapshot_id)
                step = _step_of(checkpoint.name)
                child = run(service.checkout(checkpoint.checkpoint_id)).runtime.runtime_id
                assert isinstance(service.context, InMemoryContextCapture)
                assert service.context.namespace(child) == {"step": step}
                workspace = service.workspace_path(child)
                assert workspace is not None
                for earlier in range(max(0, step - 6), step + 1):  # each file's latest write
                    expected = bytes([earlier % 256]) * (50_000 + earlier)
                    assert (workspace / f"f{earlier % 7}.bin").read_bytes() == expected
        finally:
            service.close_store()


class RuntimeMachine(RuleBasedStateMachine):
    """Random sequences of control operations over several runtimes keep the invariants."""

    runtimes = Bundle("runtimes")
    checkpoints = Bundle("checkpoints")

    @initialize()
    def open_service(self) -> None:
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        self.service: RuntimeService = open_runtime_service(
            Path(self.tmp.name), context_factory=InMemoryContextCapture
        )
        self.status: dict[str, SessionLifecycleStatus] = {}
        self.heads: dict[str, str | None] = {}
        self.parents: dict[str, str | None] = {}
        self.deleted: set[str] = set()

    def teardown(self) -> None:
        self.service.close_store()
        self.tmp.cleanup()

    @rule(target=runtimes)
    def create(self) -> str:
        rid = run(self.service.create_runtime("nb.ipynb")).runtime_id
        self.status[rid] = SessionLifecycleStatus.IDLE
        self.heads[rid] = None
        return rid

    @rule(rid=runtimes, data=st.binary(min_size=1, max_size=2000))
    def backend_write(self, rid: str, data: bytes) -> None:
        backend = self.service.backends.get(rid)
        if self.status[rid] is SessionLifecycleStatus.IDLE:
            assert backend is not None
            run(backend.write_bytes("file.bin", data))
        else:
            assert backend is None

    @rule(target=checkpoints, rid=runtimes)
    def checkpoint(self, rid: str) -> str:
        try:
            result = run(self.service.checkpoint(rid))
        except (RuntimePaused, RuntimeClosed):
            assert self.status[rid] is not SessionLifecycleStatus.IDLE
            return self.heads[rid] or "none"
        assert self.status[rid] is SessionLifecycleStatus.IDLE
        assert result.previous_checkpoint_id == self.heads[rid]
        self.parents[result.checkpoint_id] = self.heads[rid]
        self.heads[rid] = result.checkpoint_id
        return result.checkpoint_id

    @rule(target=runtimes, cp=checkpoints)
    def checkout(self, cp: str) -> str:
        if cp == "none":
            return next(iter(self.status))
        try:
            result = run(self.service.checkout(cp))
        except UnsupportedBackend:
            assert cp in self.deleted
            return next(iter(self.status))
        child = result.runtime.runtime_id
        assert child not in self.status and child.startswith(result.source_runtime_id + "-")
        self.status[child] = SessionLifecycleStatus.IDLE
        self.heads[child] = cp
        return child

    @rule(target=checkpoints, rid=runtimes)
    def pause(self, rid: str) -> str:
        try:
            result = run(self.service.pause(rid))
        except (RuntimePaused, RuntimeClosed):
            assert self.status[rid] is not SessionLifecycleStatus.IDLE
            return self.heads[rid] or "none"
        assert self.status[rid] is SessionLifecycleStatus.IDLE
        self.parents[result.checkpoint_id] = self.heads[rid]
        self.heads[rid] = result.checkpoint_id
        self.status[rid] = SessionLifecycleStatus.PAUSED
        return result.checkpoint_id

    @rule(rid=runtimes)
    def resume(self, rid: str) -> None:
        try:
            result = run(self.service.resume(rid))
        except (RuntimeNotPaused, RuntimeClosed):
            assert self.status[rid] is not SessionLifecycleStatus.PAUSED
            return
        except UnsupportedBackend:
            assert self.heads[rid] in self.deleted
            return
        assert self.status[rid] is SessionLifecycleStatus.PAUSED
        assert result.runtime.runtime_id == rid
        self.status[rid] = SessionLifecycleStatus.IDLE

    @rule(rid=consumes(runtimes), discard=st.booleans())
    def close(self, rid: str, discard: bool) -> None:
        try:
            result = run(self.service.close(rid, discard=discard))
        except RuntimeClosed:
            assert self.status[rid] is SessionLifecycleStatus.CLOSED
            return
        if self.status[rid] is SessionLifecycleStatus.IDLE and not discard:
            assert result.checkpoint_id is not None  # the final checkpoint is the head
            self.parents[result.checkpoint_id] = self.heads[rid]
            self.heads[rid] = result.checkpoint_id
        else:
            assert result.checkpoint_id is None
        self.status[rid] = SessionLifecycleStatus.CLOSED

    @rule(cp=checkpoints)
    def delete_snapshot(self, cp: str) -> None:
        if cp == "none":
            return
        try:
            result = run(self.service.delete_snapshot(cp))
        except DittoError:
            raise
        snapshot = self.service.get_checkpoint(cp)
        assert snapshot.backend_ref is None or snapshot.backend_ref.provider_snapshot_id is None
        # every checkpoint sharing the snapshot lost it too
        for other in self.service.store.list_checkpoints():
            if other.backend_ref is not None and other.backend_ref.provider_snapshot_id is None:
                self.deleted.add(other.checkpoint_id)
        assert result.deleted != result.already_deleted

    @invariant()
    def store_matches_the_model(self) -> None:
        if not hasattr(self, "service"):
            return
        sessions = {s.session_id: s for s in self.service.store.list_sessions()}
        assert set(sessions) == set(self.status)
        for rid, status in self.status.items():
            assert sessions[rid].status is status
            assert self.service.store.get_head(rid) == self.heads[rid]
            bound = self.service.store.get_binding(rid) is not None
            assert bound == (status is SessionLifecycleStatus.IDLE)
            assert (self.service.backends.get(rid) is not None) == bound
        checkpoints = self.service.store.list_checkpoints()
        ids = [c.checkpoint_id for c in checkpoints]
        assert len(ids) == len(set(ids))
        for checkpoint in checkpoints:
            assert checkpoint.parent_checkpoint_id == self.parents[checkpoint.checkpoint_id]
        # no snapshot leaks: every stored workspace manifest belongs to some checkpoint
        from ditto_jupyter.backends.local import MANIFEST_KIND as WORKSPACE

        live = self.service.live_manifests()
        for manifest_id in self.service.blobs.iter_manifests():
            body = self.service.blobs.get_manifest(manifest_id)
            if body.get("kind") == WORKSPACE:
                assert manifest_id in live


TestRuntimeMachine = RuntimeMachine.TestCase
TestRuntimeMachine.settings = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

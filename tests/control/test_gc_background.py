"""Garbage collection off the request path, and never collecting anything reachable.

RuntimeService on a real SQLite file, real local workspaces and the real blob store, with
the test capture (no kernel). Time passing is simulated by moving the blob index's
`touched` stamps back, so collections with the real grace period free real garbage while
checkpoints run next to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, rule

from ditto_jupyter.control.collector import BackgroundCollector
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import GRACE_SECONDS, BlobStore
from ditto_jupyter.core.errors import RuntimeClosed, UnsupportedBackend
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def context(service: RuntimeService) -> InMemoryContextCapture:
    assert isinstance(service.context, InMemoryContextCapture)
    return service.context


def time_passes(blobs: BlobStore, seconds: float = 2 * GRACE_SECONDS) -> None:
    """Everything stored so far looks `seconds` older to garbage collection."""
    with contextlib.closing(sqlite3.connect(blobs.root / "objects.db", timeout=30)) as conn:
        conn.execute("UPDATE chunks SET touched = touched - ?", (seconds,))
        conn.execute("UPDATE manifests SET touched = touched - ?", (seconds,))
        conn.commit()


def workspace_files(blobs: BlobStore, snapshot_id: str) -> dict[str, str]:
    """SHA-256 of every file a workspace snapshot holds, read back from the blob store."""
    body = blobs.get_manifest(snapshot_id)
    return {
        entry["path"]: hashlib.sha256(blobs.get_bytes(entry["chunks"])).hexdigest()
        for entry in body["files"]
    }


def namespace(blobs: BlobStore, manifest_id: str) -> Any:
    body = blobs.get_manifest(manifest_id)
    return orjson.loads(blobs.get_bytes(body["chunks"]))


def check_index(blobs: BlobStore) -> None:
    """The object index counts exactly the references its manifests hold, and every chunk
    a manifest lists is there (a whole file for a large one)."""
    listed: dict[str, int] = {}
    for manifest_id in blobs.iter_manifests():
        body = blobs.get_manifest(manifest_id)
        for digest in set(body.get("chunks", [])):
            listed[digest] = listed.get(digest, 0) + 1
    with contextlib.closing(sqlite3.connect(blobs.root / "objects.db")) as conn:
        counted = {
            key.hex(): (refs, inline)
            for key, refs, inline in conn.execute(
                "SELECT digest, refs, data IS NOT NULL FROM chunks"
            )
        }
    for digest, count in listed.items():
        assert counted[digest][0] == count, digest
        assert counted[digest][1] or os.path.exists(blobs.chunk_file(digest)), digest
    for digest, (refs, _) in counted.items():
        assert refs == listed.get(digest, 0), digest


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    opened = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    yield opened
    opened.close_store()


def test_close_and_delete_snapshot_collect_on_another_thread(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    collect = service.gc

    def recording_gc(**kwargs: Any) -> Any:
        threads.append(threading.current_thread())
        return collect(grace_seconds=0)

    monkeypatch.setattr(service, "gc", recording_gc)
    service.collector = BackgroundCollector(service.gc, follow_up_seconds=3600)
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    backend = service.backends.get(rid)
    assert backend is not None
    run(backend.write_bytes("dropped.bin", os.urandom(200_000)))
    dropped = service.get_checkpoint(run(service.checkpoint(rid)).checkpoint_id)
    assert dropped.backend_ref is not None and dropped.backend_ref.provider_snapshot_id
    run(service.delete_snapshot(dropped.checkpoint_id))
    assert service.collector.wait_idle(timeout=60)
    run(service.close(rid, discard=True))  # no final checkpoint keeps the file alive
    assert service.collector.wait_idle(timeout=60)
    assert len(threads) == 2 and threading.main_thread() not in threads
    assert service.collector.last_error is None
    report = service.collector.last_report
    assert report is not None and report.freed_chunks == 0  # the first run freed them
    file_chunks = list((service.blobs.root / "chunks").glob("*/*"))
    assert file_chunks == []  # the dropped file's chunk file went in the background


def test_the_collector_runs_again_after_the_grace_period_and_then_rests() -> None:
    runs: list[int] = []
    ran = threading.Event()

    def collect() -> Any:
        runs.append(len(runs))
        ran.set()
        if len(runs) == 1:
            raise OSError("disk busy")  # kept, never raised to whoever asked
        return None

    collector = BackgroundCollector(collect, follow_up_seconds=0.05)
    collector.request()
    assert collector.wait_idle(timeout=60)
    assert isinstance(collector.last_error, OSError)
    ran.clear()
    assert ran.wait(timeout=60)  # the follow-up run
    assert collector.wait_idle(timeout=60)
    for _ in range(200):
        if collector.runs == 2 and collector._thread is None:
            break
        threading.Event().wait(0.01)
    assert runs == [0, 1] and collector.last_error is None
    collector.stop()
    collector.request()  # stopped: nothing more runs
    assert collector.wait_idle(timeout=60) and runs == [0, 1]


def test_a_checkpoint_in_flight_keeps_its_capture_from_collection(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between its capture and its record, a checkpoint's manifest is held (write intent):
    a collection that runs then, even long after the capture, leaves it alone."""
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    context(service).execute(rid, kept="yes")
    reports = []
    snapshot = service.backends.checkpoint_backend

    async def slow_snapshot(**kwargs: Any) -> Any:
        time_passes(service.blobs)  # the capture is old by now
        reports.append(service.gc())
        return await snapshot(**kwargs)

    monkeypatch.setattr(service.backends, "checkpoint_backend", slow_snapshot)
    checkpoint_id = run(service.checkpoint(rid)).checkpoint_id
    manifest_id = service.get_checkpoint(checkpoint_id).context_manifest_id
    assert manifest_id is not None
    assert reports[0].freed_manifests == 0
    assert namespace(service.blobs, manifest_id) == {"kept": "yes"}


# ---- never collect anything reachable: random operations, a collector running beside ----


class ReachableSurvivesCollection(RuleBasedStateMachine):
    """Checkpoints, checkouts, closes, deleted snapshots and collections in random order,
    with another thread collecting all the time; every checkpoint still restores."""

    runtimes = Bundle("runtimes")
    checkpoints = Bundle("checkpoints")

    @initialize(target=runtimes)
    def open_service(self) -> str:
        self.tmp = tempfile.mkdtemp(prefix="ditto-gc-")
        self.service = open_runtime_service(self.tmp, context_factory=InMemoryContextCapture)
        self.files: dict[str, dict[str, bytes]] = {}  # live runtime -> its workspace files
        self.expected: dict[str, tuple[Any, dict[str, str] | None]] = {}
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.collector = threading.Thread(target=self._collect_all_the_time, daemon=True)
        self.collector.start()
        return self._create()

    def _collect_all_the_time(self) -> None:
        while not self.stop.is_set():
            try:
                self.service.gc()
            except BaseException as error:  # reported by teardown
                self.errors.append(error)
                return

    def _create(self) -> str:
        rid = run(self.service.create_runtime("nb.ipynb")).runtime_id
        self.files[rid] = {}
        return rid

    @rule(target=runtimes)
    def create(self) -> str:
        return self._create()

    @rule(rid=runtimes, value=st.integers(0, 3))
    def execute(self, rid: str, value: int) -> None:
        if rid in self.files:
            context(self.service).execute(rid, **{f"v{value}": value})

    @rule(
        rid=runtimes,
        name=st.sampled_from(["a.txt", "b.bin", "big.bin"]),
        seed=st.integers(0, 2),
    )
    def write(self, rid: str, name: str, seed: int) -> None:
        if rid not in self.files:
            return
        size = 100_000 if name == "big.bin" else 300  # a chunk file, or inline
        data = random.Random(seed).randbytes(size)
        backend = self.service.backends.get(rid)
        assert backend is not None
        run(backend.write_bytes(name, data))
        self.files[rid][name] = data

    @rule(target=checkpoints, rid=runtimes)
    def checkpoint(self, rid: str) -> str:
        if rid not in self.files:
            return "none"
        checkpoint_id = run(self.service.checkpoint(rid)).checkpoint_id
        digests = {name: hashlib.sha256(data).hexdigest() for name, data in self.files[rid].items()}
        self.expected[checkpoint_id] = (dict(context(self.service).namespace(rid)), digests)
        return checkpoint_id

    @rule(target=runtimes, checkpoint_id=checkpoints)
    def checkout(self, checkpoint_id: str) -> str:
        if checkpoint_id == "none":
            return self._create()
        try:
            child = run(self.service.checkout(checkpoint_id)).runtime.runtime_id
        except UnsupportedBackend:
            assert self.expected[checkpoint_id][1] is None  # its snapshot was deleted
            return self._create()
        workspace = self.service.workspace_path(child)
        assert workspace is not None
        self.files[child] = {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()}
        namespace_now, digests = self.expected[checkpoint_id]
        assert context(self.service).namespace(child) == namespace_now
        assert {n: hashlib.sha256(d).hexdigest() for n, d in self.files[child].items()} == digests
        return child

    @rule(rid=consumes(runtimes))
    def close(self, rid: str) -> None:
        with contextlib.suppress(RuntimeClosed):
            run(self.service.close(rid))
        self.files.pop(rid, None)

    @rule(checkpoint_id=checkpoints)
    def delete_snapshot(self, checkpoint_id: str) -> None:
        if checkpoint_id == "none":
            return
        run(self.service.delete_snapshot(checkpoint_id))
        for other, (namespace_then, _) in list(self.expected.items()):
            ref = self.service.get_checkpoint(other).backend_ref
            if ref is None or ref.provider_snapshot_id is None:
                self.expected[other] = (namespace_then, None)

    @rule()
    def time_passes(self) -> None:
        time_passes(self.service.blobs)

    @rule()
    def collect(self) -> None:
        self.service.gc()

    def teardown(self) -> None:
        if not hasattr(self, "service"):
            return
        self.stop.set()
        self.collector.join()
        try:
            assert self.errors == []
            time_passes(self.service.blobs)
            self.service.gc()  # everything unreachable is old now: it all goes
            check_index(self.service.blobs)
            blobs = self.service.blobs
            for checkpoint_id, (namespace_then, digests) in self.expected.items():
                record = self.service.get_checkpoint(checkpoint_id)
                assert record.context_manifest_id is not None
                assert namespace(blobs, record.context_manifest_id) == namespace_then
                if digests is not None:
                    assert record.backend_ref is not None
                    snapshot = record.backend_ref.provider_snapshot_id
                    assert snapshot is not None
                    assert workspace_files(blobs, snapshot) == digests
        finally:
            self.service.close_store()
            shutil.rmtree(self.tmp, ignore_errors=True)


TestReachableSurvivesCollection = ReachableSurvivesCollection.TestCase
TestReachableSurvivesCollection.settings = settings(
    max_examples=12,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# ---- a collection killed half way -----------------------------------------------------

_BUILD = """
    import asyncio, json, os, random, sys
    from ditto_jupyter.wiring import open_runtime_service
    from tests.fakes.fake_context_capture import InMemoryContextCapture

    async def main():
        service = open_runtime_service(sys.argv[1], context_factory=InMemoryContextCapture)
        rng = random.Random(7)
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        backend = service.backends.get(rid)
        kept, dropped = [], []
        for round in range(24):
            service.context.execute(rid, round=round)
            for number in range(40):
                await backend.write_bytes(f"f{number}.txt", rng.randbytes(200))
            await backend.write_bytes("big.bin", rng.randbytes(80_000))
            checkpoint_id = (await service.checkpoint(rid)).checkpoint_id
            (kept if round % 4 == 0 else dropped).append(checkpoint_id)
        for checkpoint_id in dropped:
            await service.delete_snapshot(checkpoint_id)
        print(json.dumps({"kept": kept, "dropped": dropped}))
        service.close_store()

    asyncio.run(main())
"""

_COLLECT = """
    import sys
    from ditto_jupyter.wiring import open_runtime_service
    from tests.fakes.fake_context_capture import InMemoryContextCapture

    service = open_runtime_service(sys.argv[1], context_factory=InMemoryContextCapture)
    print("ready", flush=True)
    print(service.gc(grace_seconds=0), flush=True)
"""


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow  # collector processes killed at random points, several rounds
def test_a_collection_killed_half_way_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    built = _python(_BUILD, str(data))
    out, err = built.communicate()
    assert built.returncode == 0, err
    checkpoints = orjson.loads(out)
    rng = random.Random()
    killed_mid_way = 0
    for _ in range(6):
        collecting = _python(_COLLECT, str(data))
        assert collecting.stdout is not None
        assert collecting.stdout.readline() == "ready\n", collecting.communicate()[1]
        with contextlib.suppress(subprocess.TimeoutExpired):
            collecting.wait(timeout=rng.uniform(0.0, 0.15))
        if collecting.returncode is None:
            killed_mid_way += 1
        collecting.send_signal(signal.SIGKILL)
        collecting.communicate()
        service = open_runtime_service(data, context_factory=InMemoryContextCapture)
        try:
            check_index(service.blobs)
            for checkpoint_id in checkpoints["kept"] + checkpoints["dropped"]:
                record = service.get_checkpoint(checkpoint_id)
                assert record.context_manifest_id is not None
                assert "round" in namespace(service.blobs, record.context_manifest_id)
            for checkpoint_id in checkpoints["kept"]:
                record = service.get_checkpoint(checkpoint_id)
                assert record.backend_ref is not None and record.backend_ref.provider_snapshot_id
                files = workspace_files(service.blobs, record.backend_ref.provider_snapshot_id)
                assert len(files) == 41
        finally:
            service.close_store()
    assert killed_mid_way > 0, "no collection was killed before it finished"
    service = open_runtime_service(data, context_factory=InMemoryContextCapture)
    try:
        service.gc(grace_seconds=0)
        check_index(service.blobs)
        child = run(service.checkout(checkpoints["kept"][-1])).runtime.runtime_id
        workspace = service.workspace_path(child)
        assert workspace is not None and len(list(workspace.iterdir())) == 41
        large = {p.name for p in (service.blobs.root / "chunks").glob("*/*")}
        assert len(large) == len(checkpoints["kept"])  # one big.bin chunk per kept snapshot
    finally:
        service.close_store()


def test_a_failed_checkpoint_never_deletes_a_snapshot_another_runtime_records(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout child's clean checkpoint reuses its parent's snapshot; when recording it
    fails, the snapshot it would have discarded is the parent's, and must stay."""
    parent = run(service.create_runtime("nb.ipynb")).runtime_id
    backend = service.backends.get(parent)
    assert backend is not None
    run(backend.write_bytes("kept.txt", b"the parent's file"))
    recorded = service.get_checkpoint(run(service.checkpoint(parent)).checkpoint_id)
    child = run(service.checkout(recorded.checkpoint_id)).runtime.runtime_id

    def refused(checkpoint: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(service.store, "put_checkpoint", refused)
    with pytest.raises(OSError, match="disk full"):
        run(service.checkpoint(child))
    monkeypatch.undo()
    again = run(service.checkout(recorded.checkpoint_id)).runtime.runtime_id
    workspace = service.workspace_path(again)
    assert workspace is not None and (workspace / "kept.txt").read_bytes() == b"the parent's file"

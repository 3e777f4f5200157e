"""The kernel's memory (`capture.memory`): one object holds what the capture keeps between
calls, and its one `forget()` is what a restore and a lost chunk both call."""

from __future__ import annotations

from pathlib import Path

import pytest

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import CaptureLost
from ditto_jupyter.kernel.capture import restore_namespace
from ditto_jupyter.kernel.capture.capturing import capture_with_snapshot
from ditto_jupyter.kernel.capture.chunks import knows_manifest
from ditto_jupyter.kernel.capture.kernel_entry import keep_base, take_base
from ditto_jupyter.kernel.capture.memory import MEMORY
from ditto_jupyter.kernel.capture_again import record_own_capture


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    MEMORY.forget()  # the process's chunk memo knows other tests' stores
    return BlobStore(tmp_path / "blobs", durable=False)


def test_forget_makes_every_base_stale_and_empties_the_chunk_memo(blobs: BlobStore) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "data": bytes(300_000)}
    snapshot, capture = capture_with_snapshot(namespace, blobs)
    assert snapshot.base is not None and snapshot.base.usable()
    assert knows_manifest(capture.manifest_id)
    keep_base(namespace, snapshot.base)
    MEMORY.forget()
    assert not snapshot.base.usable()
    assert not knows_manifest(capture.manifest_id)
    assert take_base(namespace) is snapshot.base  # kept until taken: its taker sees it stale


def test_a_restore_forgets_and_then_learns_the_manifest_it_restored(blobs: BlobStore) -> None:
    namespace: dict[str, object] = {"__name__": "__main__", "data": bytes(300_000)}
    snapshot, capture = capture_with_snapshot(namespace, blobs)
    assert snapshot.base is not None
    other, _ = capture_with_snapshot({"__name__": "__main__", "x": bytes(200_000)}, blobs)
    assert other.base is not None and other.base.manifest_id is not None
    restore_namespace({"__name__": "__main__"}, blobs, capture.manifest_id)
    assert not snapshot.base.usable()
    assert knows_manifest(capture.manifest_id)
    assert not knows_manifest(other.base.manifest_id)


def test_a_capture_the_server_refused_forgets_before_capturing_again() -> None:
    generations: list[int] = []

    def take(whole: bool) -> bool:
        generations.append(MEMORY.generation)
        return whole

    def record(whole: bool) -> str:
        if not whole:
            raise CaptureLost("a chunk is gone")
        return "recorded"

    assert record_own_capture(take, record) == (True, "recorded")
    assert generations[1] == generations[0] + 1

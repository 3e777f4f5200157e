"""A checkpoint marks referenced in the blob catalogue only the manifests its parent did not
name (issue 25 section 2: one transaction, not several): one after a cell that changed
nothing makes no catalogue transaction for it. A mark is a hint, so a collection still
keeps what such a checkpoint names when the marks are gone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture, ctx


def test_a_checkpoint_marks_only_what_its_parent_did_not_name(tmp_path: Path) -> None:
    service = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    marked: list[list[str]] = []
    mark = service.blobs.mark_referenced

    def spy(manifest_ids: Iterable[str]) -> None:
        ids = list(manifest_ids)
        marked.append(ids)
        mark(ids)

    service.blobs.mark_referenced = spy  # type: ignore[method-assign]

    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb", "ana")).runtime_id
        backend = service.backends.get(rid)
        assert backend is not None
        await backend.write_bytes("data.txt", b"kept")
        ctx(service).execute(rid, a=1)
        first = await service.checkpoint(rid)
        parent = service.get_checkpoint(first.checkpoint_id)
        assert parent.backend_ref is not None
        assert marked == [[parent.context_manifest_id, parent.backend_ref.provider_snapshot_id]]
        ctx(service).execute(rid)  # a cell that changed nothing
        same = await service.checkpoint(rid)
        assert marked == [marked[0]]  # nothing new: no transaction
        ctx(service).execute(rid, b=2)
        changed = await service.checkpoint(rid)
        newer = service.get_checkpoint(changed.checkpoint_id).context_manifest_id
        assert marked[1:] == [[newer]]  # the workspace snapshot is its parent's

        # the marks gone (as when a checkpoint naming them is deleted), a collection asks
        # the store, and keeps what the later checkpoints name without having marked it
        service.blobs.mark_for_collection(marked[0])
        service.gc(grace_seconds=0)
        child = await service.checkout(same.checkpoint_id)
        workspace = service.workspace_path(child.runtime.runtime_id)
        assert workspace is not None and (workspace / "data.txt").read_bytes() == b"kept"
        assert ctx(service).namespace(child.runtime.runtime_id) == {"a": 1}

    try:
        asyncio.run(scenario())
    finally:
        service.close_store()

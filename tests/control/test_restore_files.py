"""Restore in place brings the files back with the variables (RuntimeService, real local
workspaces; the context is the JSON test double).

A restore makes the workspace exactly the checkpoint's snapshot, then replaces the
variables. Files written since the head, which the restore replaces, are kept in a
checkpoint named `before-restore` (nothing else holds them). A failure of the variables
puts the files back. A kernel that restored its own variables (`%restore`) gets its files
back through `record_restore`. An E2B runtime keeps its files as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.control.in_place_restore import BEFORE_RESTORE_NAME
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.wiring import open_runtime_service
from tests.control.test_undo_in_place import context, e2b_service, run, tree
from tests.fakes.e2b_cloud import FakeE2BCloud
from tests.fakes.fake_context_capture import InMemoryContextCapture

pytest_plugins = ["tests.fakes.e2b_fixtures"]  # the `fake_e2b` fixture


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    yield svc
    svc.close_store()


def kept_checkpoints(service: RuntimeService, rid: str) -> list[str]:
    return [
        c.checkpoint_id
        for c in service.store.list_checkpoints()
        if c.runtime_id == rid and c.name == BEFORE_RESTORE_NAME
    ]


async def two_checkpoints(service: RuntimeService) -> tuple[str, Path, str, dict[str, Any]]:
    """A runtime with checkpoint `first` (f.txt one, step 1), then files and a variable
    changed and checkpointed as `second`; (runtime, workspace, first's id, first's tree)."""
    rid = (await service.create_runtime("nb.ipynb")).runtime_id
    root = service.workspace_path(rid)
    assert root is not None
    (root / "f.txt").write_text("one")
    (root / "data").mkdir()
    (root / "data" / "kept.csv").write_text("a,b\n")
    context(service).execute(rid, step=1)
    first = (await service.checkpoint(rid, "first")).checkpoint_id
    first_tree = tree(root)
    (root / "f.txt").write_text("two")
    (root / "added.txt").write_text("added after first")
    context(service).execute(rid, step=2)
    await service.checkpoint(rid, "second")
    return rid, root, first, first_tree


def test_restore_brings_the_files_back_with_the_variables(service: RuntimeService) -> None:
    async def scenario() -> None:
        rid, root, first, first_tree = await two_checkpoints(service)
        await service.restore(rid, first)
        assert tree(root) == first_tree  # f.txt as it was, added.txt gone
        assert context(service).namespace(rid) == {"step": 1}
        assert service.store.get_head(rid) == first
        # every file the restore replaced is in a checkpoint (`second`): none is kept apart
        assert kept_checkpoints(service, rid) == []

    run(scenario())


def test_files_written_since_the_head_are_kept_in_a_before_restore_checkpoint(
    service: RuntimeService,
) -> None:
    async def scenario() -> None:
        rid, root, first, first_tree = await two_checkpoints(service)
        (root / "unsaved.txt").write_text("written after the last checkpoint")
        await service.restore(rid, first)
        assert tree(root) == first_tree
        [kept] = kept_checkpoints(service, rid)
        child = await service.checkout(kept)
        child_root = service.workspace_path(child.runtime.runtime_id)
        assert child_root is not None
        assert (child_root / "unsaved.txt").read_text() == "written after the last checkpoint"
        assert (child_root / "f.txt").read_text() == "two"

    run(scenario())


def test_when_the_variables_cannot_follow_the_files_go_back_too(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        rid, root, first, _ = await two_checkpoints(service)
        head = service.store.get_head(rid)
        expected = tree(root)

        async def refuse(*args: Any) -> Any:
            raise BackendError("the kernel died")

        monkeypatch.setattr(context(service), "restore", refuse)
        with pytest.raises(BackendError, match="the kernel died"):
            await service.restore(rid, first)
        assert tree(root) == expected
        assert service.store.get_head(rid) == head

    run(scenario())


def test_a_kernel_that_restored_itself_gets_its_files_back(service: RuntimeService) -> None:
    async def scenario() -> None:
        rid, root, first, first_tree = await two_checkpoints(service)
        await service.record_restore(rid, first)  # `%restore`: the kernel did the variables
        assert tree(root) == first_tree
        assert service.store.get_head(rid) == first

    run(scenario())


def test_an_e2b_runtime_keeps_its_files_and_gets_its_variables_back(
    fake_e2b: FakeE2BCloud, tmp_path: Path
) -> None:
    service = e2b_service(tmp_path / "e2b-data")

    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        backend = service.backends.get(rid)
        assert backend is not None
        await backend.write_bytes("model.txt", b"v1")
        context(service).execute(rid, v=1)
        first = (await service.checkpoint(rid, "first")).checkpoint_id
        await backend.write_bytes("model.txt", b"v2")
        context(service).execute(rid, v=2)
        await service.checkpoint(rid)
        await service.restore(rid, first)
        assert context(service).namespace(rid) == {"v": 1}
        assert await backend.read_bytes("model.txt") == b"v2"

    try:
        run(scenario())
    finally:
        service.close_store()


def test_undo_keeps_files_written_since_the_head_in_a_before_undo_checkpoint(
    service: RuntimeService,
) -> None:
    """Undo replaces the files with the last cell's parent's: one a terminal wrote after the
    last cell's checkpoint is kept, as a restore keeps it."""
    from tests.control.test_undo_in_place import cell

    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        root = service.workspace_path(rid)
        assert root is not None
        (root / "f.txt").write_text("one")
        await cell(service, rid, 1, v=1)
        (root / "f.txt").write_text("two")
        await cell(service, rid, 2, v=2)
        (root / "terminal.txt").write_text("written after cell 2's checkpoint")
        await service.undo(rid)
        assert (root / "f.txt").read_text() == "one" and not (root / "terminal.txt").exists()
        [kept] = [
            c.checkpoint_id
            for c in service.store.list_checkpoints()
            if c.runtime_id == rid and c.name == "before-undo"
        ]
        child = await service.checkout(kept)
        child_root = service.workspace_path(child.runtime.runtime_id)
        assert child_root is not None
        assert (child_root / "terminal.txt").read_text() == "written after cell 2's checkpoint"

    run(scenario())

"""Undo under RuntimeService on real local workspaces (the context is the JSON test double).

Undo brings the workspace back to the snapshot exactly, in place: files added since are
removed, changed ones written back, folders made and removed. It is safe: when bringing
the files back fails part way, or the variables cannot follow, the files are put back as
they were before the undo and the head does not move. An E2B runtime cannot take files
back in place: undo is refused before anything changes.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.backends.local import in_place
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import BackendError, Conflict, UnsupportedBackend
from ditto_jupyter.core.models import AutoCheckpointCell
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.e2b_cloud import FakeE2BCloud
from tests.fakes.fake_context_capture import InMemoryContextCapture

pytest_plugins = ["tests.fakes.e2b_fixtures"]  # the `fake_e2b` fixture


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    yield svc
    svc.close_store()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def context(service: RuntimeService) -> InMemoryContextCapture:
    assert isinstance(service.context, InMemoryContextCapture)
    return service.context


def tree(root: Path) -> dict[str, str | None]:
    """Every entry under `root`: a file's text, a folder's None, a symlink's '-> target'."""
    found: dict[str, str | None] = {}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                found[rel] = None
            else:
                found[rel] = path.read_text()
    return found


async def cell(service: RuntimeService, rid: str, count: int, **values: Any) -> str:
    """A cell that ran and its automatic checkpoint (as %autocheckpoint records it)."""
    context(service).execute(rid, **values)
    automatic = AutoCheckpointCell(execution_count=count, source=f"cell {count}")
    made = await service.checkpoint(rid, f"cell-{count}", automatic=automatic)
    return made.checkpoint_id


def test_undo_brings_the_workspace_back_exactly(service: RuntimeService) -> None:
    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        root = service.workspace_path(rid)
        assert root is not None
        (root / "data").mkdir()
        (root / "data" / "kept.csv").write_text("a,b\n")
        (root / "notes.txt").write_text("v1")
        os.symlink("notes.txt", root / "link")
        before = await cell(service, rid, 1, rows=[1])
        expected = tree(root)

        (root / "notes.txt").write_text("v2, longer")
        (root / "data" / "kept.csv").unlink()
        (root / "new").mkdir()
        (root / "new" / "deep.txt").write_text("x")
        (root / "link").unlink()
        (root / "link").write_text("now a file")
        await cell(service, rid, 2, rows=[1, 2])

        undone = await service.undo(rid)
        assert undone.checkpoint_id == before and undone.undone_cell.execution_count == 2
        assert tree(root) == expected
        assert context(service).namespace(rid) == {"rows": [1]}
        assert service.store.get_head(rid) == before
        # the workspace is that snapshot now: the next checkpoint reuses it
        again = await service.checkpoint(rid)
        assert (
            service.get_checkpoint(again.checkpoint_id).backend_ref
            == service.get_checkpoint(before).backend_ref
        )

    run(scenario())


def test_a_failure_part_way_puts_the_files_back(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        root = service.workspace_path(rid)
        assert root is not None
        for name in ("a.txt", "b.txt", "c.txt"):
            (root / name).write_text("old " + name)
        await cell(service, rid, 1, step=1)
        for name in ("a.txt", "b.txt", "c.txt"):
            (root / name).write_text("new " + name)
        (root / "extra.txt").write_text("extra")
        head = await cell(service, rid, 2, step=2)
        expected = tree(root)

        real = in_place._write_file
        written: list[str] = []

        def fail_on_the_second(blobs: Any, where: str, entry: Any) -> Any:
            written.append(entry.path)
            if len(written) == 2:
                raise OSError(5, "Input/output error")
            return real(blobs, where, entry)

        monkeypatch.setattr(in_place, "_write_file", fail_on_the_second)
        with pytest.raises(BackendError, match="Input/output error"):
            await service.undo(rid)
        monkeypatch.setattr(in_place, "_write_file", real)
        assert len(written) >= 2  # it had started changing files
        assert tree(root) == expected  # and put them all back
        assert service.store.get_head(rid) == head
        assert context(service).namespace(rid) == {"step": 2}

    run(scenario())


def test_when_the_variables_cannot_follow_the_files_go_back_too(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        root = service.workspace_path(rid)
        assert root is not None
        (root / "f.txt").write_text("one")
        await cell(service, rid, 1, v=1)
        (root / "f.txt").write_text("two")
        head = await cell(service, rid, 2, v=2)

        async def refuse(*args: Any) -> Any:
            raise BackendError("the kernel died")

        monkeypatch.setattr(context(service), "restore", refuse)
        with pytest.raises(BackendError, match="the kernel died"):
            await service.undo(rid)
        assert (root / "f.txt").read_text() == "two"
        assert service.store.get_head(rid) == head

    run(scenario())


def test_nothing_to_undo_is_a_conflict(service: RuntimeService) -> None:
    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        with pytest.raises(Conflict, match="no checkpoint"):
            await service.undo(rid)
        await cell(service, rid, 1, v=1)
        with pytest.raises(Conflict, match="first checkpoint"):
            await service.undo(rid)
        await service.checkpoint(rid, "by hand")
        with pytest.raises(Conflict, match="was not taken by %autocheckpoint"):
            await service.undo(rid)

    run(scenario())


def e2b_service(root: Path) -> RuntimeService:
    """A service whose runtimes live in E2B sandboxes (the fake cloud must be up)."""
    from ditto_jupyter.backends.e2b import E2BConfig, E2BProvider

    return open_runtime_service(
        root,
        context_factory=InMemoryContextCapture,
        extra_providers={"e2b": E2BProvider(E2BConfig(retries=0))},
        default_backend="e2b",
    )


def test_undo_on_e2b_is_refused_before_anything_changes(
    fake_e2b: FakeE2BCloud, tmp_path: Path
) -> None:
    service = e2b_service(tmp_path / "e2b-data")

    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        backend = service.backends.get(rid)
        assert backend is not None
        await backend.write_bytes("model.txt", b"v1")
        await cell(service, rid, 1, v=1)
        await backend.write_bytes("model.txt", b"v2")
        head = await cell(service, rid, 2, v=2)
        with pytest.raises(UnsupportedBackend, match="cannot bring a snapshot back in place"):
            await service.undo(rid)
        assert await backend.read_bytes("model.txt") == b"v2"
        assert context(service).namespace(rid) == {"v": 2}
        assert service.store.get_head(rid) == head
        await service.close(rid, discard=True)

    try:
        run(scenario())
    finally:
        service.close_store()

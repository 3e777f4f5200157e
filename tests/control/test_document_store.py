"""The notebook documents checkpoints hold, in a real blob store and a real SQLite store.

A document comes back exactly as it was stored; a second document that differs by one cell
writes about that cell only; images are chunks of their own, shared between documents;
checkpoints keep their documents from garbage collection, and a prune lets them go.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from ditto_jupyter.control.checkpoint_documents import DocumentToRecord
from ditto_jupyter.control.diff.cells import compare_cells
from ditto_jupyter.control.documents import DocumentStore
from ditto_jupyter.control.documents.storage import cell_views
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import AutoCheckpointCell, NotebookDocument
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture


def image() -> str:
    return base64.b64encode(os.urandom(30_000)).decode()


def notebook(cells: int, *, images: int = 0) -> dict[str, Any]:
    made = nbformat.v4.new_notebook()
    made.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    for index in range(cells):
        cell = nbformat.v4.new_code_cell(f"value_{index} = {index}\nprint(value_{index})")
        cell["id"] = f"cell-{index}"
        cell.execution_count = index + 1
        cell.outputs = [nbformat.v4.new_output("stream", text=f"{index}\n")]
        if index < images:
            bundle = {"image/png": image(), "text/plain": "<Figure>"}
            cell.outputs.append(nbformat.v4.new_output("display_data", data=bundle))
        made.cells.append(cell)
    made.cells.append(nbformat.v4.new_markdown_cell("# notes\n", id="notes"))
    return json.loads(nbformat.writes(made))  # type: ignore[no-any-return]


def as_document(raw: dict[str, Any]) -> NotebookDocument:
    return NotebookDocument.model_validate(raw, strict=False)


@pytest.fixture
def store(tmp_path: Path) -> DocumentStore:
    return DocumentStore(BlobStore(tmp_path / "blobs"))


def test_a_document_comes_back_exactly(store: DocumentStore) -> None:
    raw = notebook(40, images=5)
    raw["cells"][3]["source"] = ["line one\n", "line two"]  # nbformat's list form, kept
    raw["cells"][-1]["attachments"] = {"pic.png": {"image/png": image()}}
    saved = store.save(as_document(raw))
    assert saved.cells == 41
    assert store.document(saved.manifest_id) == raw


def test_one_changed_cell_writes_about_one_cell(store: DocumentStore) -> None:
    raw = notebook(100, images=20)
    first = store.save(as_document(raw))
    assert first.bytes_written > 20 * 30_000  # the images, once
    edited = copy.deepcopy(raw)
    edited["cells"][57]["source"] = "value_57 = 'changed'"
    second = store.save(as_document(edited))
    assert second.manifest_id != first.manifest_id
    assert second.bytes_written < 4096  # one cell, one part, a short top manifest
    assert store.document(second.manifest_id) == edited
    again = store.save(as_document(edited))
    assert (again.manifest_id, again.bytes_written) == (second.manifest_id, 0)


def test_cells_compare_without_loading_their_images(store: DocumentStore) -> None:
    raw = notebook(30, images=3)
    before = store.save(as_document(raw))
    after = copy.deepcopy(raw)
    after["cells"][1]["outputs"][1]["data"]["image/png"] = image()  # a new plot
    after["cells"][10]["source"] = "value_10 = 'edited'"
    del after["cells"][20]
    after["cells"].insert(5, nbformat.v4.new_code_cell("inserted", id="new-one"))
    diff = compare_cells(store.views(before.manifest_id), cell_views(as_document(after)))
    assert [c.source for c in diff.added] == ["inserted"]
    assert [c.index for c in diff.removed] == [20]
    changes = {c.index_old: c for c in diff.changed}
    assert set(changes) == {1, 10}
    assert changes[1].outputs_changed and changes[1].source_diff is None
    assert "+value_10 = 'edited'" in (changes[10].source_diff or "")
    assert diff.unchanged == 31 - 3


def test_a_cell_that_is_not_a_notebook_cell_is_refused_by_name() -> None:
    from ditto_jupyter.control.documents import check_document

    raw = notebook(2)
    raw["cells"][1]["cell_type"] = "picture"
    with pytest.raises(InvalidRequest, match=r"document.cells\[1\] has cell_type 'picture'"):
        check_document(as_document(raw))


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    svc = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    yield svc
    svc.close_store()


def test_checkpoints_keep_their_documents_and_a_prune_lets_them_go(
    service: RuntimeService,
) -> None:
    async def scenario() -> None:
        rid = (await service.create_runtime("nb.ipynb")).runtime_id
        made = []
        for count in range(1, 4):
            raw = notebook(count, images=1)
            raw["cells"][0]["outputs"][1]["data"]["image/png"] = image()  # each its own plot
            record = DocumentToRecord(as_document(raw), "request")
            automatic = AutoCheckpointCell(execution_count=count, source=f"cell {count}")
            result = await service.checkpoint(rid, document=record, automatic=automatic)
            made.append(result.checkpoint_id)
        assert service.gc(grace_seconds=0).freed_manifests == 0
        for checkpoint_id in made:
            assert service.checkpoint_document(checkpoint_id)["cells"]
        pruned = await service.prune_automatic(rid, keep=1)
        assert pruned.pruned == made[:2]  # the newest (the head) stays whole
        report = service.gc(grace_seconds=0)
        assert report.freed_bytes > 2 * 30_000  # the pruned documents' own images
        with pytest.raises(Exception, match="holds no notebook document"):
            service.checkpoint_document(made[0])
        assert service.checkpoint_document(made[2])["cells"]

    asyncio.run(scenario())

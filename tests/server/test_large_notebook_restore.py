"""A restore that carries a large old notebook (cells without ids) counts its changed
cells off the event loop, with the cheaper alignment, and says so (issue 40 section 8).

A real Jupyter server with the extension, a real SQLite store and a real kernel. The
count's comparison is watched by a spy around the real `changed_cell_count`: it must run
on a worker thread, never on the loop's. How long it takes is measured in
benchmarks/bench_cell_alignment.py, not here.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ditto_jupyter.control.diff import comparisons
from tests.control.test_cell_alignment import old_notebook, sources
from tests.server.conftest import OpenRuntime

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def test_a_restore_with_1500_cells_without_ids_counts_off_the_loop_and_says_how(
    api: Api, open_runtime: OpenRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = await open_runtime("old.ipynb", x=1)
    rid = runtime.runtime_id
    before = sources(1500)
    held = old_notebook(before).model_dump()
    status, made = await api("POST", "checkpoint", {"runtime_id": rid, "document": held})
    assert status == 200, made
    after = list(before)
    after[10] += "  # edited"
    after[1400] += "  # edited"
    open_now = old_notebook(after).model_dump()

    threads: list[threading.Thread] = []
    real = comparisons.changed_cell_count

    def spy_changed_cell_count(*args: Any) -> Any:
        threads.append(threading.current_thread())
        return real(*args)

    monkeypatch.setattr(comparisons, "changed_cell_count", spy_changed_cell_count)
    body = {"runtime_id": rid, "checkpoint_id": made["checkpoint_id"], "document": open_now}
    status, restored = await api("POST", "restore", body)
    assert status == 200, restored
    assert restored["cells_changed"] == 2
    assert "aligned by their sources" in restored["cells_note"]
    assert threads and all(t is not threading.main_thread() for t in threads), threads

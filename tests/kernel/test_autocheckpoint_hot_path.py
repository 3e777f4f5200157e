"""The autocheckpoint hook's cheap paths (issue 12): each must give what the slow path gives.

Unit tests on the pieces; tests/kernel/test_autocheckpoint.py drives the hook in real kernels.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ditto_jupyter.kernel.capture import open_blob_store
from ditto_jupyter.kernel.capture.journal import cell_python, only_quiet_magics
from ditto_jupyter.kernel.capture.kernel_entry import collection_paused
from ditto_jupyter.kernel.write_behind import QUIET_S, WriteBehind


def test_collection_is_paused_inside_and_left_as_it_was_after() -> None:
    assert gc.isenabled()
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()  # a notebook that turned collection off keeps it off
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_collection_comes_back_when_the_block_raises() -> None:
    try:
        with collection_paused():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()


def test_a_write_behind_job_waits_for_quiet_unless_someone_waits_for_it() -> None:
    ran: list[str] = []

    async def cell() -> None:
        writer = WriteBehind("test-quiet")
        writer.submit_when_idle(lambda: ran.append("first"))
        for _ in range(3):
            await asyncio.sleep(0)  # the task ends and the loop turns: not started yet
        assert ran == []
        writer.flush()  # a magic waits for it: it runs now
        assert ran == ["first"]
        writer.submit_when_idle(lambda: ran.append("second"))
        await asyncio.sleep(QUIET_S * 10)
        writer.start_waiting()  # nothing left waiting: a no-op
        writer.flush()
        assert ran == ["first", "second"]

    asyncio.run(cell())


def test_without_a_running_loop_a_write_behind_job_starts_at_once() -> None:
    ran: list[int] = []
    writer = WriteBehind("test-no-loop")
    writer.submit_when_idle(lambda: ran.append(1))
    writer.flush()
    assert ran == [1]


class _Shell:
    """What `_python_of` reads: the history's raw and transformed cells, `transform_cell`."""

    def __init__(self, raw: list[str], parsed: list[str]) -> None:
        self.history_manager = SimpleNamespace(input_hist_raw=raw, input_hist_parsed=parsed)
        self.events = SimpleNamespace(register=lambda *_: None)
        self.transformed: list[str] = []

    def transform_cell(self, source: str) -> str:
        self.transformed.append(source)
        return f"# transformed\n{source}"


def _python_of(shell: _Shell, source: str) -> str:
    return cell_python(shell, source)


def test_the_cell_as_python_comes_from_the_history_when_it_stored_this_cell() -> None:
    shell = _Shell(["", "%checkpoints"], ["", "get_ipython().run_line_magic('checkpoints', '')"])
    python = _python_of(shell, "%checkpoints\n")
    assert python == "get_ipython().run_line_magic('checkpoints', '')"
    assert shell.transformed == []
    assert only_quiet_magics(python)


def test_a_cell_the_history_did_not_store_is_transformed_again() -> None:
    shell = _Shell(["", "x = 1"], ["", "x = 1"])
    assert _python_of(shell, "y = 2") == "# transformed\ny = 2"  # run without history
    shell = _Shell(["", "x = 1"], [""])  # the lists disagree: trust neither
    assert _python_of(shell, "x = 1") == "# transformed\nx = 1"
    assert not only_quiet_magics("x = 1")


def test_the_blob_store_is_one_object_however_its_root_is_spelled(
    tmp_path: Path, monkeypatch: Any
) -> None:
    root = tmp_path / "blobs"
    root.mkdir()
    monkeypatch.chdir(tmp_path)
    first = open_blob_store(root)
    assert open_blob_store(str(root)) is first
    assert open_blob_store("blobs") is first
    assert open_blob_store(tmp_path / "." / "blobs") is first


@pytest.mark.parametrize("magic", ["pause", "pause nightly", "budget", "checkpoint", "diff"])
def test_a_cell_of_our_reading_magics_is_quiet(magic: str) -> None:
    """`%pause` (and `%budget`) change no variable, so a capture inside them follows the
    journal: before, `%pause` after a `%checkpoint` pickled the whole namespace again
    (`benchmarks/bench_capture_paths.py`: 5.2 s against 0.28 s for `%checkpoint`)."""
    name, _, arguments = magic.partition(" ")
    assert only_quiet_magics(f"get_ipython().run_line_magic({name!r}, {arguments!r})")


@pytest.mark.parametrize("magic", ["restore", "undo", "resume", "checkout_and_bind"])
def test_a_cell_of_a_magic_that_changes_variables_is_not_quiet(magic: str) -> None:
    assert not only_quiet_magics(f"get_ipython().run_line_magic({magic!r}, '')")

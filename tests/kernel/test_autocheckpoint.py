"""%autocheckpoint in a real ipykernel with no server: a checkpoint `cell-<n>` after every
cell that changed something, recorded by the in-process RuntimeService on the SQLite store
in DITTO_DATA_DIR, which the test reads through a service of its own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.models import AutoCheckpointCell, RuntimeCheckpoint, SessionRecord
from ditto_jupyter.kernel.autocheckpoint import MAX_SOURCE_BYTES, automatic_cell
from ditto_jupyter.kernel.magics import cell_line
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.support.kernel_cells import CellOutput, value, wait_for_autocheckpoints
from tests.support.magic_display import printed_once, returned_once
from tests.support.standalone_kernel import StandaloneKernel


class Kernel(StandaloneKernel):
    def ok(self, code: str) -> CellOutput:
        out = self.run(code)
        assert out.error is None, out.error
        assert out.stderr == "", out.stderr
        return out


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def kernel(data_dir: Path, tmp_path: Path) -> Iterator[Kernel]:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    k = Kernel(data_dir, cwd)
    k.ok("%load_ext ditto_jupyter")
    yield k
    k.stop()


def store_view(data_dir: Path) -> RuntimeService:
    """A service of the test's own on the kernel's data directory (reads the same SQLite)."""
    return open_runtime_service(data_dir, context_factory=InMemoryContextCapture)


def checkpoints(kernel: Kernel, data_dir: Path, runtime_id: str) -> list[RuntimeCheckpoint]:
    """The runtime's checkpoints, once the kernel's write-behind has recorded every
    automatic checkpoint taken so far (as any magic would wait for)."""
    wait_for_autocheckpoints(kernel.client)
    return stored_checkpoints(data_dir, runtime_id)


def source_of(checkpoint: RuntimeCheckpoint) -> str:
    """The source of the cell an automatic checkpoint followed."""
    assert checkpoint.automatic is not None, checkpoint.name
    return checkpoint.automatic.source


def stored_checkpoints(data_dir: Path, runtime_id: str) -> list[RuntimeCheckpoint]:
    """The runtime's checkpoints as the store has them now."""
    service = store_view(data_dir)
    try:
        return service.store.list_checkpoints(runtime_id)
    finally:
        service.close_store()


def runtime_id(kernel: Kernel) -> str:
    magics = "get_ipython().magics_manager.registry['DittoMagics']"
    rid = value(kernel.client, f"{magics}.control.runtime_id")
    assert isinstance(rid, str)
    return rid


def names(listed: list[RuntimeCheckpoint]) -> list[str | None]:
    return [c.name for c in listed]


def test_on_off_state_and_a_checkpoint_per_changing_cell(kernel: Kernel, data_dir: Path) -> None:
    assert printed_once(kernel.ok("%autocheckpoint")).startswith("autocheckpoint off: ")
    on = printed_once(kernel.ok("%autocheckpoint on --keep 5"))
    assert on.startswith("autocheckpoint on: ") and "the newest 5 kept" in on
    rid = runtime_id(kernel)
    kernel.ok("a = [1, 2]")  # cell 3 (1: load_ext, 2: on, 3: runtime id, 4: this)
    kernel.ok("print('nothing changes')")  # unchanged: skipped
    kernel.ok("a.append(3)\nb = 'two\\nlines'")
    listed = checkpoints(kernel, data_dir, rid)
    auto = [c for c in listed if c.automatic is not None]
    counts = [c.automatic.execution_count for c in auto if c.automatic is not None]
    assert names(auto) == [f"cell-{n}" for n in counts]
    # the "on" cell (a baseline), the runtime-id cell (it left `_j` behind), a = ..., append
    assert len(auto) == 4 and counts == sorted(counts)
    last = auto[-1]
    assert last.metadata == {}  # the cell is the checkpoint's own field, not metadata
    assert last.automatic == AutoCheckpointCell(
        execution_count=counts[-1], source="a.append(3)\nb = 'two\\nlines'", failed=False
    )
    assert source_of(auto[-2]) == "a = [1, 2]"
    state = printed_once(kernel.ok("%autocheckpoint"))
    assert state.startswith("autocheckpoint on: ") and f"last cell-{counts[-1]}" in state
    assert re.search(r"4 taken, [1-9]\d* skipped", state), state
    assert printed_once(kernel.ok("%autocheckpoint off")) == "autocheckpoint off"
    kernel.ok("c = 'after off'")
    assert len(checkpoints(kernel, data_dir, rid)) == len(listed)  # nothing after off


def test_a_cell_run_straight_after_does_not_leak_into_the_checkpoint_before(
    kernel: Kernel, data_dir: Path
) -> None:
    rid = runtime_id(kernel)
    kernel.ok("import numpy as np\n%autocheckpoint on")
    kernel.ok("big = np.zeros(4_000_000)")  # 30 MiB written behind the reply
    kernel.ok("big[:] = 1.0")  # sent as soon as the reply came: waits for the copy
    taken = checkpoints(kernel, data_dir, rid)
    sources = {source_of(c): c.name for c in taken[-2:]}
    zeros = sources["big = np.zeros(4_000_000)"]
    assert printed_once(kernel.ok(f"%restore {zeros}")).startswith("restored ")
    assert value(kernel.client, "float(big.sum())") == 0.0


def test_cells_run_back_to_back_lose_no_checkpoint(kernel: Kernel, data_dir: Path) -> None:
    """Run All: a cell that reads `big` while its first write is still under way changes
    nothing (skipped); the cells after it keep `big`'s stored form, which must name the
    chunks that first write stores."""
    rid = runtime_id(kernel)
    kernel.ok("import numpy as np\n%autocheckpoint on")
    cells = [
        "big = np.random.default_rng(0).random(8_000_000)",  # 61 MiB written behind
        "total = float(big.sum())",
        "same = big.shape",
        "x = 1",
        "big.shape",
        "y = 2",
    ]
    for cell in cells:
        result = kernel.ok(cell)
        assert "not recorded" not in result.stderr, (cell, result.stderr)
    listed = checkpoints(kernel, data_dir, rid)
    sources = [source_of(c) for c in listed[-4:]]
    assert sources == [cells[1], cells[2], cells[3], cells[5]]  # `big.shape` is skipped
    assert printed_once(kernel.ok(f"%restore {listed[-2].name}")).startswith("restored ")
    first_three = "float(np.random.default_rng(0).random(3).sum())"
    assert value(kernel.client, f"(x, float(big[:3].sum()) == {first_three})") == [1, True]


def test_failed_cell_is_checkpointed_and_marked(kernel: Kernel, data_dir: Path) -> None:
    kernel.ok("%autocheckpoint on")
    rid = runtime_id(kernel)
    kernel.ok("rows = [1]")
    failed = kernel.run("rows.append(2)\nraise ValueError('oops')")
    assert failed.error is not None and "oops" in failed.error
    assert "ditto" not in failed.stderr  # the hook added nothing to the failure
    last = checkpoints(kernel, data_dir, rid)[-1]
    auto = last.automatic
    assert auto is not None and auto.failed and auto.source.startswith("rows.append(2)")
    assert last.name == f"cell-{auto.execution_count}"
    table = returned_once(kernel.ok("%checkpoints"))["text/plain"]
    assert "rows.append(2)… (failed)" in table  # the cell's first line, shortened
    assert "cell" in table.splitlines()[0]
    # roll back to just before the mistake, by the cell's name
    before = checkpoints(kernel, data_dir, rid)[-2]
    assert printed_once(kernel.ok(f"%restore {before.name}")).startswith("restored ")
    assert value(kernel.client, "rows") == [1]


def test_workspace_change_alone_is_checkpointed(kernel: Kernel, data_dir: Path) -> None:
    kernel.ok("%autocheckpoint on\nimport ditto_jupyter")
    rid = runtime_id(kernel)
    before = len(checkpoints(kernel, data_dir, rid))
    kernel.ok("ditto_jupyter.workspace().joinpath('notes.txt').write_text('hi');")
    kernel.ok("len('no change at all')")
    listed = checkpoints(kernel, data_dir, rid)
    assert len(listed) == before + 1  # the file write, not the no-op
    assert source_of(listed[-1]).startswith("ditto_jupyter.workspace()")


def test_a_cell_that_changes_nothing_is_judged_by_the_journal_with_no_server(
    kernel: Kernel, data_dir: Path
) -> None:
    """The in-process service's threads (its loop, the workspace snapshot's executor) are
    ditto's own: were they taken for code running behind the cells' back, every cell's
    checkpoint would pickle the whole namespace again (issue 25)."""
    kernel.ok("%autocheckpoint on\nimport ditto_jupyter")
    kernel.ok("values = {i: str(i) for i in range(100)}")
    kernel.ok("ditto_jupyter.workspace().joinpath('notes.txt').write_text('hi');")
    wait_for_autocheckpoints(kernel.client)
    kernel.ok("from ditto_jupyter.kernel.capture.journal import foreign_threads")
    wait_for_autocheckpoints(kernel.client)
    assert value(kernel.client, "[t.name for t in foreign_threads()]") == []
    autocheckpointer = "get_ipython().magics_manager.registry['DittoMagics'].autocheckpointer"
    kernel.ok(f"_a = {autocheckpointer}")
    before = int(value(kernel.client, "_a.skipped"))
    kernel.ok("None")  # changes nothing: no checkpoint
    # two cells skipped: the one that read `before` (it only prints), and None
    assert int(value(kernel.client, "_a.skipped")) == before + 2


def test_keep_prunes_only_old_automatic_ones(kernel: Kernel, data_dir: Path) -> None:
    kernel.ok("import numpy as np\nbig = np.arange(300_000)")
    kernel.ok('%checkpoint "named before"')
    kernel.ok("%autocheckpoint on --keep 2")
    rid = runtime_id(kernel)
    for step in range(4):
        kernel.ok(f"big = big + 1\nstep = {step}")
    kernel.ok('%checkpoint "named after"')
    listed = checkpoints(kernel, data_dir, rid)
    auto = [c for c in listed if c.automatic is not None]
    whole = [c for c in auto if not c.pruned]
    thinned = [c for c in auto if c.pruned]
    assert [c.name for c in whole] == [c.name for c in auto[-2:]]
    assert len(thinned) == len(auto) - 2 >= 3  # rows stay, as history
    assert all(c.context_manifest_id is None for c in thinned)
    assert all(not c.pruned for c in listed if c.name and "named" in c.name)
    assert all(c.context_manifest_id for c in listed if c.name and "named" in c.name)

    # restoring a pruned one is refused in one line and leaves the variables alone
    out = kernel.run(f"%restore {thinned[-1].name}")
    assert out.error is None and out.stdout == ""
    assert out.stderr.startswith("ditto: InvalidRequest: ") and "pruned" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert value(kernel.client, "step") == 3
    assert "(pruned)" in returned_once(kernel.ok("%checkpoints"))["text/plain"]

    # gc frees what only the pruned ones held; the kept ones still restore
    service = store_view(data_dir)
    try:
        freed = service.gc(grace_seconds=0)
        assert freed.freed_chunks >= 2 * len(thinned)  # each held its own 2.4 MB array
    finally:
        service.close_store()
    kept = whole[0].name
    assert printed_once(kernel.ok(f"%restore {kept}")).startswith("restored ")
    assert value(kernel.client, "[int(big[0]), step]") == [3, 2]
    assert printed_once(kernel.ok('%restore "named before"')).startswith("restored ")
    assert value(kernel.client, "int(big[0])") == 0


def test_a_prune_that_fails_says_so_and_the_checkpoint_stays_recorded(
    kernel: Kernel, data_dir: Path
) -> None:
    """Pruning runs after the record: its failure is its own line, never "not recorded"."""
    kernel.ok("%autocheckpoint on --keep 1")
    rid = runtime_id(kernel)
    kernel.ok("x = 1")
    wait_for_autocheckpoints(kernel.client)  # every cell so far recorded and pruned
    patch = (  # silently: no cell, no checkpoint of its own
        "def _refuse_prune():\n"
        "    raise OSError('disk full')\n"
        "get_ipython().magics_manager.registry['DittoMagics'].autocheckpointer._prune = "
        "_refuse_prune"
    )
    reply = kernel.client.execute(patch, silent=True, reply=True, timeout=180)
    assert reply["content"]["status"] == "ok", reply["content"]
    changed = kernel.run("x = 2")
    listed = checkpoints(kernel, data_dir, rid)  # the write-behind has recorded it
    last = [c for c in listed if c.automatic is not None][-1]
    assert source_of(last) == "x = 2" and not last.pruned
    # the write-behind's line reaches the cell running when it is printed (or `%undo`,
    # which waits for it); undo of the last cell still works
    undone = kernel.run("%undo")
    assert undone.error is None and value(kernel.client, "x") == 1
    said = changed.stderr + undone.stderr
    assert re.fullmatch(
        rf"ditto: autocheckpoint {last.name} was recorded, but pruning the automatic "
        r"checkpoints beyond the newest 1 failed: OSError: disk full\n",
        said,
    ), said


def test_checkout_by_cell_name_and_its_source_is_held(kernel: Kernel, data_dir: Path) -> None:
    kernel.ok("%autocheckpoint on --keep 1")
    rid = runtime_id(kernel)
    kernel.ok("v = 'at the branch point'")
    branch = checkpoints(kernel, data_dir, rid)[-1]
    line = printed_once(kernel.ok(f"%checkout {branch.name}"))
    assert line.startswith(f"checked out {branch.checkpoint_id[:12]} into runtime ")
    child = re.search(r"into runtime (\S+) in ", line)
    assert child is not None
    service = store_view(data_dir)
    try:
        assert service.store.get_head(child.group(1)) == branch.checkpoint_id
    finally:
        service.close_store()
    kernel.ok("v = 'later 1'")
    kernel.ok("v = 'later 2'")
    after = {c.checkpoint_id: c for c in checkpoints(kernel, data_dir, rid)}
    assert not after[branch.checkpoint_id].pruned  # the child's head
    pruned = [c for c in after.values() if c.pruned]
    assert pruned and all(c.checkpoint_id != branch.checkpoint_id for c in pruned)


def test_pause_cell_adds_no_checkpoint_and_no_error(data_dir: Path, tmp_path: Path) -> None:
    k = Kernel(data_dir, tmp_path)
    try:
        k.ok("%load_ext ditto_jupyter\n%autocheckpoint on")
        rid = runtime_id(k)
        k.ok("kept = 1")
        before = checkpoints(k, data_dir, rid)
        out = k.run("%pause nightly")
        assert out.error is None and out.stderr == "", out.stderr
        assert printed_once(out).startswith(f"paused runtime {rid}")
    finally:
        k.client.stop_channels()
        k.manager.shutdown_kernel(now=True)
    after = stored_checkpoints(data_dir, rid)
    assert names(after) == [*names(before), "nightly"]  # the pause is the last one


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%autocheckpoint maybe", "takes on, off or nothing, not 'maybe'"),
        ("%autocheckpoint on --keep 0", "--keep takes a whole number of at least 1, not '0'"),
        ("%autocheckpoint on --keep many", "not 'many'"),
        ("%autocheckpoint off --keep 3", "--keep goes with on"),
        ("%autocheckpoint on --kep 3", "unrecognized arguments"),
    ],
)
def test_bad_arguments_are_one_line(kernel: Kernel, line: str, message: str) -> None:
    out = kernel.run(line)
    assert out.error is None and out.stdout == ""
    assert out.stderr.startswith("ditto: InvalidRequest: ") and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert printed_once(kernel.ok("%autocheckpoint")).startswith("autocheckpoint off")


def test_the_cell_source_is_cut_to_its_limit() -> None:
    huge = "x = 1  # é\n" * 20_000
    auto = automatic_cell(7, huge, True)
    assert (auto.execution_count, auto.failed) == (7, True)
    assert huge.startswith(auto.source) and 0 < len(auto.source.encode()) <= MAX_SOURCE_BYTES
    listed = RuntimeCheckpoint(
        checkpoint_id="c",
        runtime_id="r",
        parent_checkpoint_id=None,
        session=SessionRecord(session_id="r", conversation_id="nb", sender_id="ana"),
        automatic=AutoCheckpointCell(execution_count=3, source="\n  df = load()\nmore"),
    ).summary()
    assert cell_line(listed) == "df = load()…"
    taken_on_request = listed.model_copy(update={"automatic": None})
    assert cell_line(taken_on_request) == ""

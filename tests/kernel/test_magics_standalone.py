"""The magics in a real ipykernel with no server: an in-process RuntimeService on a
SQLite store in DITTO_DATA_DIR."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.support.kernel_cells import value
from tests.support.magic_display import printed_once, returned_once
from tests.support.standalone_kernel import StandaloneKernel

Kernel = StandaloneKernel


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ditto-data")


@pytest.fixture(scope="module")
def notebook_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The calling kernel's folder, with a data file beside its (imagined) notebook."""
    folder = tmp_path_factory.mktemp("cwd")
    (folder / "data.csv").write_text("a,b\n1,2\n")
    return folder


@pytest.fixture(scope="module")
def kernel(data_dir: Path, notebook_folder: Path) -> Iterator[Kernel]:
    k = Kernel(data_dir, notebook_folder)
    setup = k.run("%load_ext ditto_jupyter")
    assert setup.error is None, setup.error
    yield k
    k.run(
        "_ditto = get_ipython().magics_manager.registry['DittoMagics'].kernel_control.built\n"
        "_ditto is not None and _ditto.shutdown()"
    )
    k.stop()


def test_checkpoint_and_restore_in_place(kernel: Kernel, data_dir: Path) -> None:
    kernel.run("a = b = [1, 2]\nd = {'ref': a}\ndef f(x): return x + 1\nimport os.path as p")
    out = kernel.run('%checkpoint "before cleaning" -m owner=ana -m "note=two words"')
    line = printed_once(out)
    assert re.match(r"checkpoint [0-9a-f]{12} 'before cleaning' of runtime", line)
    assert "variables + workspace (not the notebook's folder)" in line and "written in" in line
    kernel.run("a.append(3)\nlater = 'gone after restore'\ndel f")
    restored = printed_once(kernel.run("%restore 'before cleaning'"))
    assert restored.startswith("restored ")
    assert value(kernel.client, "[a, a is b, d['ref'] is a, 'later' in globals(), f(1)]") == [
        [1, 2],
        True,
        True,
        False,
        2,
    ]
    assert value(kernel.client, "p.join('x', 'y')") == "x/y"
    service = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    try:
        runtimes = service.store.list_sessions()
        checkpoints = service.store.list_checkpoints(runtimes[0].session_id)
        assert checkpoints[0].name == "before cleaning"
        assert checkpoints[0].metadata == {"owner": "ana", "note": "two words"}
    finally:
        service.close_store()


def test_unpicklable_values_are_reported(kernel: Kernel) -> None:
    kernel.run("gen = (i for i in range(3))\nimport threading\nlock = threading.Lock()\nkeep = 5")
    out = printed_once(kernel.run("%checkpoint with-gen"))
    assert "not kept:" in out and "gen (generator" in out and "lock" in out
    kernel.run("keep = 6")
    restored = printed_once(kernel.run("%restore with-gen"))
    assert "not kept:" in restored and "gen" in restored
    assert value(kernel.client, "keep") == 5
    text = returned_once(kernel.run("%checkpoints"))["text/plain"]
    assert "with-gen" in text and "gen, lock" in text
    assert "cell" not in text.splitlines()[0]  # no automatic checkpoint: no cell column
    kernel.run("del gen, lock")


def test_expected_errors_print_one_line(kernel: Kernel) -> None:
    for line, code in [
        ("%restore no-such-checkpoint", "CheckpointNotFound"),
        ("%checkpoint x -m notapair", "InvalidRequest"),
        ("%resume no-such-runtime", "RuntimeNotFound"),
        ("%checkout", "InvalidRequest"),
    ]:
        out = kernel.run(line)
        assert out.error is None, out.error
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"ditto: {code}: "), out.stderr


def test_checkout_starts_a_kernel_holding_the_variables(
    kernel: Kernel, data_dir: Path, notebook_folder: Path
) -> None:
    kernel.run("branch_value = {'k': [1, 2, 3]}")
    wrote = kernel.run("%%sandbox\necho workspace-file > note.txt; pwd")
    workspace = Path(wrote.stdout.strip())
    assert workspace.parent == (data_dir / "workspaces").resolve(), workspace
    assert (workspace / "note.txt").read_text() == "workspace-file\n"
    here = "[__import__('os').getcwd(), str(__import__('ditto_jupyter').workspace())]"
    assert value(kernel.client, here) == [str(notebook_folder.resolve()), str(workspace)]
    kernel.run("%checkpoint for-branch")
    out = printed_once(
        kernel.run("%checkout for-branch --conversation 'branch copy.ipynb' --sender bob")
    )
    match = re.search(r"connect: jupyter console --existing (\S+)", out)
    assert match, out
    child = BlockingKernelClient()
    child.load_connection_file(match.group(1))
    child.start_channels()
    try:
        child.wait_for_ready(timeout=60)
        assert value(child, "branch_value") == {"k": [1, 2, 3]}
        # the child runs in the same folder; its workspace is its own copy
        where = "[__import__('os').getcwd(), open('data.csv').read(), __import__('os').environ"
        cwd, data, env = value(child, where + ".get('DITTO_WORKSPACE')]")
        assert (cwd, data) == (str(notebook_folder.resolve()), "a,b\n1,2\n")
        assert env is not None and env != str(workspace)
        assert (Path(env) / "note.txt").read_text() == "workspace-file\n"
        assert value(child, "str(__import__('ditto_jupyter').workspace())") == env
    finally:
        child.stop_channels()
    runtimes = returned_once(kernel.run("%runtimes"))["text/plain"]
    assert "branch copy.ipynb" in runtimes and "bob" in runtimes


def test_sandbox_runs_in_the_workspace(kernel: Kernel) -> None:
    out = kernel.run("%%sandbox\necho hello; pwd; exit 4")
    assert out.error is None and out.stderr == "", out.stderr
    hello, workspace = out.stdout.splitlines()  # the command's own output, once
    assert hello == "hello" and "workspaces" in workspace
    assert [r["text/plain"] for r in out.results] == ["exit 4"]  # the status, once


def test_pause_stops_the_kernel_after_its_output_and_resume_keeps_the_id(
    data_dir: Path, tmp_path: Path
) -> None:
    k = Kernel(data_dir, tmp_path)
    try:
        k.run("%load_ext ditto_jupyter\nsaved = list(range(5))")
        out = printed_once(k.run("%pause nightly"))
        match = re.match(r"paused runtime (\S+) at checkpoint", out)
        assert match, out
        runtime_id = match.group(1)
        for _ in range(100):  # the kernel asked to exit after the cell
            if not k.manager.is_alive():
                break
            import time

            time.sleep(0.1)
        assert not k.manager.is_alive()
    finally:
        k.stop()
    service = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    try:
        record = service.store.get_session(runtime_id)
        assert record is not None and record.status is SessionLifecycleStatus.PAUSED
    finally:
        service.close_store()
    other = Kernel(data_dir, tmp_path)
    try:
        other.run("%load_ext ditto_jupyter")
        resumed = printed_once(other.run(f"%resume {runtime_id}"))
        assert resumed.startswith(f"resumed runtime {runtime_id}")
        match = re.search(r"connect: jupyter console --existing (\S+)", resumed)
        assert match
        child = BlockingKernelClient()
        child.load_connection_file(match.group(1))
        child.start_channels()
        try:
            child.wait_for_ready(timeout=60)
            assert value(child, "saved") == [0, 1, 2, 3, 4]
        finally:
            child.stop_channels()
        other.run(
            "get_ipython().magics_manager.registry['DittoMagics'].kernel_control.built.shutdown()"
        )
    finally:
        other.stop()

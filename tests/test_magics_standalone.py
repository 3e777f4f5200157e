"""The magics in a real ipykernel with no server: an in-process RuntimeService on a
SQLite store in DITTO_DATA_DIR."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from ditto_jupyter.core.models import SessionLifecycleStatus
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.kernel_cells import CellOutput, run_cell, value


class Kernel:
    def __init__(self, data_dir: Path, cwd: Path) -> None:
        env = {**os.environ, "DITTO_DATA_DIR": str(data_dir)}
        for name in ("DITTO_SERVER_URL", "DITTO_TOKEN", "DITTO_RUNTIME_ID"):
            env.pop(name, None)
        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(env=env, cwd=str(cwd))
        self.client = self.manager.blocking_client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str) -> CellOutput:
        return run_cell(self.client, code)

    def stop(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ditto-data")


@pytest.fixture(scope="module")
def kernel(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    k = Kernel(data_dir, tmp_path_factory.mktemp("cwd"))
    setup = k.run("%load_ext ditto_jupyter")
    assert setup.error is None, setup.error
    yield k
    k.run(
        "_ditto = get_ipython().magics_manager.registry['DittoMagics']._control\n"
        "_ditto is not None and _ditto.shutdown()"
    )
    k.stop()


def test_checkpoint_and_restore_in_place(kernel: Kernel, data_dir: Path) -> None:
    kernel.run("a = b = [1, 2]\nd = {'ref': a}\ndef f(x): return x + 1\nimport os.path as p")
    out = kernel.run('%checkpoint "before cleaning" -m owner=ana -m "note=two words"')
    assert out.error is None and out.stderr == "", (out.error, out.stderr)
    assert re.search(r"checkpoint [0-9a-f]{12} 'before cleaning' of runtime", out.stdout)
    assert "written in" in out.stdout
    assert any("text/html" in r for r in out.results)
    kernel.run("a.append(3)\nlater = 'gone after restore'\ndel f")
    restored = kernel.run("%restore 'before cleaning'")
    assert restored.error is None and restored.stderr == "", restored.stderr
    assert "restored" in restored.stdout
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
    out = kernel.run("%checkpoint with-gen")
    assert "not kept:" in out.stdout and "gen (generator" in out.stdout and "lock" in out.stdout
    kernel.run("keep = 6")
    restored = kernel.run("%restore with-gen")
    assert "not kept:" in restored.stdout and "gen" in restored.stdout
    assert value(kernel.client, "keep") == 5
    listing = kernel.run("%checkpoints")
    text = listing.results[-1]["text/plain"]
    assert "with-gen" in text and "gen, lock" in text
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


def test_checkout_starts_a_kernel_holding_the_variables(kernel: Kernel) -> None:
    kernel.run("branch_value = {'k': [1, 2, 3]}")
    kernel.run("%checkpoint for-branch")
    kernel.run("%%sandbox\necho workspace-file > note.txt")
    out = kernel.run("%checkout for-branch --conversation 'branch copy.ipynb' --sender bob")
    assert out.error is None and out.stderr == "", out.stderr
    match = re.search(r"connect: jupyter console --existing (\S+)", out.stdout)
    assert match, out.stdout
    child = BlockingKernelClient()
    child.load_connection_file(match.group(1))
    child.start_channels()
    try:
        child.wait_for_ready(timeout=60)
        assert value(child, "branch_value") == {"k": [1, 2, 3]}
    finally:
        child.stop_channels()
    runtimes = kernel.run("%runtimes").results[-1]["text/plain"]
    assert "branch copy.ipynb" in runtimes and "bob" in runtimes


def test_sandbox_runs_in_the_workspace(kernel: Kernel) -> None:
    out = kernel.run("%%sandbox\necho hello; pwd; exit 4")
    assert out.stdout.splitlines()[0] == "hello"
    assert "workspaces" in out.stdout
    assert out.results[-1]["text/plain"] == "exit 4"


def test_pause_stops_the_kernel_after_its_output_and_resume_keeps_the_id(
    data_dir: Path, tmp_path: Path
) -> None:
    k = Kernel(data_dir, tmp_path)
    try:
        k.run("%load_ext ditto_jupyter\nsaved = list(range(5))")
        out = k.run("%pause nightly")
        assert out.error is None and out.stderr == "", out.stderr
        match = re.search(r"paused runtime (\S+) at checkpoint", out.stdout)
        assert match, out.stdout
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
        resumed = other.run(f"%resume {runtime_id}")
        assert resumed.error is None and resumed.stderr == "", resumed.stderr
        assert f"resumed runtime {runtime_id}" in resumed.stdout
        match = re.search(r"connect: jupyter console --existing (\S+)", resumed.stdout)
        assert match
        child = BlockingKernelClient()
        child.load_connection_file(match.group(1))
        child.start_channels()
        try:
            child.wait_for_ready(timeout=60)
            assert value(child, "saved") == [0, 1, 2, 3, 4]
        finally:
            child.stop_channels()
        other.run("get_ipython().magics_manager.registry['DittoMagics']._control.shutdown()")
    finally:
        other.stop()

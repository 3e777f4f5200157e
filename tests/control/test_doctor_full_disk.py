"""`ditto doctor` on a data directory whose disk is full: it says the disk is full (where,
how much is free), not that blobs are damaged. A full disk is not damage.

The data directory is on a real 40 MiB tmpfs (tests/support/small_disk.py, needs root).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from ditto_jupyter.cli import EXIT_DAMAGED, main
from ditto_jupyter.client import EXIT_OK
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.support.small_disk import fill, small_disk

__all__ = ["small_disk"]  # the fixture, used by name


def make_data_dir(root: Path) -> None:
    service = open_runtime_service(root, context_factory=InMemoryContextCapture)
    try:
        runtime_id = asyncio.run(service.create_runtime("nb.ipynb")).runtime_id
        workspace = service.workspace_path(runtime_id)
        assert workspace is not None
        (workspace / "data.bin").write_bytes(b"d" * 300_000)
        asyncio.run(service.checkpoint(runtime_id))
    finally:
        service.close_store()


def test_doctor_on_a_full_disk_says_the_disk_is_full(
    small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = small_disk / "data"
    make_data_dir(root)
    filler = fill(small_disk)

    code = main(["doctor", "--data-dir", str(root)])
    out = capsys.readouterr().out
    assert code == EXIT_DAMAGED
    assert "damaged" not in out, out
    assert f"{root}: the disk holding it is full: " in out
    assert "free of 40.0 MiB; checkpoints fail with StorageFull until space is freed" in out
    code = main(["doctor", "--data-dir", str(root), "--json"])
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert {finding["part"] for finding in findings} == {"disk"}, findings

    filler.unlink()
    assert main(["doctor", "--data-dir", str(root)]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[-1] == "no damage found"

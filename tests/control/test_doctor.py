"""`ditto doctor` on a real data directory: healthy, then each kind of damage, named by id.

The data directory is made by RuntimeService (real SQLite file, blob store, workspaces);
the damage is done to its files directly: a row past pydantic's depth limit, a chunk whose
bytes changed, a manifest whose body was edited, a chunk and a manifest deleted.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from ditto_jupyter.cli import EXIT_DAMAGED, main
from ditto_jupyter.client import EXIT_OK, EXIT_SERVER
from ditto_jupyter.core.models import RuntimeCheckpoint
from ditto_jupyter.wiring import DataDirError, check_data_dir, open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture
from tests.support.stored_blobs import (
    delete_chunk,
    delete_manifest_row,
    manifest_body,
    tamper_chunk,
    write_manifest_document,
)


def nested(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return dict(value)


def make_data_dir(root: Path) -> tuple[str, list[RuntimeCheckpoint]]:
    """A data directory with two runtimes, files in their workspaces, three checkpoints."""
    service = open_runtime_service(root, context_factory=InMemoryContextCapture)
    try:
        ctx = service.context
        assert isinstance(ctx, InMemoryContextCapture)
        rids = [asyncio.run(service.create_runtime(f"nb{i}.ipynb")).runtime_id for i in (1, 2)]
        for n, rid in enumerate(rids):
            workspace = service.workspace_path(rid)
            assert workspace is not None
            (workspace / "data.bin").write_bytes(bytes([n]) * 300_000)
            ctx.execute(rid, x=n, text="y" * 2000)
            asyncio.run(service.checkpoint(rid))
        ctx.execute(rids[0], x=7)
        # a new file: the third checkpoint's snapshot is a manifest of its own (a snapshot
        # of an unchanged workspace is the one before, stored again)
        (service.workspace_path(rids[0]) or root / "missing").joinpath("notes.txt").write_text(
            "more"
        )
        asyncio.run(service.checkpoint(rids[0]))
        return rids[0], service.store.list_checkpoints()
    finally:
        service.close_store()


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


def test_a_healthy_data_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_data_dir(tmp_path / "data")
    code, out = doctor(capsys, "--data-dir", str(tmp_path / "data"))
    assert code == EXIT_OK, out
    assert out.splitlines()[-1] == "no damage found"
    report = check_data_dir(tmp_path / "data")
    assert report.healthy
    assert report.rows_checked == 2 + 3 + 2  # sessions, checkpoints, bindings
    assert report.checkpoints_checked == 3
    assert report.chunks_checked >= 4 and report.manifests_checked >= 6


def test_every_kind_of_damage_is_named_by_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    rid, checkpoints = make_data_dir(root)
    first, second, third = checkpoints
    blobs = root / "blobs"

    def manifest(manifest_id: str | None) -> dict[str, Any]:
        assert manifest_id is not None
        return manifest_body(blobs, manifest_id)

    raw = sqlite3.connect(root / "ditto.db")
    raw.execute(
        "UPDATE sessions SET data = ? WHERE runtime_id = ?",
        (json.dumps({"session_id": rid, "metadata": nested(200)}), rid),
    )
    raw.commit()
    raw.close()
    # a chunk whose bytes changed: the first checkpoint's workspace file
    assert first.backend_ref is not None and first.backend_ref.provider_snapshot_id
    workspace = manifest(first.backend_ref.provider_snapshot_id)
    flipped = workspace["body"]["chunks"][0]
    tamper_chunk(blobs, flipped, lambda stored: stored[:-1] + b"!")
    # a manifest whose body was edited after it was signed: the second's namespace
    tampered = second.context_manifest_id
    document = manifest(tampered)
    document["body"]["size"] = 1
    write_manifest_document(blobs, tampered, orjson.dumps(document))
    # a manifest deleted under a checkpoint: the third's namespace
    assert third.context_manifest_id is not None
    delete_manifest_row(blobs, third.context_manifest_id)

    code, out = doctor(capsys, "--data-dir", str(root))
    assert code == EXIT_DAMAGED
    assert f"damaged store sessions/{rid}: at the record: Invalid JSON: recursion limit" in out
    assert f"damaged chunk {flipped}: chunk {flipped} does not match its content hash" in out
    assert f"damaged manifest {tampered}: manifest {tampered} fails its signature check" in out
    assert (
        f"damaged checkpoint {third.checkpoint_id}: its namespace manifest "
        f"{third.context_manifest_id} is missing"
    ) in out
    # the changed chunk holds data.bin, which both of the first runtime's workspace
    # snapshots list: both manifests, and both checkpoints, are damaged by it
    assert third.backend_ref is not None and third.backend_ref.provider_snapshot_id
    workspaces = {first.backend_ref.provider_snapshot_id, third.backend_ref.provider_snapshot_id}
    assert len(workspaces) == 2
    for workspace_id in sorted(workspaces):
        assert f"damaged manifest {workspace_id}: lists chunk {flipped}, which is damaged" in out
    assert out.splitlines()[-1] == "9 problems found", out

    code, out = doctor(capsys, "--data-dir", str(root), "--json")
    assert code == EXIT_DAMAGED
    answer = json.loads(out)
    assert answer["healthy"] is False
    assert sorted((f["part"], f["id"]) for f in answer["findings"]) == sorted(
        [
            ("store", f"sessions/{rid}"),
            ("chunk", flipped),
            *[("manifest", workspace_id) for workspace_id in workspaces],
            ("manifest", tampered),
            ("checkpoint", first.checkpoint_id),  # its workspace
            ("checkpoint", second.checkpoint_id),  # its namespace
            ("checkpoint", third.checkpoint_id),  # its namespace and its workspace
            ("checkpoint", third.checkpoint_id),
        ]
    )


def test_a_chunk_missing_under_a_manifest(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _, checkpoints = make_data_dir(root)
    manifest_id = checkpoints[0].context_manifest_id
    assert manifest_id is not None
    document = manifest_body(root / "blobs", manifest_id)
    gone = document["body"]["chunks"][0]
    delete_chunk(root / "blobs", gone)
    report = check_data_dir(root)
    assert [(f.part, f.id, f.problem) for f in report.findings] == [
        ("manifest", manifest_id, f"lists chunk {gone}, which is missing"),
        (
            "checkpoint",
            checkpoints[0].checkpoint_id,
            f"its namespace manifest {manifest_id} is damaged",
        ),
    ]


def test_nothing_to_check_is_an_error_and_nothing_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["doctor", "--data-dir", str(tmp_path / "none")])
    assert code == EXIT_SERVER
    assert f"ditto: doctor: no data directory at {tmp_path / 'none'}" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataDirError, match="no checkpoint store at"):
        check_data_dir(tmp_path / "empty")
    assert not (tmp_path / "none").exists()
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_missing_secret_is_reported_and_not_made_again(tmp_path: Path) -> None:
    root = tmp_path / "data"
    make_data_dir(root)
    (root / "blobs" / "secret").unlink()
    report = check_data_dir(root)
    assert [(f.part, f.problem) for f in report.findings] == [
        (
            "blobs",
            f"the store secret {root / 'blobs' / 'secret'} is missing; no manifest can be verified",
        )
    ]
    assert not (root / "blobs" / "secret").exists()

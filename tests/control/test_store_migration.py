"""A data directory written by the release before issue 15 opens, migrates in place, and
keeps every checkpoint: the store goes to the current schema and the blob store to the object
index. Records of schema 2 written by hand get what schemas 3 and 4 add (lineage and kernel
columns; %autocheckpoint's flags out of the users' metadata).

The fixture (tests/support/fixtures/release_store) was made by that release's own code
(tests/support/fixtures/make_release_store.py, run at commit bc0917e): three runtimes, a checkout
child, a paused runtime, a name two runtimes share, a clean re-checkpoint sharing a
snapshot, and a deleted snapshot whose chunks that release had not collected yet.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sqlite3
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
import sqlalchemy as sa

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.control.store import MIGRATIONS, SCHEMA_VERSION, SqlCheckpointStore
from ditto_jupyter.core.errors import InvalidRequest, UnsupportedBackend
from ditto_jupyter.core.models import AutoCheckpointCell, RuntimeCheckpoint, SessionRecord
from ditto_jupyter.testing.contracts.store_data import (
    CONTEXT,
    SNAPSHOT,
    after_cell,
    runtime,
    thinned,
)
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture

RELEASE = Path(__file__).resolve().parents[1] / "support" / "fixtures" / "release_store"
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(RELEASE, target)
    return target


@pytest.fixture
def expected(data_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((data_dir / "expected.json").read_text())
    return loaded


@pytest.fixture
def service(data_dir: Path) -> Iterator[RuntimeService]:
    opened = open_runtime_service(data_dir, context_factory=InMemoryContextCapture)
    yield opened
    opened.close_store()


def namespace_of(service: RuntimeService, checkpoint_id: str) -> Any:
    """The namespace a checkpoint's context manifest holds (the test capture's JSON)."""
    manifest_id = service.get_checkpoint(checkpoint_id).context_manifest_id
    assert manifest_id is not None
    body = service.blobs.get_manifest(manifest_id)
    return orjson.loads(service.blobs.get_bytes(body["chunks"]))


def files_of_checkout(service: RuntimeService, checkpoint_id: str) -> dict[str, str]:
    """SHA-256 of every file a checkout of the checkpoint materialises."""
    child = run(service.checkout(checkpoint_id)).runtime.runtime_id
    workspace = service.workspace_path(child)
    assert workspace is not None
    files = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in workspace.iterdir()
        if path.is_file()
    }
    run(service.close(child))
    return files


def check_every_checkpoint(service: RuntimeService, expected: dict[str, Any]) -> None:
    """Each checkpoint holds its namespace, and the ones with a snapshot their files."""
    for checkpoint_id, holds in expected["checkpoints"].items():
        assert namespace_of(service, checkpoint_id) == holds["namespace"], checkpoint_id
        if checkpoint_id in expected["deleted_snapshot"]:
            with pytest.raises(UnsupportedBackend):
                run(service.checkout(checkpoint_id))
        else:
            assert files_of_checkout(service, checkpoint_id) == holds["files"], checkpoint_id


def test_the_release_data_directory_migrates_in_place(
    data_dir: Path, service: RuntimeService, expected: dict[str, Any]
) -> None:
    with sqlite3.connect(data_dir / "ditto.db") as raw:
        assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    raw.close()
    blobs = data_dir / "blobs"
    assert not (blobs / "manifests").exists() and (blobs / "objects.db").exists()
    old_manifests = {p.stem for p in (RELEASE / "blobs" / "manifests").glob("*.json")}
    assert set(service.blobs.iter_manifests()) == old_manifests
    check_every_checkpoint(service, expected)


def test_lookups_work_on_the_migrated_store(
    service: RuntimeService, expected: dict[str, Any]
) -> None:
    runtimes = expected["runtimes"]
    for checkpoint_id in expected["checkpoints"]:
        assert service.resolve_checkpoint(checkpoint_id[:12]).checkpoint_id == checkpoint_id
    first = service.resolve_checkpoint("first")
    assert first.runtime_id == runtimes["one"]
    with pytest.raises(InvalidRequest, match="names checkpoints of several runtimes") as refused:
        service.resolve_checkpoint("shared")
    assert runtimes["one"] in str(refused.value) and runtimes["two"] in str(refused.value)
    assert service.resolve_checkpoint("shared", runtimes["two"]).runtime_id == runtimes["two"]
    listed = run(service.list_checkpoints(runtimes["one"], limit=2))
    assert len(listed.checkpoints) == 2 and listed.next_cursor is not None
    rest = run(service.list_checkpoints(runtimes["one"], limit=2, cursor=listed.next_cursor))
    assert len(rest.checkpoints) == 1 and rest.next_cursor is None
    everything = run(service.list_checkpoints(runtimes["one"]))
    assert [c.checkpoint_id for c in everything.checkpoints] == [
        c.checkpoint_id for c in listed.checkpoints + rest.checkpoints
    ]


def test_gc_after_migration_frees_only_the_unreachable(
    service: RuntimeService, expected: dict[str, Any]
) -> None:
    """The release left a deleted snapshot's chunks behind: they go, nothing else does."""
    before = {digest for digest, _ in service.blobs.iter_chunks()}
    report = service.gc(grace_seconds=0)
    after = {digest for digest, _ in service.blobs.iter_chunks()}
    assert report.freed_chunks == len(before - after) > 0
    assert report.freed_manifests == 0
    check_every_checkpoint(service, expected)
    # the counts imported with the old manifests are right: deleting one snapshot frees
    # only what no other checkpoint lists
    first = service.resolve_checkpoint("first")
    run(service.delete_snapshot(first.checkpoint_id))
    service.gc(grace_seconds=0)
    expected["deleted_snapshot"].append(first.checkpoint_id)
    check_every_checkpoint(service, expected)


def test_a_paused_runtime_of_the_release_resumes_and_checkpoints(
    service: RuntimeService, expected: dict[str, Any]
) -> None:
    two = expected["runtimes"]["two"]
    run(service.resume(two))
    context = service.context
    assert isinstance(context, InMemoryContextCapture)
    assert context.namespace(two) == {"z": [1, 2, 3]}
    context.execute(two, more=True)
    backend = service.backends.get(two)
    assert backend is not None
    run(backend.write_bytes("new.txt", b"after the upgrade"))
    checkpoint_id = run(service.checkpoint(two, name="after")).checkpoint_id
    assert namespace_of(service, checkpoint_id) == {"z": [1, 2, 3], "more": True}
    files = files_of_checkout(service, checkpoint_id)
    assert files["new.txt"] == hashlib.sha256(b"after the upgrade").hexdigest()
    paused = service.resolve_checkpoint("pause").checkpoint_id
    assert files["z.txt"] == expected["checkpoints"][paused]["files"]["z.txt"]


# ---- schema 3 and 4 on records of an older schema (SQLite here, PostgreSQL too) -----------


def _old_checkpoint(cid: str, name: str, metadata: dict[str, Any], context: str | None) -> str:
    """A checkpoint record as schema 2 kept it: the system's flags in the metadata."""
    made = RuntimeCheckpoint(
        checkpoint_id=cid,
        runtime_id="r",
        parent_checkpoint_id=None,
        session=SessionRecord(session_id="r", conversation_id="r.ipynb", sender_id="ana"),
        context_manifest_id=context,
        name=name,
        metadata=metadata,
    ).model_dump(mode="json")
    del made["automatic"], made["pruned"]
    return json.dumps(made)


def _auto(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "autocheckpoint": {"execution_count": n, "source": f"v = {n}", "failed": False, **extra}
    }


def check_old_records_migrate(url: str) -> None:
    """Schema 2 rows get their lineage and kernel columns (3), and %autocheckpoint's flags
    move out of their metadata into fields (4); a user's look-alike keys stay the user's."""
    SqlCheckpointStore(url, migrations=MIGRATIONS[:2]).close()
    sessions = {
        "r": SessionRecord(session_id="r", conversation_id="r.ipynb", sender_id="ana"),
        "r-child": SessionRecord(
            session_id="r-child",
            conversation_id="r.ipynb",
            sender_id="ana",
            handle_state={"kernel_id": "k1"},
            source_runtime_id="r",
            source_checkpoint_id="c1",
        ),
    }
    whole = "a" * 64
    rows = [
        ("c1", "cell-1", _old_checkpoint("c1", "cell-1", _auto(1), whole)),
        ("c2", "cell-2", _old_checkpoint("c2", "cell-2", {**_auto(2), "pruned": True}, None)),
        ("c3", "mine", _old_checkpoint("c3", "mine", {**_auto(3), "owner": "ana"}, whole)),
        ("c4", "cell-4", _old_checkpoint("c4", "cell-4", {**_auto(4), "pruned": True}, whole)),
        ("c5", "cell-5", '{"checkpoint_id": "c5", not json any more'),
        ("c6", "cell-6", _old_checkpoint("c6", "cell-6", _auto(6, extra=1), whole)),
    ]
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for rid, made in sessions.items():
                conn.execute(
                    sa.text(
                        "INSERT INTO sessions (runtime_id, conversation_id, status, "
                        "created_at_ms, updated_at_ms, data) VALUES (:rid, 'c', 'idle', "
                        ":created, 1, :data)"
                    ),
                    {"rid": rid, "created": len(rid), "data": made.model_dump_json()},
                )
            for created, (cid, name, data) in enumerate(rows):
                conn.execute(
                    sa.text(
                        "INSERT INTO checkpoints (checkpoint_id, runtime_id, name, "
                        "created_at_ms, data) VALUES (:cid, 'r', :name, :created, :data)"
                    ),
                    {"cid": cid, "name": name, "created": created, "data": data},
                )
    finally:
        engine.dispose()
    migrated = SqlCheckpointStore(url)
    try:
        assert migrated.schema_version() == SCHEMA_VERSION
        assert [s.session_id for s in migrated.checkouts_of("r")] == ["r-child"]
        live = migrated.live_session_with_kernel("k1")
        assert live is not None and live.session_id == "r-child"
        got = {cid: migrated.get_checkpoint(cid) for cid in ("c1", "c2", "c3", "c4", "c6")}
        cell = {n: AutoCheckpointCell(execution_count=n, source=f"v = {n}") for n in (1, 2, 4)}
        assert (got["c1"].automatic, got["c1"].pruned, got["c1"].metadata) == (cell[1], False, {})
        assert (got["c2"].automatic, got["c2"].pruned, got["c2"].metadata) == (cell[2], True, {})
        assert got["c3"].automatic is None and got["c3"].metadata == {**_auto(3), "owner": "ana"}
        assert (got["c4"].automatic, got["c4"].pruned) == (cell[4], False)  # still whole
        assert got["c4"].metadata == {"pruned": True}  # what is left is the user's
        assert got["c6"].automatic is None and got["c6"].metadata == _auto(6, extra=1)
        found = migrated.prune_candidates("r", 0)
        assert [c.checkpoint_id for c in found.beyond] == ["c1", "c4"]
        assert found.held == {"c1"} and found.whole == 2  # c1 is r-child's source
        assert [row.key for row in migrated.damaged_rows()] == ["c5"]
    finally:
        migrated.close()


def test_old_records_migrate(tmp_path: Path) -> None:
    check_old_records_migrate(f"sqlite:///{tmp_path / 'ditto.db'}")


# ---- schema 11 on a store of schema 10 (SQLite here, PostgreSQL too) -----------------------


def _v10_row(made: RuntimeCheckpoint, parent_elsewhere: bool = False) -> dict[str, Any]:
    """A checkpoint row as schema 10's store wrote it: the whole record, its columns."""
    ref = made.backend_ref
    return {
        "checkpoint_id": made.checkpoint_id,
        "runtime_id": made.runtime_id,
        "parent_checkpoint_id": made.parent_checkpoint_id,
        "name": made.name,
        "created_at_ms": made.created_at_ms,
        "data": made.model_dump_json(),
        "context_manifest_id": made.context_manifest_id,
        "backend_snapshot_id": ref.provider_snapshot_id if ref is not None else None,
        "automatic": made.automatic is not None,
        "pruned": made.pruned,
        "document_manifest_id": made.document_manifest_id,
        "parent_elsewhere": parent_elsewhere,
    }


def check_schema_11_keeps_every_record(url: str) -> None:
    """Schema 10 rows become bases and deltas, heads move into the runtimes' rows, and
    every record, head, lookup and reference reads as before (rows that did not read back
    still do not, and still keep what they name alive)."""
    SqlCheckpointStore(url, migrations=MIGRATIONS[:10]).close()
    child = runtime("o", source_runtime_id="r", source_checkpoint_id="r2")
    chain = [after_cell(f"r{n}", "r", n, parent=f"r{n - 1}" if n else None) for n in range(6)]
    chain[1] = chain[1].model_copy(update={"name": "named", "metadata": {"k": [1, None, 2**70]}})
    chain[2] = chain[2].model_copy(update={"session": runtime("r", 2, metadata={"n": 3**50})})
    chain[3] = chain[3].model_copy(
        update={"automatic": AutoCheckpointCell(execution_count=3, source="x")}
    )
    chain[4] = thinned(chain[4])
    old_style = after_cell("o1", "o", 1, parent="r2").model_dump(mode="json")
    for key in ("automatic", "pruned", "replication", "document"):  # older records lack them
        del old_style[key]
    rows = [_v10_row(made) for made in chain]
    rows.append(
        {**_v10_row(after_cell("o1", "o", 1, parent="r2"), True), "data": json.dumps(old_style)}
    )
    not_json = {**_v10_row(after_cell("x1", "o", 7)), "data": '{"checkpoint_id": "x1", oops'}
    not_json["context_manifest_id"] = "7" * 64  # what schema 2 found in its text
    invalid = after_cell("x2", "o", 8).model_dump(mode="json")
    invalid["metadata"] = 5
    rows += [not_json, {**_v10_row(after_cell("x2", "o", 8)), "data": json.dumps(invalid)}]
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for made in (runtime("r", 5), child):
                conn.execute(
                    sa.text(
                        "INSERT INTO sessions (runtime_id, conversation_id, status, "
                        "created_at_ms, updated_at_ms, data, source_runtime_id, "
                        "source_checkpoint_id) VALUES (:rid, 'c', 'idle', 1, 1, :data, "
                        ":source_runtime, :source_checkpoint)"
                    ),
                    {
                        "rid": made.session_id,
                        "data": made.model_dump_json(),
                        "source_runtime": made.source_runtime_id,
                        "source_checkpoint": made.source_checkpoint_id,
                    },
                )
            conn.execute(
                sa.text(
                    "INSERT INTO checkpoints (checkpoint_id, runtime_id, parent_checkpoint_id, "
                    "name, created_at_ms, data, context_manifest_id, backend_snapshot_id, "
                    "automatic, pruned, document_manifest_id, parent_elsewhere) VALUES "
                    "(:checkpoint_id, :runtime_id, :parent_checkpoint_id, :name, "
                    ":created_at_ms, :data, :context_manifest_id, :backend_snapshot_id, "
                    ":automatic, :pruned, :document_manifest_id, :parent_elsewhere)"
                ).bindparams(
                    *(
                        sa.bindparam(flag, type_=sa.Boolean)
                        for flag in ("automatic", "pruned", "parent_elsewhere")
                    )
                ),
                rows,
            )
            conn.execute(
                sa.text("INSERT INTO heads (runtime_id, checkpoint_id) VALUES (:r, :c)"),
                [{"r": "r", "c": "r5"}, {"r": "o", "c": "r3"}],  # o restored one of r's
            )
    finally:
        engine.dispose()
    migrated = SqlCheckpointStore(url)
    try:
        assert migrated.schema_version() == SCHEMA_VERSION
        for made in chain:
            assert migrated.get_checkpoint(made.checkpoint_id) == made
        assert migrated.get_checkpoint("o1") == after_cell("o1", "o", 1, parent="r2")
        assert [c.checkpoint_id for c in migrated.list_checkpoints()] == [
            "r0",
            "r1",
            "o1",
            "r2",
            "r3",
            "r4",
            "r5",
        ]
        assert (migrated.get_head("r"), migrated.get_head("o")) == ("r5", "r3")
        assert migrated.newest_named("named", "r") == chain[1]
        assert [c.checkpoint_id for c in migrated.checkpoints_with_snapshot(SNAPSHOT)] == [
            "r0",
            "r1",
            "o1",
            "r2",
            "r3",
            "r5",
        ]
        assert migrated.prune_candidates("r", 0).held == {"r3"}  # o's head
        assert {row.key for row in migrated.damaged_rows()} == {"x1", "x2"}
        assert migrated.referenced_manifests(["7" * 64, CONTEXT]) == {"7" * 64, CONTEXT}
        engine = sa.create_engine(url)
        try:
            with engine.connect() as conn:
                bases = conn.exec_driver_sql("SELECT count(*) FROM checkpoint_bases").scalar()
        finally:
            engine.dispose()
        # r0-r3 and o1 (a short delta from its parent r2) share one; r4 (thinned), r5 (not
        # its parent's blobs), x1 and x2 (no parent) have one each
        assert bases == 5
        # the store carries on: a new checkpoint after r5 shares r5's base
        migrated.put_checkpoint(after_cell("r6", "r", 6, parent="r5"))
        assert migrated.get_checkpoint("r6") == after_cell("r6", "r", 6, parent="r5")
    finally:
        migrated.close()


def test_schema_11_keeps_every_record(tmp_path: Path) -> None:
    check_schema_11_keeps_every_record(f"sqlite:///{tmp_path / 'ditto.db'}")

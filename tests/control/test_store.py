"""Checkpoint store: the API contract on SQLite and memory, transactions, processes, crashes.

`CheckpointStoreContract` (`ditto_jupyter.testing.contracts`, one spec per role of the
store) holds every contract test against a `store` fixture; it runs here on a real SQLite
file and on the memory store, and in test_store_postgres.py on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ditto_jupyter.control.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    CheckpointStore,
    MemoryCheckpointStore,
    Migration,
    SchemaVersionError,
    SqlCheckpointStore,
    StoreError,
    open_store,
)
from ditto_jupyter.control.store.schema import (
    BINDINGS,
    CHECKPOINT_BASES,
    CHECKPOINTS,
    LEASES,
    LEFTOVERS,
    SESSIONS,
)
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    BackendCheckpointRef,
    Leftover,
    RuntimeCheckpoint,
    SessionLifecycleStatus,
)
from ditto_jupyter.testing.contracts import CheckpointStoreContract
from ditto_jupyter.testing.contracts.store_data import (
    binding,
    checkpoint,
    dump_store,
    populate,
    session,
)

TESTS = Path(__file__).resolve().parent


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter (a new process opening the store)."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=TESTS,
    )


# ---- the contract, on every store -----------------------------------------------------


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    """A fresh store: a real SQLite file, or the memory store."""
    opened: CheckpointStore
    if request.param == "sqlite":
        opened = SqlCheckpointStore.at_path(tmp_path / "ditto.db")
    else:
        opened = MemoryCheckpointStore()
    yield opened
    opened.close()


class TestStoreContract(CheckpointStoreContract):
    """The contract on SQLite and memory."""


# ---- the two stores agree (model-based, random operations) ----------------------------

_IDS = st.sampled_from(["a", "b", "c"])
_CP_IDS = st.sampled_from(["cp-1", "cp-2", "cp-11", "x-1"])


class SqlMatchesMemory(RuleBasedStateMachine):
    """Random operations, some failing, some in rolled-back blocks: both stores agree."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        self.stores: list[CheckpointStore] = [
            SqlCheckpointStore.at_path(Path(self.tmp.name) / "d.db"),
            MemoryCheckpointStore(),
        ]
        self.clock = 0

    def teardown(self) -> None:
        for opened in self.stores:
            opened.close()
        self.tmp.cleanup()

    def apply(self, call: Any, *, rollback: bool = False) -> None:
        """Call `call(store)` on both stores (optionally in a block that fails)."""
        outcomes: list[str] = []
        for opened in self.stores:
            try:
                if rollback:
                    with pytest.raises(InterruptedError), opened.transaction():
                        call(opened)
                        raise InterruptedError
                else:
                    call(opened)
                outcomes.append("ok")
            except ValueError as exc:
                outcomes.append(f"ValueError: {exc}")
        assert outcomes[0] == outcomes[1]

    @rule(rid=_IDS, created=st.integers(0, 3))
    def insert_session(self, rid: str, created: int) -> None:
        self.apply(lambda s: s.insert_session(session(rid, created)))

    @rule(rid=_IDS, status=st.sampled_from(list(SessionLifecycleStatus)))
    def put_session(self, rid: str, status: SessionLifecycleStatus) -> None:
        self.apply(lambda s: s.put_session(session(rid, status=status)))

    @rule(
        rid=_IDS,
        source=st.sampled_from([None, "a", "b"]),
        kernel=st.sampled_from([None, "k1", "k2"]),
        status=st.sampled_from(list(SessionLifecycleStatus)),
    )
    def put_lineage(
        self, rid: str, source: str | None, kernel: str | None, status: SessionLifecycleStatus
    ) -> None:
        handle = {"kernel_id": kernel} if kernel else {}
        changes = {"source_runtime_id": source, "handle_state": handle, "status": status}
        self.apply(lambda s: s.put_session(session(rid, **changes)))

    @rule(
        cid=_CP_IDS,
        rid=_IDS,
        name=st.sampled_from([None, "n", "cp-1"]),
        rollback=st.booleans(),
        parent=st.one_of(st.none(), _CP_IDS),
        automatic=st.booleans(),
        pruned=st.booleans(),
    )
    def put_checkpoint(
        self,
        cid: str,
        rid: str,
        name: str | None,
        rollback: bool,
        parent: str | None,
        automatic: bool,
        pruned: bool,
    ) -> None:
        self.clock += 1
        created = self.clock // 2
        cell = AutoCheckpointCell(execution_count=created) if automatic else None
        made = checkpoint(cid, rid, created, name=name, parent=parent, automatic=cell)
        made = made.model_copy(update={"pruned": pruned})
        self.apply(lambda s: s.put_checkpoint(made), rollback=rollback)

    @rule(kind=st.sampled_from(["kernel", "workspace"]), rid=_IDS, rollback=st.booleans())
    def record_leftover(self, kind: str, rid: str, rollback: bool) -> None:
        self.clock += 1
        left = Leftover(kind=kind, resource_id=rid, runtime_id=rid, reason="r", created_at_ms=1)
        self.apply(lambda s: s.record_leftover(left), rollback=rollback)

    @rule(rid=_IDS, kernel=st.sampled_from(["k1", "k2"]), keep=st.integers(0, 3))
    def indexed_queries(self, rid: str, kernel: str, keep: int) -> None:
        sql, memory = self.stores
        assert sql.checkouts_of(rid) == memory.checkouts_of(rid)
        assert sql.live_session_with_kernel(kernel) == memory.live_session_with_kernel(kernel)
        assert sql.prune_candidates(rid, keep) == memory.prune_candidates(rid, keep)

    @rule(rid=_IDS, cid=st.one_of(st.none(), _CP_IDS))
    def set_head(self, rid: str, cid: str | None) -> None:
        self.apply(lambda s: s.set_head(rid, cid))

    @rule(rid=_IDS, backend=st.sampled_from(["b1", "b2"]), rollback=st.booleans())
    def put_binding(self, rid: str, backend: str, rollback: bool) -> None:
        self.apply(lambda s: s.put_binding(binding(rid, backend)), rollback=rollback)

    @rule(rid=_IDS)
    def delete_binding(self, rid: str) -> None:
        self.apply(lambda s: s.delete_binding(rid))

    @precondition(lambda self: self.clock > 0)
    @rule(prefix=st.sampled_from(["cp-1", "cp", "x", "n", "c"]), rid=st.one_of(st.none(), _IDS))
    def find(self, prefix: str, rid: str | None) -> None:
        sql, memory = (s.find_checkpoints(prefix, rid) for s in self.stores)
        assert sql == memory

    @precondition(lambda self: self.clock > 0)
    @rule(
        prefix=st.sampled_from(["cp-1", "cp", "x", "c", "cp-11"]),
        rid=st.one_of(st.none(), _IDS),
        limit=st.one_of(st.none(), st.integers(1, 3)),
    )
    def find_by_id_prefix(self, prefix: str, rid: str | None, limit: int | None) -> None:
        sql, memory = (s.find_by_id_prefix(prefix, rid, limit=limit) for s in self.stores)
        assert sql == memory

    @precondition(lambda self: self.clock > 0)
    @rule(name=st.sampled_from(["n", "cp-1"]), rid=_IDS)
    def names(self, name: str, rid: str) -> None:
        sql, memory = self.stores
        assert sql.newest_named(name, rid) == memory.newest_named(name, rid)
        assert sql.runtimes_naming(name, limit=2) == memory.runtimes_naming(name, limit=2)

    @precondition(lambda self: self.clock > 0)
    @rule(
        rid=_IDS,
        after=st.one_of(st.none(), _CP_IDS),
        limit=st.one_of(st.none(), st.integers(1, 3)),
        newest_first=st.booleans(),
    )
    def page(self, rid: str, after: str | None, limit: int | None, newest_first: bool) -> None:
        outcomes = []
        for opened in self.stores:
            try:
                outcomes.append(
                    opened.page_checkpoints(
                        rid, limit=limit, after=after, newest_first=newest_first
                    )
                )
            except ValueError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1]

    @invariant()
    def same_contents(self) -> None:
        sql, memory = (dump_store(s) for s in self.stores)
        assert sql == memory


TestSqlMatchesMemory = SqlMatchesMemory.TestCase
TestSqlMatchesMemory.settings = settings(max_examples=20, stateful_step_count=15, deadline=None)


# ---- SQLite specifics: files, processes, migrations, crashes --------------------------


def test_sqlite_pragmas(tmp_path: Path) -> None:
    opened = SqlCheckpointStore.at_path(tmp_path / "ditto.db")
    try:
        assert opened.journal_mode == "wal"
        with opened._engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        opened.close()


def test_foreign_keys_back_the_reference_checks(tmp_path: Path) -> None:
    """Even a writer that bypasses the store cannot leave a dangling head behind."""
    opened = SqlCheckpointStore.at_path(tmp_path / "ditto.db")
    populate(opened)
    with (
        pytest.raises(sa.exc.IntegrityError, match="FOREIGN KEY constraint failed"),
        opened._engine.connect() as conn,
        conn.begin(),
    ):
        conn.exec_driver_sql("UPDATE sessions SET head_checkpoint_id = 'ghost'")
    assert opened.get_head("rt-a") == "cp-a2"
    opened.close()


_DUMP_IN_CHILD = textwrap.dedent(
    """
    import json, sys
    from ditto_jupyter.testing.contracts.store_data import dump_store
    from ditto_jupyter.control.store import SqlCheckpointStore
    store = SqlCheckpointStore.at_path(sys.argv[1])
    print(json.dumps({"version": store.schema_version(), "dump": dump_store(store)}))
    store.close()
    """
)


def test_a_new_process_sees_everything(tmp_path: Path) -> None:
    path = tmp_path / "ditto.db"
    opened = SqlCheckpointStore.at_path(path)
    populate(opened)
    expected = dump_store(opened)
    # the writer is still open: a reader process sees committed data through the WAL
    child = run_python(_DUMP_IN_CHILD, str(path))
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout)
    assert seen == {"version": SCHEMA_VERSION, "dump": expected}
    opened.close()
    # and after the writer is gone, a reopened store has the same models
    reopened = SqlCheckpointStore.at_path(path)
    assert dump_store(reopened) == expected
    assert reopened.get_checkpoint("cp-a1") == checkpoint("cp-a1", "rt-a", 100, name="first")
    reopened.close()


_CHILD_PRELUDE = """
import sys
from ditto_jupyter.core.models import RuntimeCheckpoint, SessionRecord
from ditto_jupyter.control.store import SqlCheckpointStore

def session(rid, **changes):
    return SessionRecord(session_id=rid, conversation_id="c", sender_id="s", **changes)

def checkpoint(cid, rid, created, parent, **changes):
    return RuntimeCheckpoint(
        checkpoint_id=cid, runtime_id=rid, parent_checkpoint_id=parent,
        session=session(rid), created_at_ms=created, **changes,
    )

where = sys.argv[1]
store = SqlCheckpointStore(where) if "://" in where else SqlCheckpointStore.at_path(where)
"""

_BUMPER = _CHILD_PRELUDE + textwrap.dedent(
    """
    tag, times = sys.argv[2], int(sys.argv[3])
    for i in range(times):
        with store.transaction():
            current = store.get_session("rt-1")
            count = current.metadata["count"] + 1
            cid = f"{tag}-{i}"
            store.put_checkpoint(checkpoint(cid, "rt-1", count, store.get_head("rt-1")))
            store.set_head("rt-1", cid)
            store.put_session(current.model_copy(update={"metadata": {"count": count}}))
    store.close()
    """
)


def test_processes_writing_one_file_are_serialized(tmp_path: Path) -> None:
    """Two processes read-modify-write the same runtime: no lost update, no SQLITE_BUSY."""
    path = tmp_path / "ditto.db"
    opened = SqlCheckpointStore.at_path(path)
    check_processes_are_serialized(str(path), opened)
    opened.close()


def check_processes_are_serialized(where: str, opened: CheckpointStore) -> None:
    """Two processes at `where` bump one counter 30 times each, every bump a transaction."""
    opened.insert_session(session("rt-1", metadata={"count": 0}))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _BUMPER, where, tag, "30"],
            cwd=TESTS,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("p", "q")
    ]
    for proc in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, err
    final = opened.get_session("rt-1")
    assert final is not None and final.metadata["count"] == 60
    checkpoints = opened.list_checkpoints("rt-1")
    assert len(checkpoints) == 60
    # every transaction saw the one before it: the parents form one chain
    assert [c.created_at_ms for c in checkpoints] == list(range(1, 61))
    assert checkpoints[0].parent_checkpoint_id is None
    for earlier, later in itertools.pairwise(checkpoints):
        assert later.parent_checkpoint_id == earlier.checkpoint_id
    assert opened.get_head("rt-1") == checkpoints[-1].checkpoint_id


def test_migrates_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "ditto.db"
    path.write_bytes(b"")
    opened = SqlCheckpointStore.at_path(path)
    assert opened.schema_version() == SCHEMA_VERSION == len(MIGRATIONS)
    opened.close()
    with sqlite3.connect(path) as raw:
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert raw.execute("SELECT id, version FROM schema_version").fetchall() == [
            (1, SCHEMA_VERSION)
        ]
    assert {"schema_version", "sessions", "checkpoints", "checkpoint_bases"} <= tables
    assert "heads" not in tables  # schema 11: a column of the runtime's row
    raw.close()


def test_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "ditto.db"
    SqlCheckpointStore.at_path(path).close()
    raw = sqlite3.connect(path)
    raw.execute("UPDATE schema_version SET version = 99")
    raw.commit()
    raw.close()
    with pytest.raises(
        SchemaVersionError, match=f"schema version 99, newer than the {SCHEMA_VERSION} this"
    ):
        SqlCheckpointStore.at_path(path)
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT version FROM schema_version").fetchall() == [(99,)]
    raw.close()


def _add_notes(conn: Any) -> None:
    conn.exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.exec_driver_sql("INSERT INTO notes (body) VALUES ('migrated')")


def _half_then_fail(conn: Any) -> None:
    conn.exec_driver_sql("CREATE TABLE half (id INTEGER)")
    raise RuntimeError("migration step failed")


def test_migration_steps_apply_once_in_order(tmp_path: Path) -> None:
    path = tmp_path / "ditto.db"
    opened = SqlCheckpointStore.at_path(path)
    populate(opened)
    before = dump_store(opened)
    opened.close()
    url = f"sqlite:///{path}"
    next_version = SCHEMA_VERSION + 1
    newer = (*MIGRATIONS, Migration(next_version, "notes", _add_notes))
    for _ in range(2):  # the second open finds the new version and applies nothing
        upgraded = SqlCheckpointStore(url, migrations=newer)
        assert upgraded.schema_version() == next_version
        assert dump_store(upgraded) == before
        upgraded.close()
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT body FROM notes").fetchall() == [("migrated",)]
    raw.close()
    with pytest.raises(SchemaVersionError, match=f"schema version {next_version}"):
        SqlCheckpointStore(url)  # the older code refuses the newer file


def test_a_failing_migration_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ditto.db"
    SqlCheckpointStore.at_path(path).close()
    url = f"sqlite:///{path}"
    bad = Migration(SCHEMA_VERSION + 1, "bad", _half_then_fail)
    with pytest.raises(RuntimeError, match="migration step failed"):
        SqlCheckpointStore(url, migrations=(*MIGRATIONS, bad))
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
    assert raw.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchall() == []
    raw.close()
    gap = Migration(SCHEMA_VERSION + 2, "gap", _add_notes)
    versions = ", ".join(str(v) for v in [*range(1, SCHEMA_VERSION + 1), SCHEMA_VERSION + 2])
    with pytest.raises(ValueError, match=rf"numbered 1, 2, \.\.\. in order, got \[{versions}\]"):
        SqlCheckpointStore(url, migrations=(*MIGRATIONS, gap))


def check_declared_schema(url: str) -> None:
    """A new store at `url` has exactly the columns and indexes `schema` declares (and, on
    PostgreSQL, the byte-ordered id index besides)."""
    SqlCheckpointStore(url).close()
    engine = sa.create_engine(url)
    try:
        inspector = sa.inspect(engine)
        for table in (SESSIONS, CHECKPOINTS, CHECKPOINT_BASES, BINDINGS, LEFTOVERS, LEASES):
            columns = {column["name"] for column in inspector.get_columns(table.name)}
            assert columns == {column.name for column in table.columns}, table.name
            found = {
                str(index["name"]): index["column_names"]
                for index in inspector.get_indexes(table.name)
                if index["name"] != "checkpoints_by_id_bytes"
                and not index.get("duplicates_constraint")  # PostgreSQL's unique id
            }
            declared = {str(i.name): [c.name for c in i.columns] for i in table.indexes}
            assert found == declared, table.name
    finally:
        engine.dispose()


def test_a_new_store_has_the_declared_schema(tmp_path: Path) -> None:
    check_declared_schema(f"sqlite:///{tmp_path / 'ditto.db'}")


def check_blob_columns_filled_in(url: str) -> None:
    """Schema 1 records (one of them damaged) get their blob columns when migrated."""
    SqlCheckpointStore(url, migrations=MIGRATIONS[:1]).close()
    ref = BackendCheckpointRef(backend_kind="local", backend_id="be", provider_snapshot_id="5" * 64)
    records = [
        checkpoint("cp-1", "rt-1", 100),  # context "a" * 64, snapshot "f" * 64
        checkpoint("cp-2", "rt-1", 200, backend_ref=ref, context_manifest_id="b" * 64),
        checkpoint("cp-3", "rt-1", 300, backend_ref=None, context_manifest_id=None),
    ]
    damaged = records[1].model_dump_json().replace('"metadata":{', '"metadata":{{')
    rows = [(r.checkpoint_id, r.created_at_ms, r.model_dump_json()) for r in records]
    rows.append(("cp-4", 400, damaged.replace('"cp-2"', '"cp-4"')))
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO sessions (runtime_id, conversation_id, status, created_at_ms, "
                    "updated_at_ms, data) VALUES ('rt-1', 'c', 'idle', 1, 1, :data)"
                ),
                {"data": session("rt-1").model_dump_json()},
            )
            for cid, created, data in rows:
                conn.execute(
                    sa.text(
                        "INSERT INTO checkpoints (checkpoint_id, runtime_id, created_at_ms, data) "
                        "VALUES (:cid, 'rt-1', :created, :data)"
                    ),
                    {"cid": cid, "created": created, "data": data},
                )
    finally:
        engine.dispose()
    migrated = SqlCheckpointStore(url)
    try:
        assert migrated.schema_version() == SCHEMA_VERSION
        asked = ["a" * 64, "b" * 64, "f" * 64, "5" * 64, "0" * 64]
        assert migrated.referenced_manifests(asked) == set(asked[:4])
        assert [c.checkpoint_id for c in migrated.checkpoints_with_snapshot("f" * 64)] == ["cp-1"]
    finally:
        migrated.close()
    engine = sa.create_engine(url)
    try:  # the damaged record (not JSON any more) still keeps what it names alive
        with engine.connect() as conn:
            named = conn.execute(
                sa.text(
                    "SELECT b.context_manifest_id, b.backend_snapshot_id FROM checkpoints c "
                    "JOIN checkpoint_bases b ON b.id = c.base_id WHERE c.checkpoint_id = 'cp-4'"
                )
            ).one()
        assert tuple(named) == ("b" * 64, "5" * 64)
    finally:
        engine.dispose()


def test_schema_2_fills_in_the_blob_columns_of_old_records(tmp_path: Path) -> None:
    check_blob_columns_filled_in(f"sqlite:///{tmp_path / 'ditto.db'}")


def check_live_runtimes_get_leases_that_ran_out(url: str) -> None:
    """Schema 6: each runtime live before leases existed gets a lease that has run out (the
    first server to look may take it over); paused and closed ones get none."""
    SqlCheckpointStore(url, migrations=MIGRATIONS[:5]).close()
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for rid, status in (("live", "idle"), ("running", "busy"), ("paused", "paused")):
                conn.execute(
                    sa.text(
                        "INSERT INTO sessions (runtime_id, conversation_id, status, "
                        "created_at_ms, updated_at_ms, data) VALUES (:rid, 'c', :status, 1, 1, "
                        ":data)"
                    ),
                    {"rid": rid, "status": status, "data": session(rid).model_dump_json()},
                )
    finally:
        engine.dispose()
    migrated = SqlCheckpointStore(url)
    try:
        leases = migrated.list_leases("runtime")
        assert [lease.key for lease in leases] == ["live", "running"]
        assert all(lease.expired(1) for lease in leases)
    finally:
        migrated.close()


def test_schema_6_gives_live_runtimes_leases_that_ran_out(tmp_path: Path) -> None:
    check_live_runtimes_get_leases_that_ran_out(f"sqlite:///{tmp_path / 'ditto.db'}")


def test_bad_locations_get_clear_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 300)
    with pytest.raises(StoreError, match=r"garbage\.db: file is not a database"):
        SqlCheckpointStore.at_path(garbage)
    with pytest.raises(StoreError, match="unable to open database file"):
        SqlCheckpointStore(f"sqlite:///{tmp_path}/no/such/dir/ditto.db")
    with pytest.raises(ValueError, match="in-memory SQLite database"):
        SqlCheckpointStore("sqlite://")
    with pytest.raises(ValueError, match="supports SQLite and PostgreSQL, not mysql"):
        SqlCheckpointStore("mysql://user:secret@localhost/db")
    with pytest.raises(ValueError, match="is not a database URL"):
        SqlCheckpointStore("::nonsense::")


def test_a_damaged_record_is_named(tmp_path: Path) -> None:
    path = tmp_path / "ditto.db"
    opened = SqlCheckpointStore.at_path(path)
    populate(opened)
    raw = sqlite3.connect(path)
    raw.execute(
        "UPDATE checkpoints SET data = '{\"checkpoint_id\": 7}' WHERE checkpoint_id='cp-a1'"
    )
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="stored checkpoint 'cp-a1' is damaged at checkpoint_id"):
        opened.get_checkpoint("cp-a1")
    assert opened.get_checkpoint("cp-a2") is not None
    opened.close()


def test_open_store_locations(tmp_path: Path) -> None:
    default = open_store(None, tmp_path / "data")
    assert isinstance(default, SqlCheckpointStore)
    default.insert_session(session("rt-1"))
    default.close()
    assert (tmp_path / "data" / "ditto.db").is_file()
    relative = open_store("sub/other.db", tmp_path / "data")
    assert isinstance(relative, SqlCheckpointStore)
    assert relative.list_sessions() == []
    relative.close()
    assert (tmp_path / "data" / "sub" / "other.db").is_file()
    by_url = open_store(f"sqlite:///{tmp_path}/data/ditto.db", tmp_path / "elsewhere")
    assert [s.session_id for s in by_url.list_sessions()] == ["rt-1"]
    by_url.close()
    assert isinstance(open_store("memory://", tmp_path), MemoryCheckpointStore)


# ---- crash safety ---------------------------------------------------------------------

_CRASHER = _CHILD_PRELUDE + textwrap.dedent(
    """
    with store.transaction():
        if store.get_session("rt") is None:
            store.insert_session(session("rt", metadata={"count": 0, "head": None}))
    print("ready", flush=True)
    pad = {"pad": "x" * 50_000}
    while True:
        with store.transaction():
            current = store.get_session("rt")
            n = current.metadata["count"]
            cid = f"cp-{n}"
            store.put_checkpoint(checkpoint(cid, "rt", n, store.get_head("rt"), metadata=pad))
            store.set_head("rt", cid)
            meta = {"count": n + 1, "head": cid}
            store.put_session(current.model_copy(update={"metadata": meta}))
    """
)


@pytest.mark.slow
def test_sigkill_at_random_points_leaves_whole_checkpoints(tmp_path: Path) -> None:
    """A writer killed anywhere (import, migration, mid-transaction) leaves all or nothing."""
    path = tmp_path / "ditto.db"
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    kept: dict[str, RuntimeCheckpoint] = {}
    grew = 0
    for round_no in range(20):
        child = subprocess.Popen(
            [sys.executable, "-c", _CRASHER, str(path)],
            cwd=TESTS,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        if round_no % 4 == 0:  # anywhere from start-up through schema creation to writes
            delay = rng.uniform(0.0, 1.0)
        else:  # somewhere among the write transactions
            assert child.stdout.readline() == "ready\n", child.communicate()[1]
            delay = rng.uniform(0.0, 0.25)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=delay)
        assert child.returncode is None, f"the writer exited early: {child.communicate()[1]}"
        child.send_signal(signal.SIGKILL)
        child.communicate()

        if not path.exists():
            continue
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        raw.close()
        opened = SqlCheckpointStore.at_path(path)
        try:
            current = opened.get_session("rt")
            checkpoints = opened.list_checkpoints("rt")
            count = 0 if current is None else current.metadata["count"]
            context = f"round {round_no}, seed {seed}"
            assert [c.checkpoint_id for c in checkpoints] == [f"cp-{i}" for i in range(count)], (
                context
            )
            head = opened.get_head("rt")
            assert head == (f"cp-{count - 1}" if count else None), context
            assert current is None or current.metadata["head"] == head, context
            for i, cp in enumerate(checkpoints):
                assert cp.parent_checkpoint_id == (f"cp-{i - 1}" if i else None), context
                assert cp.metadata == {"pad": "x" * 50_000}, context
            for cid, earlier in kept.items():  # every earlier checkpoint is intact
                assert opened.get_checkpoint(cid) == earlier, context
            if len(checkpoints) > len(kept):
                grew += 1
            kept = {c.checkpoint_id: c for c in checkpoints}
        finally:
            opened.close()
    assert kept, "no round got as far as writing a checkpoint"
    assert grew >= 10, f"only {grew} of 20 rounds were killed after writing (seed {seed})"

"""The checkpoint store on a real PostgreSQL server, started here from Debian's binaries.

The server runs from a temporary directory on 127.0.0.1 for this module only (as the
`postgres` user when the tests run as root, since PostgreSQL refuses to run as root).
Every test gets its own database. Skipped, saying why, when the binaries, psycopg, or a
user to run the server as are missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from test_checkpoint_rows import check_checkpoints_share_bases
from test_store import (
    check_blob_columns_filled_in,
    check_declared_schema,
    check_live_runtimes_get_leases_that_ran_out,
    check_processes_are_serialized,
)
from test_store_migration import check_old_records_migrate, check_schema_11_keeps_every_record

from ditto_jupyter.control.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    CheckpointStore,
    Migration,
    SchemaVersionError,
    SqlCheckpointStore,
)
from ditto_jupyter.testing.contracts import CheckpointStoreContract
from ditto_jupyter.testing.contracts.store_data import checkpoint, dump_store, populate, session
from tests.support.postgres_server import new_database, pg_missing, running_postgres

# a PostgreSQL server of its own, from Debian's postgresql (`make postgresql`)
pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg", reason="psycopg (PostgreSQL driver) is not installed")


@pytest.fixture(scope="module")
def pg_server() -> Iterator[str]:
    """A PostgreSQL server for this module; yields its URL (`tests/support/postgres_server`)."""
    missing = pg_missing()
    if missing:
        pytest.skip(missing)
    with running_postgres() as url:
        yield url


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """The URL of a new, empty database on the module's server."""
    return new_database(pg_server)


@pytest.fixture
def store(pg_url: str) -> Iterator[CheckpointStore]:
    """A fresh store on its own PostgreSQL database."""
    opened = SqlCheckpointStore(pg_url)
    yield opened
    opened.close()


class TestPostgresContract(CheckpointStoreContract):
    """The whole store contract on PostgreSQL."""


def _scalar(url: str, sql: str) -> object:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.exec_driver_sql(sql).scalar()
    finally:
        engine.dispose()


def _execute(url: str, sql: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


def test_schema_and_reopen(pg_url: str) -> None:
    opened = SqlCheckpointStore(pg_url)
    assert opened.schema_version() == SCHEMA_VERSION
    assert opened.journal_mode is None
    populate(opened)
    expected = dump_store(opened)
    opened.close()
    again = SqlCheckpointStore(pg_url)
    assert dump_store(again) == expected
    again.close()
    assert _scalar(pg_url, "SELECT version FROM schema_version") == SCHEMA_VERSION


def test_password_is_not_shown(pg_url: str) -> None:
    with_password = pg_url.replace("ditto@", "ditto:hunter2@")
    opened = SqlCheckpointStore(with_password)  # trust auth ignores the password
    assert "hunter2" not in repr(opened)
    opened.close()


def test_processes_are_serialized(pg_url: str) -> None:
    """Two processes read-modify-write one runtime through PostgreSQL: no lost update."""
    opened = SqlCheckpointStore(pg_url)
    check_processes_are_serialized(pg_url, opened)
    opened.close()


def _add_notes(conn: sa.Connection) -> None:
    conn.exec_driver_sql("CREATE TABLE notes (id SERIAL PRIMARY KEY, body TEXT)")
    conn.exec_driver_sql("INSERT INTO notes (body) VALUES ('migrated')")


def _half_then_fail(conn: sa.Connection) -> None:
    conn.exec_driver_sql("CREATE TABLE half (id INTEGER)")
    raise RuntimeError("migration step failed")


def test_migrations_on_postgres(pg_url: str) -> None:
    SqlCheckpointStore(pg_url).close()
    following = SCHEMA_VERSION + 1
    bad = Migration(following, "bad", _half_then_fail)
    with pytest.raises(RuntimeError, match="migration step failed"):
        SqlCheckpointStore(pg_url, migrations=(*MIGRATIONS, bad))
    assert _scalar(pg_url, "SELECT version FROM schema_version") == SCHEMA_VERSION
    assert _scalar(pg_url, "SELECT to_regclass('half') IS NULL") is True
    notes = (*MIGRATIONS, Migration(following, "n", _add_notes))
    upgraded = SqlCheckpointStore(pg_url, migrations=notes)
    assert upgraded.schema_version() == following
    upgraded.close()
    assert _scalar(pg_url, "SELECT body FROM notes") == "migrated"
    with pytest.raises(
        SchemaVersionError, match=f"schema version {following}, newer than the {SCHEMA_VERSION}"
    ):
        SqlCheckpointStore(pg_url)
    _execute(pg_url, "UPDATE schema_version SET version = 99")
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        SqlCheckpointStore(pg_url, migrations=notes)


def test_long_ids_fit(store: CheckpointStore) -> None:
    """Checkout ids grow by a suffix per generation: no length limit may bite."""
    rid = "rt" + "-0123456789abcdef0123456789abcdef" * 20
    store.insert_session(session(rid))
    store.put_checkpoint(checkpoint(rid + "-cp", rid, name="n" * 1000))
    store.set_head(rid, rid + "-cp")
    assert store.get_head(rid) == rid + "-cp"
    assert [c.checkpoint_id for c in store.find_checkpoints(rid[:500])] == [rid + "-cp"]


def test_a_new_store_has_the_declared_schema(pg_url: str) -> None:
    check_declared_schema(pg_url)


def test_schema_2_fills_in_the_blob_columns_of_old_records(pg_url: str) -> None:
    check_blob_columns_filled_in(pg_url)


def test_schema_6_gives_live_runtimes_leases_that_ran_out(pg_url: str) -> None:
    check_live_runtimes_get_leases_that_ran_out(pg_url)


def test_schema_11_keeps_every_record(pg_url: str) -> None:
    check_schema_11_keeps_every_record(pg_url)


def test_checkpoints_share_bases(pg_url: str) -> None:
    check_checkpoints_share_bases(pg_url)


def test_old_records_migrate(pg_url: str) -> None:
    check_old_records_migrate(pg_url)


def test_id_prefixes_use_the_byte_ordered_index(pg_url: str, store: CheckpointStore) -> None:
    """Whatever the database's locale, an id prefix is a range on an index, not a scan."""
    store.insert_session(session("rt"))
    for number in range(200):
        store.put_checkpoint(checkpoint(f"{number:04x}" + "0" * 28, "rt", number))
    assert [c.checkpoint_id[:4] for c in store.find_by_id_prefix("00c")] == [
        f"{n:04x}" for n in range(0xC0, 0xC8)
    ]
    engine = sa.create_engine(pg_url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE checkpoints")
            conn.exec_driver_sql("SET enable_seqscan = off")
            plan = conn.exec_driver_sql(
                "EXPLAIN SELECT checkpoint_id FROM checkpoints WHERE "
                "checkpoint_id COLLATE \"C\" >= '00c' AND checkpoint_id COLLATE \"C\" < '00d'"
            ).all()
    finally:
        engine.dispose()
    assert "checkpoints_by_id_bytes" in " ".join(str(row[0]) for row in plan)

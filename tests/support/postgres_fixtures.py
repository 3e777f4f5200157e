"""The pytest fixtures of a real PostgreSQL server (`postgres_server`), for a test module
with `pytest_plugins = ["tests.support.postgres_fixtures"]`:

- `postgres_server`: the session's server (started on first use, stopped at the end);
- `postgres_url`: a new, empty database on it for one test.

A machine without PostgreSQL skips, saying why (`make postgresql`; under CI=true a skip
is a failure).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres_server import new_database, pg_missing, running_postgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The test session's PostgreSQL server: its URL (no database)."""
    missing = pg_missing()
    if missing:
        pytest.skip(missing)
    with running_postgres() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """The URL of a new, empty database on the session's server."""
    return new_database(postgres_server)

"""Open the checkpoint store a configuration names, after checking that it names one."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from ditto_jupyter.control.store.interface import BUSY_TIMEOUT_MS, CheckpointStore
from ditto_jupyter.control.store.memory import MemoryCheckpointStore
from ditto_jupyter.control.store.sql import SqlCheckpointStore
from ditto_jupyter.core.errors import ConfigurationError

#: The setting that names the store, as errors name it.
SETTING = "store_url (DITTO_STORE_URL)"
#: The databases the store runs on.
_BACKENDS = ("sqlite", "postgresql")
#: The password part of a URL's `user:password@` (never shown).
_PASSWORD = re.compile(r"(://[^:/@]*):[^@]*@")
#: The port of a URL's host part, as written.
_PORT = re.compile(r"://(?:[^@/]*@)?[^:/@]*:([^/?#]*)")


def open_store(
    url_or_path: str | None, data_dir: Path, *, lock_timeout_ms: int = BUSY_TIMEOUT_MS
) -> CheckpointStore:
    """Open the store a configuration names.

    None or "" -> the SQLite file `data_dir/ditto.db`; "memory://" -> a MemoryCheckpointStore;
    anything with "://" -> a SQLAlchemy URL (sqlite:///..., postgresql+psycopg://...);
    otherwise a SQLite file path, relative paths taken from `data_dir`. `lock_timeout_ms`
    bounds every lock wait (then StoreError, 503 `StoreUnavailable`).
    """
    if not url_or_path:
        return SqlCheckpointStore.at_path(
            Path(data_dir) / "ditto.db", busy_timeout_ms=lock_timeout_ms
        )
    if url_or_path == "memory://":
        return MemoryCheckpointStore(lock_timeout_s=lock_timeout_ms / 1000)
    if "://" in url_or_path:
        return SqlCheckpointStore(url_or_path, busy_timeout_ms=lock_timeout_ms)
    path = Path(url_or_path).expanduser()
    return SqlCheckpointStore.at_path(
        path if path.is_absolute() else Path(data_dir) / path, busy_timeout_ms=lock_timeout_ms
    )


def check_store_url(url_or_path: str | None) -> None:
    """ConfigurationError naming the setting when a store URL cannot be one: not a URL
    SQLAlchemy reads (a port that is not a number, say), or a database other than SQLite
    and PostgreSQL. Connects to nothing; the password is never in the message."""
    if not url_or_path or url_or_path == "memory://" or "://" not in url_or_path:
        return
    shown = _PASSWORD.sub(r"\1:***@", url_or_path)
    try:
        url = make_url(url_or_path)
        backend = url.get_backend_name()
    except (sa.exc.ArgumentError, ValueError) as error:
        reason = str(error).replace(url_or_path, shown)
        port = _PORT.search(url_or_path)
        if port is not None and not port.group(1).isdigit():
            reason = f"its port {port.group(1)!r} is not a number"
        raise ConfigurationError(f"{SETTING} {shown!r} is not a database URL: {reason}") from None
    if url.port is not None and not 0 < url.port < 65536:
        raise ConfigurationError(
            f"{SETTING} {shown!r} is not a database URL: its port {url.port} is not a TCP "
            "port (1 to 65535)"
        )
    if backend not in _BACKENDS:
        raise ConfigurationError(
            f"{SETTING} {shown!r} names a {backend} database: the checkpoint store runs on "
            "SQLite and PostgreSQL"
        )

"""Open the checkpoint store a configuration names."""

from __future__ import annotations

from pathlib import Path

from ditto_jupyter.control.store.interface import CheckpointStore
from ditto_jupyter.control.store.memory import MemoryCheckpointStore
from ditto_jupyter.control.store.sql import SqlCheckpointStore


def open_store(url_or_path: str | None, data_dir: Path) -> CheckpointStore:
    """Open the store a configuration names.

    None or "" -> the SQLite file `data_dir/ditto.db`; "memory://" -> a MemoryCheckpointStore;
    anything with "://" -> a SQLAlchemy URL (sqlite:///..., postgresql+psycopg://...);
    otherwise a SQLite file path, relative paths taken from `data_dir`.
    """
    if not url_or_path:
        return SqlCheckpointStore.at_path(Path(data_dir) / "ditto.db")
    if url_or_path == "memory://":
        return MemoryCheckpointStore()
    if "://" in url_or_path:
        return SqlCheckpointStore(url_or_path)
    path = Path(url_or_path).expanduser()
    return SqlCheckpointStore.at_path(path if path.is_absolute() else Path(data_dir) / path)

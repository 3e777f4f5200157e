"""The write-ahead logs of the data directory's SQLite files: bounded, and counted.

Both SQLite files of a data directory (the checkpoint store's `ditto.db` and the blob
catalogue `objects.db`) run in WAL mode, and their logs are part of what a user's disk
holds. Left alone, a log keeps the largest size it ever reached, and grows by a page image
for every page a transaction touched until a checkpoint of the log copies them back. Here:

- `bound_log(conn)`: the pragmas that bound a log: a checkpoint of it every
  `AUTOCHECKPOINT_PAGES` pages (PASSIVE, run by the committing writer), and a log cut back
  to `JOURNAL_SIZE_LIMIT` bytes whenever it restarts;
- `IDLE_LOGS.wrote(path)`: once no transaction of this process wrote to that file for
  `IDLE_SECONDS`, a TRUNCATE checkpoint of its log, on a connection of its own that never
  waits (the log goes back to 0 bytes; when a reader or writer is busy, it is tried again
  after the next idle spell);
- `log_frames(path)` and `LogMeter`: what a write transaction appended to the log, read
  from the wal-index header in the `-shm` file (SQLite file format, "The WAL-Index
  Format": `mxFrame`, the last valid frame, is the native-order u32 at byte 16), so the
  "written" figure of a checkpoint counts database bytes, page images and frame headers.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_log = logging.getLogger(__name__)

#: Pages after which the committing writer checkpoints the log (SQLite's default is 1000).
AUTOCHECKPOINT_PAGES = 1000
#: Bytes a log is cut back to when it restarts (SQLite's default keeps it at its peak).
JOURNAL_SIZE_LIMIT = 1024 * 1024
#: Seconds without a write after which the log is checkpointed and truncated.
IDLE_SECONDS = 2.0
#: Bytes of a WAL frame's header, before the page image.
FRAME_HEADER = 24
_MX_FRAME = struct.Struct("=I")  # the wal-index header is in the machine's byte order
_MX_FRAME_OFFSET = 16


def bound_log(conn: sqlite3.Connection) -> None:
    """Set the pragmas that bound a connection's database log (they last per connection)."""
    conn.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
    conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")


def log_frames(database: Path) -> int:
    """Frames in the database's write-ahead log now (0 without a log or its index)."""
    try:
        fd = os.open(f"{database}-shm", os.O_RDONLY)
    except OSError:
        return 0
    try:
        header = os.pread(fd, _MX_FRAME_OFFSET + _MX_FRAME.size, 0)
    except OSError as exc:  # counted as nothing: the figure is a report, not a decision
        _log.debug("could not read the log index of %s: %s", database, exc)
        return 0
    finally:
        os.close(fd)
    if len(header) < _MX_FRAME_OFFSET + _MX_FRAME.size:
        return 0
    return int(_MX_FRAME.unpack_from(header, _MX_FRAME_OFFSET)[0])


@dataclass
class LogMeter:
    """The bytes one write transaction appends to a database's log.

    `start` is read while the transaction holds the write lock (no other writer can
    append then), `stop` right after its commit. A transaction that restarted the log
    (its first write after a full checkpoint) wrote the frames counted from its start.
    """

    database: Path
    page_size: int
    frames_before: int = 0

    def start(self) -> None:
        """Note where the log ends, inside the write transaction."""
        self.frames_before = log_frames(self.database)

    def stop(self) -> int:
        """The bytes appended since `start` (call once the transaction committed)."""
        after = log_frames(self.database)
        frames = after - self.frames_before if after >= self.frames_before else after
        return frames * (self.page_size + FRAME_HEADER)


class IdleLogs:
    """TRUNCATE checkpoints of the logs this process wrote to, once each is idle.

    One daemon thread for the process, started on the first write; it sleeps while no
    log waits for a checkpoint.
    """

    def __init__(self, idle_seconds: float = IDLE_SECONDS) -> None:
        self.idle_seconds = idle_seconds
        self._last_write: dict[Path, float] = {}
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    def wrote(self, database: Path) -> None:
        """A transaction of this process committed to `database`: checkpoint its log once
        it has been idle for `idle_seconds`."""
        with self._condition:
            self._last_write[database] = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="ditto-idle-log-checkpoint", daemon=True
                )
                self._thread.start()
            self._condition.notify()

    def forget(self, database: Path) -> None:
        """Stop watching `database` (its store is closed)."""
        with self._condition:
            self._last_write.pop(database, None)

    def pending(self) -> list[Path]:
        """The databases whose log waits for its idle checkpoint."""
        with self._condition:
            return list(self._last_write)

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._last_write:
                    self._condition.wait()
                now = time.monotonic()
                due = [p for p, t in self._last_write.items() if now - t >= self.idle_seconds]
                if not due:
                    wait = min(self._last_write.values()) + self.idle_seconds - now
                    self._condition.wait(timeout=max(wait, 0.01))
                    continue
                written_at = {p: self._last_write[p] for p in due}
            for database in due:
                done = checkpoint_log(database)
                with self._condition:
                    if self._last_write.get(database) != written_at[database]:
                        continue  # written again meanwhile: its own idle spell decides
                    if done:
                        del self._last_write[database]
                    else:  # busy: try again after another idle spell
                        self._last_write[database] = time.monotonic()


def checkpoint_log(database: Path) -> bool:
    """Checkpoint and truncate a database's log without waiting for anyone; whether the
    whole log was copied back (False when a reader or writer was busy, or it failed)."""
    if not database.exists():
        return True
    try:
        conn = sqlite3.connect(database, timeout=0, isolation_level=None)
    except sqlite3.Error as exc:
        _log.info("could not open %s to checkpoint its log: %s", database, exc)
        return False
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    except sqlite3.Error as exc:  # locked: the next idle spell tries again
        _log.debug("left the log of %s for later: %s", database, exc)
        return False
    finally:
        conn.close()
    return not busy


#: The idle checkpoints of this process's logs.
IDLE_LOGS = IdleLogs()

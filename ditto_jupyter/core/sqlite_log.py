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
- `log_position(path)` and `LogMeter`: what a write transaction appended to the log, read
  from the log file itself (SQLite file format, "The Write-Ahead Log": a 32-byte header with
  the page size and the salts of the log's current generation, then frames of a 24-byte
  header and a page image; the frames of the current generation carry its salts and come
  first). Never from the `-shm` file: closing any descriptor of a file drops every POSIX
  lock the process holds on it, and SQLite's locks of the log index live there.
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
AUTOCHECKPOINT_PAGES = 256
#: Bytes a log is cut back to when it restarts (SQLite's default keeps it at its peak).
JOURNAL_SIZE_LIMIT = 1024 * 1024
#: Seconds without a write after which the log is checkpointed and truncated.
IDLE_SECONDS = 0.5
#: Bytes of a WAL frame's header, before the page image.
FRAME_HEADER = 24
#: Bytes of a WAL file's header, written again whenever the log restarts.
LOG_HEADER = 32
_U32 = struct.Struct(">I")


def bound_log(conn: sqlite3.Connection) -> None:
    """Set the pragmas that bound a connection's database log (they last per connection)."""
    conn.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
    conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")


@dataclass(frozen=True)
class LogPosition:
    """Where a database's log ends: its generation (salts), frames in it, frame size."""

    salts: bytes = b""
    frames: int = 0
    frame_size: int = 0


def log_position(database: Path) -> LogPosition:
    """Where the database's write-ahead log ends now (an empty position without a log).

    The frames of the log's current generation are those carrying its salts; they come
    first (a restarted log overwrites from the start, and an older frame left beyond them
    has the salts of its own generation), so a binary search finds where they end.
    """
    try:
        fd = os.open(f"{database}-wal", os.O_RDONLY)
    except OSError:
        return LogPosition()
    try:
        header = os.pread(fd, LOG_HEADER, 0)
        if len(header) < LOG_HEADER:
            return LogPosition()
        frame_size = _U32.unpack_from(header, 8)[0] + FRAME_HEADER
        salts = header[16:24]
        low, high = 0, max(0, (os.fstat(fd).st_size - LOG_HEADER) // frame_size)
        while low < high:
            middle = (low + high) // 2
            frame = os.pread(fd, FRAME_HEADER, LOG_HEADER + middle * frame_size)
            if frame[8:16] == salts:
                low = middle + 1
            else:
                high = middle
        return LogPosition(salts, low, frame_size)
    except OSError as exc:  # counted as nothing: the figure is a report, not a decision
        _log.debug("could not read the log of %s: %s", database, exc)
        return LogPosition()
    finally:
        os.close(fd)


@dataclass
class LogMeter:
    """The bytes one write transaction appends to a database's log.

    `start` is read while the transaction holds the write lock (no other writer can
    append then), `stop` right after its commit. A transaction that restarted the log
    (its first write after a full checkpoint: new salts) wrote every frame there is, and
    the log's header before them (into a log truncated to nothing, that is what it grew).
    """

    database: Path
    before: LogPosition = LogPosition()

    def start(self) -> None:
        """Note where the log ends, inside the write transaction."""
        self.before = log_position(self.database)

    def stop(self) -> int:
        """The bytes appended since `start` (call once the transaction committed)."""
        after = log_position(self.database)
        if after.salts == self.before.salts:
            return max(0, after.frames - self.before.frames) * after.frame_size
        return LOG_HEADER + after.frames * after.frame_size if after.frames else 0


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

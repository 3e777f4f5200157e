"""Which process owns a runtime: the runtime leases one RuntimeService holds in its store.

Every operation on a runtime holds the runtime's lease while it runs (`claim`), and a live
runtime's lease stays with the service that runs it until it pauses, closes or is lost.
So two servers sharing a data directory (or a PostgreSQL store) never operate on one
runtime at once: the second one is refused with `SessionBusy`, naming where the runtime
lives. A paused runtime has no lease: any server may resume it, and of two resuming it at
once exactly one takes the lease.

A lease is taken from its holder only when that holder is gone:

- on the same host (same boot), when its process no longer runs: no process with its pid
  and start time (a reused pid is another process), or a zombie; in this very process, a
  service that was closed. A holder whose process runs keeps its runtimes, even when its
  heartbeat is late: a busy server is not a dead one;
- on another host, which cannot be looked at from here, when its lease ran out: a server
  renews its leases on a heartbeat (`renew`) and lets them run out when it stops
  (`close`); a lease without expiry (an in-kernel service, which never renews) is held
  until a process on its own host finds its holder gone.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.errors import SessionBusy
from ditto_jupyter.core.models import (
    RUNTIME_LEASE,
    Lease,
    LeaseHolder,
    SessionLifecycleStatus,
    now_ms,
)

_log = logging.getLogger(__name__)

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_LIVE = (SessionLifecycleStatus.IDLE, SessionLifecycleStatus.BUSY)

#: The owner ids of the services open in this process (their holders are not gone).
_open_here: set[str] = set()


def boot_id() -> str:
    """This host's boot id (Linux), or "" where there is none to read."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int:
    """When process `pid` started (clock ticks after boot, from /proc); 0 when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat.rpartition(")")[2].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else 0


def this_process(url: str | None = None) -> LeaseHolder:
    """A new holder for this process: a fresh owner id, this host, its boot and process."""
    pid = os.getpid()
    return LeaseHolder(
        owner_id=uuid.uuid4().hex,
        host=socket.gethostname(),
        boot_id=boot_id(),
        pid=pid,
        pid_start=process_start(pid),
        url=url,
    )


def process_alive(pid: int, started: int = 0) -> bool:
    """Whether process `pid` runs on this host, and is the one that started at `started`
    (0: any); a zombie does not run."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc to ask: the signal said it exists
    fields = stat.rpartition(")")[2].split()
    if fields[:1] == ["Z"]:
        return False
    return not started or process_start(pid) in (0, started)


class RuntimeOwnership:
    """The runtime leases of one service: claim, release, renew, and who else is gone."""

    def __init__(
        self,
        store: CheckpointStore,
        holder: LeaseHolder | None = None,
        *,
        ttl_ms: int | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.holder = holder or this_process()
        #: How long a lease lasts between heartbeats (None: while this process lives).
        self.ttl_ms = ttl_ms
        self.clock = clock
        _open_here.add(self.holder.owner_id)

    @property
    def owner_id(self) -> str:
        return self.holder.owner_id

    def answer_at(self, url: str) -> None:
        """Say where this holder's API answers, in the leases it takes from now on (a
        server knows its URL only once it listens)."""
        self.holder = self.holder.model_copy(update={"url": url})

    # ---- claiming ------------------------------------------------------------------------

    def claim(self, runtime_id: str) -> None:
        """Hold the runtime's lease (already held: one read), or SessionBusy naming where
        it lives. A lease whose holder is gone is taken over."""
        now = self.clock()
        lease = self.store.get_lease(RUNTIME_LEASE, runtime_id)
        if lease is not None and lease.holder.owner_id == self.owner_id and not lease.expired(now):
            return
        other = (
            lease.holder if lease is not None and lease.holder.owner_id != self.owner_id else None
        )
        take_from = None
        if lease is not None and other is not None:
            if not self.holder_gone(lease):
                raise self.refusal(runtime_id, lease)
            take_from = other.owner_id
        taken = self.store.acquire_lease(
            RUNTIME_LEASE,
            runtime_id,
            self.holder,
            now_ms=now,
            ttl_ms=self.ttl_ms,
            take_from=take_from,
        )
        if taken.holder.owner_id != self.owner_id:  # another server was quicker
            raise self.refusal(runtime_id, taken)
        if other is not None:
            _log.info(
                "ditto: took runtime %s over from %s, which is gone", runtime_id, other.describe()
            )

    def release(self, runtime_id: str) -> None:
        """Give the runtime's lease up (when this service holds it)."""
        self.store.release_lease(RUNTIME_LEASE, runtime_id, self.owner_id)

    def release_unless_live(self, runtime_id: str) -> None:
        """After an operation: give the lease up unless the runtime is live (a failure is
        logged; the lease then stays until the watcher or a heartbeat finds it)."""
        try:
            session = self.store.get_session(runtime_id)
            if session is None or session.status not in _LIVE:
                self.release(runtime_id)
        except Exception as error:  # the store refused (a full disk): keep the lease for now
            _log.warning("ditto: could not release the lease of runtime %s: %s", runtime_id, error)

    def refusal(self, runtime_id: str, lease: Lease) -> SessionBusy:
        """The error refusing an operation on a runtime another process holds."""
        return SessionBusy(
            f"runtime {runtime_id} is live on {lease.holder.describe()}; operate on it there "
            "(another server takes it over once that one is gone)"
        )

    # ---- other holders -------------------------------------------------------------------

    def holder_gone(self, lease: Lease) -> bool:
        """Whether the holder of `lease` is gone: on this host, its process no longer runs
        (in this process: its service was closed); on another host, its lease ran out."""
        other, me = lease.holder, self.holder
        if (other.host, other.boot_id) != (me.host, me.boot_id):
            return lease.expired(self.clock())
        if other.pid == me.pid:
            return other.owner_id not in _open_here
        return not process_alive(other.pid, other.pid_start)

    def held(self) -> list[Lease]:
        """The runtime leases this service holds (an index lookup)."""
        return self.store.list_leases(RUNTIME_LEASE, owner_id=self.owner_id)

    def lapsed(self) -> list[Lease]:
        """The runtime leases of holders that are gone (runtimes to take over)."""
        return [
            lease
            for lease in self.store.list_leases(RUNTIME_LEASE)
            if lease.holder.owner_id != self.owner_id and self.holder_gone(lease)
        ]

    # ---- heartbeat and stop --------------------------------------------------------------

    def renew(self) -> int:
        """Extend every lease this service holds by its time to live (a heartbeat)."""
        if self.ttl_ms is None:
            return 0
        return self.store.renew_leases(self.owner_id, now_ms=self.clock(), ttl_ms=self.ttl_ms)

    def close(self) -> None:
        """This service stops: its leases run out now (another may take its runtimes over)."""
        _open_here.discard(self.owner_id)
        try:
            self.store.expire_leases(self.owner_id, now_ms=self.clock())
        except Exception as error:  # the store is gone or full: the leases run out later
            _log.warning("ditto: could not let the leases of %s run out: %s", self.owner_id, error)

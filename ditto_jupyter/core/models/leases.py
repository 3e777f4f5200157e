"""Leases: which process holds a resource (a live runtime, say) and until when.

A Jupyter server holds the lease of every live runtime it runs, so that another server on
the same store never marks that runtime lost, touches its workspace or operates on it.
The holder says who it is (a random id drawn when it started, its host, boot, pid and the
process's start time, its URL) so that a refusal can say where the runtime lives, and so
that a server on the same host can tell at once that a holder's process is gone.
"""

from __future__ import annotations

from pydantic import Field

from ditto_jupyter.core.models.fields import StrictModel

#: The kind of lease a live runtime's server holds (its key is the runtime id).
RUNTIME_LEASE = "runtime"


class LeaseHolder(StrictModel):
    """A process that holds leases: its id (drawn at start), host, boot, pid and URL."""

    owner_id: str = Field(min_length=1)
    host: str
    #: The host's boot id (Linux): a pid of another boot names another process.
    boot_id: str = ""
    pid: int = Field(ge=0)
    #: When the process started (clock ticks after boot, Linux; 0: unknown): with the boot
    #: and the pid, it names one process even once the pid is reused.
    pid_start: int = Field(default=0, ge=0)
    #: Where its REST API answers (a server), for the messages that name it.
    url: str | None = None

    def describe(self) -> str:
        """Where it is, for a message: `the Jupyter server at URL (pid P on host H)`."""
        where = f"pid {self.pid} on host {self.host or 'unknown'}"
        if self.url:
            return f"the Jupyter server at {self.url} ({where})"
        return f"the process {where}"


class Lease(StrictModel):
    """One held lease: what it covers (`kind`, `key`), who holds it, and until when.

    `expires_at_ms` None: held while the holder's process lives, which only a process on
    the same host can tell (an in-kernel service that never renews).
    """

    kind: str
    key: str
    holder: LeaseHolder
    acquired_at_ms: int
    expires_at_ms: int | None = None

    def expired(self, now_ms: int) -> bool:
        """Whether the lease has run out at `now_ms` (one without expiry never does)."""
        return self.expires_at_ms is not None and self.expires_at_ms <= now_ms

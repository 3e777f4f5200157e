"""Control-plane errors: one type per stable code, each carrying its HTTP status.

Front ends (REST handlers, magics, CLI) map these to responses without tables of their own:
`{"error": err.code, "message": str(err)}` with status `err.http_status`.
"""

from __future__ import annotations


class DittoError(Exception):
    """Base of every expected control-plane error; the message is one plain sentence."""

    code: str = "DittoError"
    http_status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_body(self) -> dict[str, str]:
        """The JSON error body of the REST contract."""
        return {"error": self.code, "message": self.message}


class InvalidRequest(DittoError):
    """The request body or an argument is malformed, missing a field, or has an unknown one."""

    code = "InvalidRequest"
    http_status = 400


class RuntimeNotFound(DittoError):
    """No runtime with that id."""

    code = "RuntimeNotFound"
    http_status = 404


class CheckpointNotFound(DittoError):
    """No checkpoint with that id."""

    code = "CheckpointNotFound"
    http_status = 404


class SessionBusy(DittoError):
    """The kernel is busy, or another control operation on this runtime is in flight."""

    code = "SessionBusy"
    http_status = 409


class RuntimePaused(DittoError):
    """The operation needs a live runtime but this one is paused."""

    code = "RuntimePaused"
    http_status = 409


class RuntimeNotPaused(DittoError):
    """Resume was asked of a runtime that is not paused."""

    code = "RuntimeNotPaused"
    http_status = 409


class RuntimeClosed(DittoError):
    """The runtime is closed and refuses every operation."""

    code = "RuntimeClosed"
    http_status = 409


class UnsupportedBackend(DittoError):
    """The checkpoint's backend cannot do what was asked."""

    code = "UnsupportedBackend"
    http_status = 422


class BackendError(DittoError):
    """The provider (E2B, the local workspace, a kernel) failed, or the object store holds
    what cannot be used (a damaged, foreign or missing object); the message carries why."""

    code = "BackendError"
    http_status = 502


class RateLimited(DittoError):
    """The provider refused for rate or concurrency limits."""

    code = "RateLimited"
    http_status = 429


class StorageFull(DittoError):
    """The disk (or volume) holding the data directory has no room left; nothing was saved."""

    code = "StorageFull"
    http_status = 507


class Conflict(DittoError):
    """The request does not fit what is recorded: nothing to undo, a checkpoint's document
    already recorded or no longer awaited."""

    code = "Conflict"
    http_status = 409


class CaptureLost(Conflict):
    """A kernel's own capture names bytes that are gone (this server's cache let them go,
    then the object store's collection deleted them): capture again, which stores them."""

    code = "CaptureLost"


class StoreUnavailable(DittoError):
    """The checkpoint store or blob store could not be read or written (not bad input)."""

    code = "StoreUnavailable"
    http_status = 503


class ConfigurationError(DittoError):
    """A setting of the deployment is wrong (the message names it and what is wrong with
    it). Under a server, found at start: the server runs on without ditto-jupyter, every
    route of the extension answers this, and jupyter-server's idle culler is off, until the
    setting is fixed and the server restarted."""

    code = "ConfigurationError"
    http_status = 503


ERROR_TYPES: tuple[type[DittoError], ...] = (
    InvalidRequest,
    RuntimeNotFound,
    CheckpointNotFound,
    SessionBusy,
    RuntimePaused,
    RuntimeNotPaused,
    RuntimeClosed,
    Conflict,
    CaptureLost,
    UnsupportedBackend,
    BackendError,
    RateLimited,
    StorageFull,
    StoreUnavailable,
    ConfigurationError,
)


def error_type_of(code: object) -> type[DittoError] | None:
    """The error type whose stable code this is (an answer's `error` field), or None."""
    return next((kind for kind in ERROR_TYPES if kind.code == code), None)


#: Errors that mean the same wherever they happen: raised inside a kernel (its own capture
#: writing into a full disk), they keep their code instead of becoming a BackendError.
STORAGE_ERRORS: tuple[type[DittoError], ...] = (StorageFull, StoreUnavailable)

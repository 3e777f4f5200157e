"""Each user sees only their own runtimes and checkpoints (issue 24 section 3).

Many servers may share one store (JupyterHub: one server per user, one PostgreSQL
database and one bucket for all). A runtime belongs to the user who made it
(`SessionRecord.owner`; a checkout to its source's owner), and a checkpoint to its
runtime's owner. Every route asks this scope before it reads or operates: another
user's runtime or checkpoint is answered exactly as one that does not exist (the same
`RuntimeNotFound` or `CheckpointNotFound`, word for word), and a lookup by id prefix or
name never counts, names or lists it. So a checkpoint id guessed, or copied from another
user, gives nothing away.

Who the user is comes from the server's identity provider (`request_user`): on JupyterHub
the hub user the request was authenticated as. jupyter-server's own providers (a token or
a password) name nobody: they make up an anonymous name for each browser, so there the
user is the one whose server it is (`server_user`: `JUPYTERHUB_USER`, else the OS user).
A `self/...` route, which proves with its kernel's token that it is that runtime's kernel,
acts as the runtime's owner.
"""

from __future__ import annotations

import getpass
import os
from typing import Any

from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import CheckpointNotFound, RuntimeNotFound
from ditto_jupyter.core.models import RuntimeCheckpoint, SessionRecord

#: The module of jupyter-server's own identity providers (token, password, legacy): they
#: name no user, only an anonymous one made up for each browser.
_ANONYMOUS_PROVIDERS = "jupyter_server.auth"


def server_user() -> str:
    """Whose server this is: the hub user on JupyterHub, else the OS user."""
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def request_user(identity_provider: Any, current_user: Any, owner: str) -> str:
    """The user a request acts as: the identity provider's user when the provider names
    users (JupyterHub's), else `owner` (the server's user: jupyter-server's token and
    password providers authenticate anonymous browsers, each under a made-up name)."""
    module = type(identity_provider).__module__ if identity_provider is not None else ""
    if identity_provider is None or module.startswith(_ANONYMOUS_PROVIDERS):
        return owner
    name = getattr(current_user, "username", None) or getattr(current_user, "name", None)
    return str(name) if name else owner


class UserScope:
    """What one user may see of a shared store: their own runtimes and checkpoints.

    Every method reads the store on a store thread (`off_loop`): a read that waits (a
    database across a network partition) never stops the server's event loop."""

    def __init__(self, service: RuntimeService, owner: str | None = None) -> None:
        self.service = service
        #: The user whose server this is (the runtimes its Jupyter sessions become).
        self.server_user = owner or server_user()

    # ---- runtimes ------------------------------------------------------------------------

    async def known(self, runtime_id: str, user: str) -> SessionRecord | None:
        """Before an operation: the runtime when it is `user`'s; None when the store does
        not know the id (a Jupyter session may); RuntimeNotFound when it is another user's,
        as an operation on an id neither the store nor Jupyter knows answers."""
        session = await off_loop(self.service.find_session, runtime_id)
        if session is not None and not session.belongs_to(user):
            raise RuntimeNotFound(f"no runtime or Jupyter session with id {runtime_id!r}")
        return session

    async def runtime(self, runtime_id: str, user: str) -> SessionRecord:
        """For a read: the runtime when it is `user`'s, else RuntimeNotFound, as a read of
        an id the store does not know answers."""
        return await off_loop(self._runtime, runtime_id, user)

    def _runtime(self, runtime_id: str, user: str) -> SessionRecord:
        session = self.service.find_session(runtime_id)
        if session is None or not session.belongs_to(user):
            raise RuntimeNotFound(f"no runtime with id {runtime_id!r}")
        return session

    async def owner_of(self, runtime_id: str) -> str:
        """Who a runtime belongs to (the server's user for one the store does not know yet:
        a Jupyter session of this server, registered as the server user's)."""
        session = await off_loop(self.service.find_session, runtime_id)
        if session is None:
            return self.server_user
        return session.owner if session.owner is not None else session.sender_id

    # ---- checkpoints ---------------------------------------------------------------------

    async def checkpoint(self, checkpoint_id: str, user: str) -> RuntimeCheckpoint:
        """The checkpoint when its runtime is `user`'s, else CheckpointNotFound, word for
        word as for an id that does not exist."""
        return await off_loop(self._checkpoint, checkpoint_id, user)

    def _checkpoint(self, checkpoint_id: str, user: str) -> RuntimeCheckpoint:
        found = self.service.store.get_checkpoint(checkpoint_id)
        if found is None or not _RuntimeFilter(self.service, user)(found.runtime_id):
            raise CheckpointNotFound(f"no checkpoint with id {checkpoint_id!r}")
        return found

    async def resolve(self, reference: str, runtime_id: str | None, user: str) -> RuntimeCheckpoint:
        """A checkpoint of `user`'s by id, unique id prefix or name (in `runtime_id`, which
        must be `user`'s): the checkpoints of others match nothing and are never named."""
        return await off_loop(self._resolve, reference, runtime_id, user)

    def _resolve(self, reference: str, runtime_id: str | None, user: str) -> RuntimeCheckpoint:
        if runtime_id is not None:
            self._runtime(runtime_id, user)
        return self.service.resolve_checkpoint(
            reference, runtime_id, visible=_RuntimeFilter(self.service, user)
        )


class _RuntimeFilter:
    """`filter(runtime_id)`: whether that runtime is `user`'s (each read once; called on
    a store thread, inside a lookup)."""

    def __init__(self, service: RuntimeService, user: str) -> None:
        self.service = service
        self.user = user
        self.seen: dict[str, bool] = {}

    def __call__(self, runtime_id: str) -> bool:
        if runtime_id not in self.seen:
            session = self.service.find_session(runtime_id)
            self.seen[runtime_id] = session is not None and session.belongs_to(self.user)
        return self.seen[runtime_id]

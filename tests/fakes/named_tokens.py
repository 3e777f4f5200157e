"""A test double of an identity provider that names users, as JupyterHub's does.

`NamedTokensIdentityProvider.users` maps each of a few tokens to a user name: a request
bearing one is that user (`Authorization: token ...` or `Bearer ...`). So one Jupyter
server can be reached by two users, as a hub user's server is by an admin or a user it
is shared with, without a hub.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User
from traitlets import Dict, Unicode


class NamedTokensIdentityProvider(IdentityProvider):  # type: ignore[misc]
    """Each token of `users` authenticates its own named user; nothing else does."""

    users = Dict(Unicode(), help="token -> user name").tag(config=True)

    def get_user(self, handler: Any) -> User | None:
        scheme, _, token = handler.request.headers.get("Authorization", "").partition(" ")
        name = self.users.get(token.strip()) if scheme.lower() in ("token", "bearer") else None
        if name is None:
            return None
        handler._token_authenticated = True  # as jupyter-server's own token check says
        return User(username=name, name=name, display_name=name)

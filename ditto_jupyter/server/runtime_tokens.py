"""Runtime tokens: proof that a `self/...` request comes from the runtime's own kernel.

The server token lets any client call any route, and a `self/...` body names the runtime
it speaks for. Those routes skip the idle check (the kernel asking is busy running the
magic) and record what the kernel did itself, so the claim needs proof: every kernel the
server starts for a runtime gets `DITTO_RUNTIME_TOKEN`, an HMAC of its runtime id under a
key this server process draws at start, next to `DITTO_RUNTIME_ID`. A `self/...` request
whose `runtime_token` is not its runtime's is refused. Kernels live no longer than the
server that started them, so the key is never stored. Code running in a kernel can read
other processes of the same user (their environment included), as any Jupyter kernel
can: the token guards against forged and mistaken requests, not against the user's code.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from ditto_jupyter.core.environment import RUNTIME_TOKEN_ENV, runtime_identity_env
from ditto_jupyter.core.errors import InvalidRequest


class RuntimeTokens:
    """Issues and checks the per-runtime tokens of one server process."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def token(self, runtime_id: str) -> str:
        """The token of one runtime (hex)."""
        return hmac.new(self._key, runtime_id.encode(), hashlib.sha256).hexdigest()

    def kernel_env(self, runtime_id: str) -> dict[str, str]:
        """What a kernel of `runtime_id` gets in its environment to call `self/...` routes."""
        return runtime_identity_env(runtime_id, self.token(runtime_id))

    def check(self, runtime_id: str, runtime_token: str) -> None:
        """InvalidRequest unless `runtime_token` is the token of `runtime_id`."""
        expected = self.token(runtime_id).encode()
        if not hmac.compare_digest(expected, runtime_token.encode("utf-8", "replace")):
            raise InvalidRequest(
                f"runtime_token is not runtime {runtime_id}'s: self/ routes are for a "
                f"runtime's own kernel, which has its token in {RUNTIME_TOKEN_ENV}"
            )

"""A fan-out seen as one exploration (issue 44 §3), for the REST routes: compare 2 to 8
points in time side by side, and *keep this branch*.

- `compare`: each side's runtime must be the user's (else RuntimeNotFound, as for an id
  that does not exist) and its checkpoint reference is resolved among the user's own; a
  live side's notebook is its saved file. The comparison itself is RuntimeService's.
- `keep`: closes every other child of the kept runtime's fan-out that is still live or
  paused, the way close does (a final checkpoint of a live one; checkpoints stay, nothing
  is deleted), each with its close event; each sibling closes or fails on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ditto_jupyter.control.diff.comparisons import LiveNotebook
from ditto_jupyter.control.diff.side_by_side import check_side_count
from ditto_jupyter.core.errors import DittoError, InvalidRequest
from ditto_jupyter.core.models import (
    LIVE,
    CompareSideRequest,
    KeepFailure,
    RuntimeCompareResult,
    RuntimeKeepResult,
    SessionLifecycleStatus,
)

if TYPE_CHECKING:
    from ditto_jupyter.server.sessions import RuntimeSessions

_log = logging.getLogger(__name__)

_LIVE = (SessionLifecycleStatus.IDLE, SessionLifecycleStatus.BUSY)
#: The statuses of a sibling keep closes.
_OPEN = (SessionLifecycleStatus.IDLE, SessionLifecycleStatus.BUSY, SessionLifecycleStatus.PAUSED)


class SessionBranches:
    """Compare of N and keep-this-branch over the session mapping."""

    def __init__(self, sessions: RuntimeSessions) -> None:
        self.sessions = sessions

    async def compare(self, sides: Sequence[CompareSideRequest], user: str) -> RuntimeCompareResult:
        """The sides side by side, each the user's runtime at `at` (see the module)."""
        check_side_count(len(sides))
        sessions = self.sessions
        resolved: list[tuple[str, str | None]] = []
        notebooks: dict[str, LiveNotebook] = {}
        for side in sides:
            await sessions.ensure_runtime(side.runtime_id, user)
            at = side.at
            if at is not None and at != LIVE:
                at = sessions.scope.resolve(at, side.runtime_id, user).checkpoint_id
            resolved.append((side.runtime_id, at))
            session = sessions.service.find_session(side.runtime_id)
            live = at == LIVE or (at is None and session is not None and session.status in _LIVE)
            if live and session is not None and side.runtime_id not in notebooks:
                saved = await sessions.documents.saved_document(session.conversation_id)
                if saved is not None:
                    notebooks[side.runtime_id] = LiveNotebook(saved, "saved notebook")
        return await sessions.service.compare(resolved, notebooks)

    async def keep(self, runtime_id: str, user: str) -> RuntimeKeepResult:
        """Keep this child of a fan-out; close its siblings that are still open."""
        sessions = self.sessions
        kept = sessions.scope.runtime(runtime_id, user)
        if kept.fanout is None:
            raise InvalidRequest(f"runtime {runtime_id} is not a child of a fan-out (count 2+)")
        siblings = [
            sibling
            for sibling in sessions.service.store.fanout_members(kept.fanout.id)
            if sibling.session_id != runtime_id
            and sibling.belongs_to(user)
            and sibling.status in _OPEN
        ]
        closed: list[str] = []
        failed: list[KeepFailure] = []
        for sibling in sorted(siblings, key=lambda s: s.fanout.index if s.fanout else 0):
            try:
                await sessions.close(sibling.session_id, user)
            except DittoError as error:
                _log.warning(
                    "ditto: keep %s: sibling %s not closed: %s",
                    runtime_id,
                    sibling.session_id,
                    error,
                )
                failed.append(
                    KeepFailure(runtime_id=sibling.session_id, error=error.code, message=str(error))
                )
            else:
                closed.append(sibling.session_id)
        return RuntimeKeepResult(kept=runtime_id, closed=closed, failed=failed)

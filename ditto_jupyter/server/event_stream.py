"""`/api/events/subscribe`, with each runtime event sent only to its runtime's owner.

jupyter-server's own handler sends every event to every subscriber. On a server that
another hub user can reach (an admin, `access:servers`), that would show them the owner's
runtime and checkpoint ids. This handler takes its place (an extension's handlers are
matched before the server's own): a runtime event reaches a subscriber only when its
runtime is the subscriber's (`UserScope.owner_of`: a runtime the store does not know is
the server user's), so another user's stream carries none of them, as every route
answers another user's ids as ids that do not exist (`user_scope`). Other events (the
server's own: contents, kernels) pass as jupyter-server sends them.

Who the subscriber is comes from the identity provider, as for every route
(`user_scope.request_user`). Events go out in the order they were emitted: each socket
has one queue, and a runtime's owner is read from the store off the event loop, once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from jupyter_server.services.events.handlers import SubscribeWebsocket
from tornado import websocket

from ditto_jupyter.server.events import RUNTIME_EVENT_SCHEMA_ID
from ditto_jupyter.server.user_scope import request_user

if TYPE_CHECKING:
    from jupyter_events import EventLogger

    from ditto_jupyter.server.user_scope import UserScope

_log = logging.getLogger(__name__)

#: The route jupyter-server serves its event stream on.
SUBSCRIBE_ROUTE = r"/api/events/subscribe"
#: Runtime owners one socket remembers (owners never change); beyond it, it starts over.
_OWNERS_KEPT = 4096


class UserEventStream(SubscribeWebsocket):
    """jupyter-server's event WebSocket, each runtime event for its owner only."""

    def open(self) -> None:
        sessions = self.settings.get("ditto_runtime_sessions")
        self._scope: UserScope | None = sessions.scope if sessions is not None else None
        owner = self._scope.server_user if self._scope is not None else ""
        self._user = request_user(self.identity_provider, self.current_user, owner)
        self._owners: dict[str, str] = {}
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()
        self._sender = asyncio.ensure_future(self._send_in_order())
        super().open()

    def on_close(self) -> None:
        super().on_close()  # type: ignore[no-untyped-call]
        queue = getattr(self, "_queue", None)  # None: closed before it opened
        if queue is not None:
            queue.put_nowait(None)

    async def event_listener(
        self, logger: EventLogger, schema_id: str, data: dict[str, Any]
    ) -> None:
        """Queue the event (sent by `_send_in_order`, in the order of emission)."""
        self._queue.put_nowait((schema_id, data))

    async def _send_in_order(self) -> None:
        while (item := await self._queue.get()) is not None:
            schema_id, data = item
            try:
                if schema_id == RUNTIME_EVENT_SCHEMA_ID and not await self._visible(data):
                    continue
                self.write_message(json.dumps(dict(schema_id=schema_id, **data)))
            except websocket.WebSocketClosedError:
                self.event_logger.remove_listener(listener=self.event_listener)
                return
            except Exception:  # one event's failure must not end the stream
                _log.exception("ditto: cannot send event %s to a subscriber", schema_id)

    async def _visible(self, data: dict[str, Any]) -> bool:
        """Whether the subscriber owns the event's runtime (nobody does without ditto)."""
        scope = self._scope
        runtime_id = data.get("runtime_id")
        if scope is None or not isinstance(runtime_id, str):
            return False
        owner = self._owners.get(runtime_id)
        if owner is None:
            owner = await scope.owner_of(runtime_id)
            if len(self._owners) >= _OWNERS_KEPT:
                self._owners.clear()
            self._owners[runtime_id] = owner
        return owner == self._user

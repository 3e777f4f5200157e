"""`/api/events/subscribe` carries a user's runtime events to that user only (issue 40 §7).

A real Jupyter server process whose identity provider names two users (a test double of
JupyterHub's: Alice's server, which Bob, an admin, can reach too), a real SQLite store and
real kernels, subscribed to over real WebSockets. Alice's stream carries her runtime's
events; Bob's carries none of them (no runtime or checkpoint id of hers), while the
server's own events (a file Bob deletes) still reach him, in order.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websocket

from ditto_jupyter.server.events import RUNTIME_EVENT_SCHEMA_ID
from tests.server.live_server import LiveServer

pytestmark = pytest.mark.slow  # a jupyter server process and a kernel

ALICE = secrets.token_hex(16)
BOB = secrets.token_hex(16)

#: A hang guard only: how long one WebSocket read may wait.
READ_TIMEOUT_S = 120.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    config = {
        "ServerApp": {
            "identity_provider_class": "tests.fakes.named_tokens.NamedTokensIdentityProvider"
        },
        "NamedTokensIdentityProvider": {"users": {ALICE: "alice", BOB: "bob"}},
        "DittoJupyterApp": {"kernel_pool_size": 0, "document_wait_seconds": 0.0},
    }
    with LiveServer(
        tmp_path / "alice", token=ALICE, config=config, environment={"JUPYTERHUB_USER": "alice"}
    ) as live:
        yield live


def subscribe(server: LiveServer, token: str) -> websocket.WebSocket:
    url = "ws" + server.url.removeprefix("http") + "api/events/subscribe"
    return websocket.create_connection(
        url, header=[f"Authorization: Bearer {token}"], timeout=READ_TIMEOUT_S
    )


def read_until(socket: websocket.WebSocket, wanted: Any) -> list[str]:
    """Every message up to and including the first one `wanted(event)` accepts."""
    seen: list[str] = []
    while True:
        text = socket.recv()
        seen.append(text)
        if wanted(json.loads(text)):
            return seen


def test_a_users_event_stream_carries_only_their_runtimes(server: LiveServer) -> None:
    alices, bobs = subscribe(server, ALICE), subscribe(server, BOB)
    try:
        notebook = server.open_notebook("private.ipynb")
        rid = notebook["id"]
        status, taken = server.api("POST", "checkpoint", {"runtime_id": rid, "name": "mine"})
        assert status == 200, taken
        cid = taken["checkpoint_id"]
        mine = read_until(
            alices,
            lambda e: e["schema_id"] == RUNTIME_EVENT_SCHEMA_ID and e["checkpoint_id"] == cid,
        )
        assert any(rid in text for text in mine)

        # Bob's own doing after hers: what his stream carried before it is all he got.
        barrier = "api/contents/bob-was-here.txt"
        file = {"type": "file", "format": "text", "content": "hi"}
        assert server.request("PUT", barrier, file, token=BOB).status_code in (200, 201)
        assert server.request("DELETE", barrier, token=BOB).status_code == 204
        his = read_until(
            bobs, lambda e: e.get("action") == "delete" and e.get("path") == "bob-was-here.txt"
        )
        assert not [text for text in his if rid in text or cid in text], his
        assert not [t for t in his if json.loads(t)["schema_id"] == RUNTIME_EVENT_SCHEMA_ID]
    finally:
        alices.close()
        bobs.close()

"""Runtime events: every operation emits one event of the registered schema.

Subscribed both ways a client can: an event-logger listener in the server process, and the
`/api/events/subscribe` websocket the JupyterLab side panel uses. The runtimes are real
notebook sessions with real kernels (`open_runtime` of conftest.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ditto_jupyter.server.events import RUNTIME_EVENT_SCHEMA_ID
from tests.server.conftest import OpenRuntime

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def test_every_operation_emits_one_event(
    api: Api, open_runtime: OpenRuntime, jp_serverapp: Any
) -> None:
    assert RUNTIME_EVENT_SCHEMA_ID in jp_serverapp.event_logger.schemas.schema_ids
    events: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        events.append(data)

    r1 = (await open_runtime("nb.ipynb")).runtime_id  # registered before the listener
    jp_serverapp.event_logger.add_listener(schema_id=RUNTIME_EVENT_SCHEMA_ID, listener=listener)

    _, cp = await api("POST", "checkpoint", {"runtime_id": r1, "name": "a"})
    _, child = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    await api("POST", "restore", {"runtime_id": r1, "checkpoint_id": "a"})
    _, paused = await api("POST", "pause", {"runtime_id": r1})
    await api("POST", "resume", {"runtime_id": r1})
    await api("POST", "checkpoint/delete-snapshot", {"checkpoint_id": cp["checkpoint_id"]})
    await api("POST", "close", {"runtime_id": r1})
    status, refused = await api("POST", "checkpoint", {"runtime_id": r1})
    assert status == 409
    await jp_serverapp.event_logger.gather_listeners()

    assert [e["action"] for e in events] == [
        "checkpoint",
        "checkout",
        "restore",
        "pause",
        "resume",
        "delete-snapshot",
        "close",
        "checkpoint",
    ]
    by_action = {e["action"]: e for e in events[:-1]}
    assert by_action["checkpoint"]["checkpoint_id"] == cp["checkpoint_id"]
    assert by_action["checkpoint"]["status"] == "idle" and by_action["checkpoint"]["ok"] is True
    assert by_action["checkout"]["runtime_id"] == child["runtime"]["runtime_id"]
    assert by_action["checkout"]["source_runtime_id"] == r1
    assert by_action["pause"]["status"] == "paused"
    assert by_action["pause"]["checkpoint_id"] == paused["checkpoint_id"]
    assert by_action["close"]["status"] == "closed"
    assert all(e["duration_ms"] >= 0 for e in events)
    failed = events[-1]
    assert failed["ok"] is False and failed["error"] == refused["error"] == "RuntimeClosed"


async def test_side_panel_websocket_receives_runtime_events(
    api: Api, open_runtime: OpenRuntime, jp_ws_fetch: Any
) -> None:
    r1 = (await open_runtime("nb.ipynb")).runtime_id
    ws = await jp_ws_fetch("api", "events", "subscribe")
    try:
        status, cp = await api("POST", "checkpoint", {"runtime_id": r1})
        assert status == 200
        for _ in range(20):
            message = json.loads(await ws.read_message())
            if message.get("schema_id") == RUNTIME_EVENT_SCHEMA_ID:
                break
        else:
            pytest.fail("no runtime event on /api/events/subscribe")
        assert message["action"] == "checkpoint"
        assert message["runtime_id"] == r1
        assert message["checkpoint_id"] == cp["checkpoint_id"]
        assert message["ok"] is True
    finally:
        ws.close()

"""REST API of the ditto_jupyter server extension: every route's success path, validation.

These tests run a real Jupyter server (pytest-jupyter) with the extension loaded, a real
SQLite store and real kernels: a runtime is a Jupyter session opened on a notebook
(`open_runtime` of conftest.py). pytest-jupyter gives every test its own server, so a kernel
cannot outlive its test; tests that need no runtime (body validation) start none, the others
one per runtime they use, and kernels start without the magics (REST needs none of them).
The error matrix is in test_server_errors.py, auth in test_server_auth.py, the whole
notebook life cycle (session rows, notebook copies, the magics' self routes) in
test_server_kernels.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.core.models import CheckpointListQuery
from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.handlers import parse_query
from ditto_jupyter.server.routes import API_PREFIX, ROUTES
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run, user_variables

Api = Any  # the `api` fixture of conftest.py

#: The routes that take a JSON body, relative to /api/v1/runtimes/.
POST_ROUTES = [spec.path.removeprefix(f"{API_PREFIX}/") for spec in ROUTES if spec.request]
#: POST routes whose body has no required field (`keep`): `{}` is a good body for them.
EMPTY_BODY_ROUTES = {
    spec.path.removeprefix(f"{API_PREFIX}/")
    for spec in ROUTES
    if spec.request and not any(f.is_required() for f in spec.request.model_fields.values())
}


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


# ---- success paths ----------------------------------------------------------------------


async def test_every_route_success_path(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    r1 = await open_runtime(x=1)
    rid = r1.runtime_id

    status, listing = await api("GET")
    assert status == 200
    assert [r["runtime_id"] for r in listing["runtimes"]] == [rid]
    assert set(listing["runtimes"][0]) == {
        "runtime_id",
        "conversation_id",
        "sender_id",
        "status",
        "created_at_ms",
        "updated_at_ms",
        "fanout",
    }
    assert listing["runtimes"][0]["fanout"] is None  # made by no fan-out

    status, record = await api("GET", rid)
    assert (status, record["status"], record["conversation_id"]) == (
        200,
        "idle",
        "notebooks/work.ipynb",
    )

    status, first = await api(
        "POST", "checkpoint", {"runtime_id": rid, "name": "one", "metadata": {"owner": "ana"}}
    )
    assert status == 200, first
    assert first["previous_checkpoint_id"] is None
    assert first["runtime"]["runtime_id"] == rid

    await run(ditto_app, r1.kernel_id, "x = 2")
    status, second = await api("POST", "checkpoint", {"runtime_id": rid})
    assert status == 200
    assert second["previous_checkpoint_id"] == first["checkpoint_id"]

    status, checkpoints = await api("GET", f"{rid}/checkpoints")
    assert status == 200
    rows = checkpoints["checkpoints"]
    assert [c["checkpoint_id"] for c in rows] == [first["checkpoint_id"], second["checkpoint_id"]]
    assert rows[0]["name"] == "one" and rows[0]["metadata"] == {"owner": "ana"}
    assert rows[1]["parent_checkpoint_id"] == first["checkpoint_id"]

    status, detail = await api("GET", f"{rid}/checkpoints/one")
    assert status == 200
    assert detail["checkpoint"]["checkpoint_id"] == first["checkpoint_id"]
    assert detail["context_manifest_id"]

    status, restored = await api(
        "POST", "restore", {"runtime_id": rid, "checkpoint_id": first["checkpoint_id"][:8]}
    )
    assert status == 200, restored
    assert restored["checkpoint_id"] == first["checkpoint_id"]
    assert await user_variables(ditto_app, r1.kernel_id) == {"x": 1}

    status, child = await api(
        "POST",
        "checkout",
        {"checkpoint_id": second["checkpoint_id"], "sender_id": "bo", "metadata": {"k": "v"}},
    )
    assert status == 200, child
    child_id = child["runtime"]["runtime_id"]
    assert child_id.startswith(f"{rid}-") and child["source_runtime_id"] == rid
    assert child["runtime"]["sender_id"] == "bo"
    assert await user_variables(ditto_app, child["kernel_id"]) == {"x": 2}
    assert await user_variables(ditto_app, r1.kernel_id) == {"x": 1}  # the source never changes

    status, ran = await api("POST", "exec", {"runtime_id": rid, "command": "echo hi; exit 3"})
    assert status == 200, ran
    assert (ran["exit_code"], ran["stdout"], ran["timed_out"]) == (3, "hi\n", False)

    status, paused = await api("POST", "pause", {"runtime_id": rid, "name": "lunch"})
    assert status == 200, paused
    assert paused["runtime"]["status"] == "paused"

    status, resumed = await api("POST", "resume", {"runtime_id": rid})
    assert status == 200, resumed
    assert resumed["runtime"]["runtime_id"] == rid and resumed["runtime"]["status"] == "idle"
    assert resumed["checkpoint_id"] == paused["checkpoint_id"]
    assert await user_variables(ditto_app, resumed["kernel_id"]) == {"x": 1}

    status, deleted = await api(
        "POST", "checkpoint/delete-snapshot", {"checkpoint_id": first["checkpoint_id"]}
    )
    assert status == 200, deleted
    assert deleted == {
        "checkpoint_id": first["checkpoint_id"],
        "deleted": True,
        "already_deleted": False,
    }
    status, again = await api(
        "POST", "checkpoint/delete-snapshot", {"checkpoint_id": first["checkpoint_id"]}
    )
    assert (status, again["deleted"], again["already_deleted"]) == (200, False, True)

    status, closed = await api("POST", "close", {"runtime_id": child_id})
    assert status == 200, closed
    assert closed["runtime"]["status"] == "closed"
    assert closed["backend_released"] is True

    status, doc = await api("GET", "openapi.json")
    assert status == 200
    assert doc["openapi"].startswith("3.")
    for path in (
        "/api/v1/runtimes/checkpoint",
        "/api/v1/runtimes/checkpoint/delete-snapshot",
        "/api/v1/runtimes/checkout",
        "/api/v1/runtimes/pause",
        "/api/v1/runtimes/resume",
        "/api/v1/runtimes/close",
        "/api/v1/runtimes",
        "/api/v1/runtimes/{runtime_id}",
        "/api/v1/runtimes/{runtime_id}/checkpoints",
        "/api/v1/runtimes/checkpoints/{reference}",
    ):
        assert path in doc["paths"], path


async def test_a_checkpoint_of_any_runtime_by_id_prefix_or_name(
    api: Api, open_runtime: OpenRuntime
) -> None:
    """GET /api/v1/runtimes/checkpoints/{reference}: no runtime id needed."""
    first = await open_runtime("a.ipynb", x=1)
    second = await open_runtime("b.ipynb", y=2)
    _, named = await api("POST", "checkpoint", {"runtime_id": first.runtime_id, "name": "base"})
    ids = [named["checkpoint_id"]]
    while len({i[0] for i in ids}) == len(ids):  # until two ids share a first digit (<= 17)
        _, made = await api("POST", "checkpoint", {"runtime_id": second.runtime_id})
        ids.append(made["checkpoint_id"])
    other = ids[-1]

    status, by_name = await api("GET", "checkpoints/base")
    assert status == 200, by_name
    assert by_name["checkpoint"]["checkpoint_id"] == named["checkpoint_id"]
    assert by_name["checkpoint"]["runtime_id"] == first.runtime_id
    _, scoped = await api("GET", f"{first.runtime_id}/checkpoints/base")
    assert by_name == scoped  # the same answer as the route within a runtime

    for reference in (other, other[:12]):
        status, found = await api("GET", f"checkpoints/{reference}")
        assert status == 200, (reference, found)
        assert found["checkpoint"]["checkpoint_id"] == other
        assert found["checkpoint"]["runtime_id"] == second.runtime_id
        assert found["context_manifest_id"]

    status, answer = await api("GET", f"checkpoints/{other[0]}")
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert "matches" in answer["message"]
    status, answer = await api("GET", "checkpoints/no-such-checkpoint")
    assert (status, answer["error"]) == (404, "CheckpointNotFound"), answer


async def test_a_runtimes_checkpoints_page_by_page(api: Api, open_runtime: OpenRuntime) -> None:
    runtime = await open_runtime("paged.ipynb", x=1)
    rid = runtime.runtime_id
    ids = []
    for _ in range(5):
        status, made = await api("POST", "checkpoint", {"runtime_id": rid})
        assert status == 200, made
        ids.append(made["checkpoint_id"])
    status, everything = await api("GET", f"{rid}/checkpoints")
    assert status == 200 and everything["next_cursor"] is None
    assert [c["checkpoint_id"] for c in everything["checkpoints"]] == ids
    seen: list[str] = []
    query: dict[str, Any] = {"limit": "2"}
    while True:
        status, page = await api("GET", f"{rid}/checkpoints", query=query)
        assert status == 200, page
        seen += [c["checkpoint_id"] for c in page["checkpoints"]]
        if page["next_cursor"] is None:
            break
        query["cursor"] = page["next_cursor"]
    assert seen == ids
    status, newest = await api("GET", f"{rid}/checkpoints/", query={"limit": 1, "order": "newest"})
    assert status == 200 and [c["checkpoint_id"] for c in newest["checkpoints"]] == ids[-1:]
    assert newest["next_cursor"] == ids[-1]
    for bad, expected in [
        ({"limit": "0"}, "query parameter 'limit': Input should be greater than or equal to 1"),
        ({"limit": "1001"}, "query parameter 'limit': Input should be less than or equal"),
        ({"limit": "many"}, "query parameter 'limit': Input should be a valid integer"),
        ({"order": "random"}, "query parameter 'order': Input should be 'oldest' or 'newest'"),
        ({"cursor": "nope", "limit": "2"}, "cursor 'nope' is not a checkpoint of runtime"),
        ({"shell": "rm"}, "unknown query parameter 'shell'"),
    ]:
        status, answer = await api("GET", f"{rid}/checkpoints", query=bad)
        assert (status, answer["error"]) == (400, "InvalidRequest"), (bad, answer)
        assert answer["message"].startswith(expected), (bad, answer)


def test_query_parameters_are_validated_like_bodies() -> None:
    given = {"limit": [b"5"], "order": [b"newest"], "token": [b"secret"], "_xsrf": [b"x"]}
    assert parse_query(given, CheckpointListQuery) == CheckpointListQuery(limit=5, order="newest")
    busted = {**given, "1796647483540": [b""]}  # JupyterLab's cache-buster: `&1796647483540`
    assert parse_query(busted, CheckpointListQuery) == CheckpointListQuery(limit=5, order="newest")
    for arguments, expected in [
        ({"1796647483540": [b"1"]}, "unknown query parameter '1796647483540'"),
        ({"1796647483540": [b"", b""]}, "query parameter '1796647483540' is given 2 times"),
        ({"12": [b""], "13": [b""]}, "unknown query parameter"),
        ({"": [b""]}, "unknown query parameter ''"),
        ({"limit": [b"1", b"2"]}, "query parameter 'limit' is given 2 times"),
        ({"cursor": [b"\xff"]}, "query parameter 'cursor' is not valid UTF-8"),
        ({"cursor": [b""]}, "query parameter 'cursor': String should have at least 1 character"),
    ]:
        with pytest.raises(InvalidRequest, match=expected):
            parse_query(arguments, CheckpointListQuery)


async def test_jupyterlabs_cache_buster_is_accepted_on_the_checkpoint_listing(
    open_runtime: OpenRuntime, http_server_client: Any, jp_auth_header: Any, jp_base_url: str
) -> None:
    """JupyterLab's ServerConnection appends a bare timestamp to every GET (`cache:
    'no-store'`): `?limit=200&1796647483540`. The side panel's listing sends exactly that;
    a named parameter the route does not know is still refused."""
    runtime = await open_runtime("busted.ipynb", x=1)
    rid = runtime.runtime_id
    made = []
    for name in ("one", "two"):
        body = json.dumps({"runtime_id": rid, "name": name})
        response = await http_server_client.fetch(
            f"{jp_base_url}api/v1/runtimes/checkpoint",
            method="POST",
            body=body,
            headers=jp_auth_header,
            raise_error=False,
        )
        assert response.code == 200, response.body
        made.append(json.loads(response.body)["checkpoint_id"])

    async def get(query: str) -> tuple[int, Any]:
        response = await http_server_client.fetch(
            f"{jp_base_url}api/v1/runtimes/{rid}/checkpoints?{query}",
            headers=jp_auth_header,
            raise_error=False,
        )
        return response.code, json.loads(response.body)

    for query in ("limit=200&1796647483540", "1796647483540", "1796647483540&limit=200"):
        status, listing = await get(query)
        assert status == 200, (query, listing)
        assert [c["checkpoint_id"] for c in listing["checkpoints"]] == made, query
    for query, expected in [
        ("limit=200&shell", "unknown query parameter 'shell'"),
        ("limit=200&1796647483540=rm", "unknown query parameter '1796647483540'"),
        ("1796647483540&1796647483541", "unknown query parameter"),
    ]:
        status, answer = await get(query)
        assert (status, answer["error"]) == (400, "InvalidRequest"), (query, answer)
        assert answer["message"].startswith(expected), (query, answer)


async def test_a_name_two_runtimes_share_is_ambiguous_across_runtimes(
    api: Api, open_runtime: OpenRuntime
) -> None:
    first = await open_runtime("one.ipynb", x=1)
    second = await open_runtime("two.ipynb", y=2)
    made = {}
    for runtime in (first, second):
        body = {"runtime_id": runtime.runtime_id, "name": "analysis"}
        status, made[runtime.runtime_id] = await api("POST", "checkpoint", body)
        assert status == 200
    status, answer = await api("GET", "checkpoints/analysis")
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert first.runtime_id in answer["message"] and second.runtime_id in answer["message"]
    for runtime in (first, second):
        status, found = await api("GET", f"{runtime.runtime_id}/checkpoints/analysis")
        assert status == 200
        assert found["checkpoint"]["checkpoint_id"] == made[runtime.runtime_id]["checkpoint_id"]


# ---- validation -------------------------------------------------------------------------

BAD_BODIES: list[tuple[bytes, str]] = [
    (b"", "empty"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'"r1"', "must be a JSON object"),
    (b"null", "must be a JSON object"),
    (b"{}", "'runtime_id' is required"),
    (b'{"runtime_id": 7}', "'runtime_id'"),
    (b'{"runtime_id": "r1", "name": ["x"]}', "'name'"),
    (b'{"runtime_id": "r1", "metadata": "x"}', "'metadata'"),
    (b'{"runtime_id": "r1", "shell": "rm -rf /"}', "unknown field 'shell'"),
    (b'{"runtime_id": "r1", "metadata": {"x": NaN}}', "not valid JSON"),
    (b'{"runtime_id": "\\ud800"}', "not valid Unicode"),
    (b"\xff\xfe{}", "not valid JSON"),
]


class ServiceSpy:
    """Counts every call into the RuntimeService's operations."""

    OPERATIONS = (
        "create_runtime",
        "checkpoint",
        "checkout",
        "restore",
        "record_restore",
        "pause",
        "resume",
        "close",
        "delete_snapshot",
        "prune_automatic",
        "get_checkpoint",
        "resolve_checkpoint",
        "exec",
        "record_document",
        "diff",
        "compare",
        "undo",
        "undo_plan",
        "record_undo",
    )

    def __init__(self, app: DittoJupyterApp, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for name in self.OPERATIONS:
            original = getattr(app.service, name)

            def spy(*args: Any, _name: str = name, _original: Any = original, **kw: Any) -> Any:
                self.calls.append(_name)
                return _original(*args, **kw)

            monkeypatch.setattr(app.service, name, spy)


@pytest.mark.parametrize(("raw", "expected"), BAD_BODIES, ids=[e for _, e in BAD_BODIES])
async def test_bad_bodies_are_400_naming_the_problem(api: Api, raw: bytes, expected: str) -> None:
    status, body = await api("POST", "checkpoint", raw=raw)
    assert status == 400
    assert body["error"] == "InvalidRequest"
    assert expected in body["message"]
    assert "\n" not in body["message"]


async def test_bad_input_never_reaches_the_service(
    api: Api,
    ditto_app: DittoJupyterApp,
    open_runtime: OpenRuntime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r1 = await open_runtime(x=1)
    spy = ServiceSpy(ditto_app, monkeypatch)
    # issue 23: document, diff, undo; issue 44: 8 langgraph, compare, keep
    assert len(POST_ROUTES) == 28
    assert {"{runtime_id}/keep"} == EMPTY_BODY_ROUTES
    for route in POST_ROUTES:
        for raw, _ in BAD_BODIES:
            if raw == b"{}" and route in EMPTY_BODY_ROUTES:
                continue
            status, body = await api("POST", route, raw=raw)
            assert status == 400, (route, raw, body)
            assert body["error"] == "InvalidRequest"
        status, body = await api("POST", route, raw=b'{"unexpected": true}')
        assert status == 400 and body["error"] == "InvalidRequest"
    assert spy.calls == []
    status, rows = await api("GET", f"{r1.runtime_id}/checkpoints")
    assert rows["checkpoints"] == []


async def test_unexpected_service_error_is_a_one_line_500(
    api: Api,
    ditto_app: DittoJupyterApp,
    open_runtime: OpenRuntime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r1 = await open_runtime()

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("store exploded\nwith a second line")

    monkeypatch.setattr(ditto_app.service, "list_checkpoints", broken)
    status, body = await api("GET", f"{r1.runtime_id}/checkpoints")
    assert status == 500
    assert body == {"error": "InternalError", "message": "RuntimeError: store exploded"}

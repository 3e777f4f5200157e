"""REST API of the ditto_jupyter server extension: routes, validation, error codes, auth.

These tests run a real Jupyter server (pytest-jupyter) with the extension loaded and a
real SQLite store; the session context is the control plane's JSON namespace capture
(`context_capture = "memory"`), so runtimes are created through the service and need no
kernel. Kernel-backed behaviour is in test_server_kernels.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from jupyter_server.utils import JupyterServerAuthWarning

from ditto_jupyter.core.errors import ERROR_TYPES
from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.handlers import route_table
from tests.fakes.e2b_cloud import ROUTE_CREATE_SNAPSHOT, FakeE2BCloud
from tests.fakes.e2b_fixtures import fake_e2b  # noqa: F401

Api = Any  # the `api` fixture of conftest.py

pytestmark = pytest.mark.filterwarnings("error::jupyter_server.utils.JupyterServerAuthWarning")


@pytest.fixture
def ditto_context() -> str:
    return "memory"


async def new_runtime(app: DittoJupyterApp, runtime_id: str, **values: Any) -> None:
    """A runtime with a live JSON namespace holding `values`."""
    assert app.service is not None
    await app.service.create_runtime("notebooks/work.ipynb", "ana", runtime_id=runtime_id)
    if values:
        app.service.context.inner.execute(runtime_id, **values)  # type: ignore[attr-defined]


def namespace(app: DittoJupyterApp, runtime_id: str) -> dict[str, Any]:
    assert app.service is not None
    ns: dict[str, Any] = app.service.context.inner.namespace(runtime_id)  # type: ignore[attr-defined]
    return ns


# ---- success paths ----------------------------------------------------------------------


async def test_every_route_success_path(api: Api, ditto_app: DittoJupyterApp) -> None:
    await new_runtime(ditto_app, "r1", x=1)

    status, listing = await api("GET")
    assert status == 200
    assert [r["runtime_id"] for r in listing["runtimes"]] == ["r1"]
    assert set(listing["runtimes"][0]) == {
        "runtime_id",
        "conversation_id",
        "sender_id",
        "status",
        "created_at_ms",
        "updated_at_ms",
    }

    status, record = await api("GET", "r1")
    assert (status, record["status"], record["conversation_id"]) == (
        200,
        "idle",
        "notebooks/work.ipynb",
    )

    status, first = await api(
        "POST", "checkpoint", {"runtime_id": "r1", "name": "one", "metadata": {"owner": "ana"}}
    )
    assert status == 200, first
    assert first["previous_checkpoint_id"] is None
    assert first["runtime"]["runtime_id"] == "r1"

    ditto_app.service.context.inner.execute("r1", x=2)  # type: ignore[union-attr]
    status, second = await api("POST", "checkpoint", {"runtime_id": "r1"})
    assert status == 200
    assert second["previous_checkpoint_id"] == first["checkpoint_id"]

    status, checkpoints = await api("GET", "r1/checkpoints")
    assert status == 200
    rows = checkpoints["checkpoints"]
    assert [c["checkpoint_id"] for c in rows] == [first["checkpoint_id"], second["checkpoint_id"]]
    assert rows[0]["name"] == "one" and rows[0]["metadata"] == {"owner": "ana"}
    assert rows[1]["parent_checkpoint_id"] == first["checkpoint_id"]

    status, detail = await api("GET", "r1/checkpoints/one")
    assert status == 200
    assert detail["checkpoint"]["checkpoint_id"] == first["checkpoint_id"]
    assert detail["context_manifest_id"]

    status, restored = await api(
        "POST", "restore", {"runtime_id": "r1", "checkpoint_id": first["checkpoint_id"][:8]}
    )
    assert status == 200, restored
    assert restored["checkpoint_id"] == first["checkpoint_id"]
    assert namespace(ditto_app, "r1") == {"x": 1}

    status, child = await api(
        "POST",
        "checkout",
        {"checkpoint_id": second["checkpoint_id"], "sender_id": "bo", "metadata": {"k": "v"}},
    )
    assert status == 200, child
    child_id = child["runtime"]["runtime_id"]
    assert child_id.startswith("r1-") and child["source_runtime_id"] == "r1"
    assert child["runtime"]["sender_id"] == "bo"
    assert namespace(ditto_app, child_id) == {"x": 2}
    assert namespace(ditto_app, "r1") == {"x": 1}  # the source never changes

    status, ran = await api("POST", "exec", {"runtime_id": "r1", "command": "echo hi; exit 3"})
    assert status == 200, ran
    assert (ran["exit_code"], ran["stdout"], ran["timed_out"]) == (3, "hi\n", False)

    status, paused = await api("POST", "pause", {"runtime_id": "r1", "name": "lunch"})
    assert status == 200, paused
    assert paused["runtime"]["status"] == "paused"

    status, resumed = await api("POST", "resume", {"runtime_id": "r1"})
    assert status == 200, resumed
    assert resumed["runtime"]["runtime_id"] == "r1" and resumed["runtime"]["status"] == "idle"
    assert resumed["checkpoint_id"] == paused["checkpoint_id"]
    assert namespace(ditto_app, "r1") == {"x": 1}

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
    ):
        assert path in doc["paths"], path


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

POST_ROUTES = [
    "checkpoint",
    "checkpoint/delete-snapshot",
    "checkout",
    "pause",
    "resume",
    "close",
    "restore",
    "self/checkpoint",
    "self/pause",
    "self/restore",
    "self/checkout",
    "exec",
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
        "get_checkpoint",
        "resolve_checkpoint",
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
async def test_bad_bodies_are_400_naming_the_problem(
    api: Api, ditto_app: DittoJupyterApp, raw: bytes, expected: str
) -> None:
    status, body = await api("POST", "checkpoint", raw=raw)
    assert status == 400
    assert body["error"] == "InvalidRequest"
    assert expected in body["message"]
    assert "\n" not in body["message"]


async def test_bad_input_never_reaches_the_service(
    api: Api, ditto_app: DittoJupyterApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    spy = ServiceSpy(ditto_app, monkeypatch)
    for route in POST_ROUTES:
        for raw, _ in BAD_BODIES:
            status, body = await api("POST", route, raw=raw)
            assert status == 400, (route, raw, body)
            assert body["error"] == "InvalidRequest"
        status, body = await api("POST", route, raw=b'{"unexpected": true}')
        assert status == 400 and body["error"] == "InvalidRequest"
    assert spy.calls == []
    status, rows = await api("GET", "r1/checkpoints")
    assert rows["checkpoints"] == []


async def test_unexpected_service_error_is_a_one_line_500(
    api: Api, ditto_app: DittoJupyterApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    await new_runtime(ditto_app, "r1")

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("store exploded\nwith a second line")

    monkeypatch.setattr(ditto_app.service, "list_checkpoints", broken)
    status, body = await api("GET", "r1/checkpoints")
    assert status == 500
    assert body == {"error": "InternalError", "message": "RuntimeError: store exploded"}


# ---- error codes ------------------------------------------------------------------------


async def test_not_found_codes(api: Api, ditto_app: DittoJupyterApp) -> None:
    await new_runtime(ditto_app, "r1")
    for method, route, body in [
        ("GET", "nope", None),
        ("GET", "nope/checkpoints", None),
        ("POST", "checkpoint", {"runtime_id": "nope"}),
        ("POST", "pause", {"runtime_id": "nope"}),
        ("POST", "resume", {"runtime_id": "nope"}),
        ("POST", "close", {"runtime_id": "nope"}),
    ]:
        status, answer = await api(method, route, body)
        assert (status, answer["error"]) == (404, "RuntimeNotFound"), (route, answer)
    for route, body in [
        ("checkout", {"checkpoint_id": "0" * 32}),
        ("checkpoint/delete-snapshot", {"checkpoint_id": "0" * 32}),
        ("restore", {"runtime_id": "r1", "checkpoint_id": "missing"}),
    ]:
        status, answer = await api("POST", route, body)
        assert (status, answer["error"]) == (404, "CheckpointNotFound"), (route, answer)
    status, answer = await api("GET", "r1/checkpoints/missing")
    assert (status, answer["error"]) == (404, "CheckpointNotFound")


async def test_busy_runtime_is_409_and_nothing_changes(
    api: Api, ditto_app: DittoJupyterApp
) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    status, cp = await api("POST", "checkpoint", {"runtime_id": "r1"})
    assert status == 200
    ditto_app.service.context.inner.busy.add("r1")  # type: ignore[union-attr]
    status, record = await api("GET", "r1")
    assert record["status"] == "busy"
    for route, body in [
        ("checkpoint", {"runtime_id": "r1"}),
        ("checkout", {"checkpoint_id": cp["checkpoint_id"]}),
        ("pause", {"runtime_id": "r1"}),
        ("restore", {"runtime_id": "r1", "checkpoint_id": cp["checkpoint_id"]}),
    ]:
        status, answer = await api("POST", route, body)
        assert (status, answer["error"]) == (409, "SessionBusy"), (route, answer)
    _, listing = await api("GET")
    assert [r["runtime_id"] for r in listing["runtimes"]] == ["r1"]
    _, rows = await api("GET", "r1/checkpoints")
    assert len(rows["checkpoints"]) == 1


async def test_state_conflicts_are_409(api: Api, ditto_app: DittoJupyterApp) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    status, answer = await api("POST", "resume", {"runtime_id": "r1"})
    assert (status, answer["error"]) == (409, "RuntimeNotPaused")
    await api("POST", "pause", {"runtime_id": "r1"})
    for route in ("checkpoint", "pause"):
        status, answer = await api("POST", route, {"runtime_id": "r1"})
        assert (status, answer["error"]) == (409, "RuntimePaused"), route
    await api("POST", "close", {"runtime_id": "r1"})
    for route in ("checkpoint", "pause", "resume", "close"):
        status, answer = await api("POST", route, {"runtime_id": "r1"})
        assert (status, answer["error"]) == (409, "RuntimeClosed"), route


async def test_checkout_of_a_deleted_snapshot_is_unsupported(
    api: Api, ditto_app: DittoJupyterApp
) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    _, cp = await api("POST", "checkpoint", {"runtime_id": "r1"})
    await api("POST", "checkpoint/delete-snapshot", {"checkpoint_id": cp["checkpoint_id"]})
    _, before = await api("GET")
    status, answer = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    assert (status, answer["error"]) == (422, "UnsupportedBackend")
    _, after = await api("GET")
    assert after == before


async def test_checkout_copies_the_notebook_and_a_failed_one_leaves_no_copy(
    api: Api, ditto_app: DittoJupyterApp, jp_root_dir: Any
) -> None:
    import nbformat

    (jp_root_dir / "notebooks").mkdir()
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(notebook, str(jp_root_dir / "notebooks" / "work.ipynb"))
    await new_runtime(ditto_app, "r1", x=1)
    _, cp = await api("POST", "checkpoint", {"runtime_id": "r1"})

    status, child = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    assert status == 200, child
    copy = child["notebook_path"]
    assert copy.startswith("notebooks/work-") and copy.endswith(".ipynb")
    assert nbformat.read(str(jp_root_dir / copy), as_version=4).cells[0].source == "x = 1"
    assert child["runtime"]["conversation_id"] == copy

    status, named = await api(
        "POST",
        "checkout",
        {"checkpoint_id": cp["checkpoint_id"], "conversation_id": "notebooks/branch.ipynb"},
    )
    assert status == 200 and named["notebook_path"] == "notebooks/branch.ipynb"
    assert (jp_root_dir / "notebooks" / "branch.ipynb").is_file()

    status, chat = await api(
        "POST", "checkout", {"checkpoint_id": cp["checkpoint_id"], "conversation_id": "chat-42"}
    )
    assert status == 200 and chat["notebook_path"] is None  # not a notebook path: no copy

    before = sorted(p.name for p in (jp_root_dir / "notebooks").iterdir())
    await api("POST", "checkpoint/delete-snapshot", {"checkpoint_id": cp["checkpoint_id"]})
    status, answer = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    assert (status, answer["error"]) == (422, "UnsupportedBackend")
    assert sorted(p.name for p in (jp_root_dir / "notebooks").iterdir()) == before


async def test_lost_context_is_a_backend_error(api: Api, ditto_app: DittoJupyterApp) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    ditto_app.service.context.inner.namespaces.pop("r1")  # type: ignore[union-attr]
    status, answer = await api("POST", "checkpoint", {"runtime_id": "r1"})
    assert (status, answer["error"]) == (502, "BackendError")
    _, rows = await api("GET", "r1/checkpoints")
    assert rows["checkpoints"] == []


@pytest.fixture
def e2b_server_config(jp_server_config: Any, fake_e2b: FakeE2BCloud) -> Any:  # noqa: F811
    jp_server_config["DittoJupyterApp"]["default_backend"] = "e2b"
    return jp_server_config


async def test_provider_refusals_map_to_429_and_502(
    e2b_server_config: Any,
    fake_e2b: FakeE2BCloud,  # noqa: F811
    api: Api,
    ditto_app: DittoJupyterApp,
) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, 429, times=10)
    status, answer = await api("POST", "checkpoint", {"runtime_id": "r1"})
    assert (status, answer["error"]) == (429, "RateLimited"), answer
    while fake_e2b.pending_faults(ROUTE_CREATE_SNAPSHOT):
        fake_e2b.take_fault(ROUTE_CREATE_SNAPSHOT)
    fake_e2b.fail_next(ROUTE_CREATE_SNAPSHOT, 500, times=10)
    status, answer = await api("POST", "checkpoint", {"runtime_id": "r1"})
    assert (status, answer["error"]) == (502, "BackendError"), answer
    while fake_e2b.pending_faults(ROUTE_CREATE_SNAPSHOT):
        fake_e2b.take_fault(ROUTE_CREATE_SNAPSHOT)
    _, rows = await api("GET", "r1/checkpoints")
    assert rows["checkpoints"] == []
    status, answer = await api("POST", "checkpoint", {"runtime_id": "r1"})
    assert status == 200, answer
    status, answer = await api("POST", "close", {"runtime_id": "r1"})
    assert status == 200 and answer["provider_sandbox_deleted"] is True


async def test_every_error_code_of_the_table_is_reachable() -> None:
    """The codes exercised above are exactly the control plane's error types."""
    exercised = {
        "InvalidRequest",
        "RuntimeNotFound",
        "CheckpointNotFound",
        "SessionBusy",
        "RuntimePaused",
        "RuntimeNotPaused",
        "RuntimeClosed",
        "UnsupportedBackend",
        "BackendError",
        "RateLimited",
    }
    assert {error.code for error in ERROR_TYPES} == exercised


# ---- auth ------------------------------------------------------------------------------

ALL_ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "", None),
    ("GET", "r1", None),
    ("GET", "r1/checkpoints", None),
    ("GET", "r1/checkpoints/x", None),
    ("GET", "openapi.json", None),
    *[("POST", route, {"runtime_id": "r1"}) for route in POST_ROUTES],
]


@pytest.mark.parametrize("authorization", [None, "token wrong", "Bearer wrong", "Basic abc"])
async def test_no_or_wrong_token_is_refused_on_every_route(
    api: Api, ditto_app: DittoJupyterApp, authorization: str | None
) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    headers = {"Authorization": authorization or ""}
    for method, route, body in ALL_ROUTES:
        status, answer = await api(method, route, body, headers=headers)
        assert status == 403, (method, route, answer)
        assert answer["error"] == "Forbidden"
    _, rows = await api("GET", "r1/checkpoints")
    assert rows["checkpoints"] == []


async def test_token_and_bearer_both_accepted(
    api: Api, ditto_app: DittoJupyterApp, jp_serverapp: Any
) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    token = jp_serverapp.identity_provider.token
    for scheme in ("token", "Bearer", "bearer"):
        headers = {"Authorization": f"{scheme} {token}"}
        status, answer = await api("POST", "checkpoint", {"runtime_id": "r1"}, headers=headers)
        assert status == 200, (scheme, answer)
        status, _ = await api("GET", "r1/checkpoints", headers=headers)
        assert status == 200


async def test_cookie_requests_need_xsrf(
    jp_fetch: Any, ditto_app: DittoJupyterApp, jp_serverapp: Any
) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    token = jp_serverapp.identity_provider.token
    cookies: list[str] = []
    for params in ({}, {"token": token}):  # the login page sets _xsrf; the token, the user
        page = await jp_fetch(
            "login",
            params=params,
            headers={"Authorization": ""},
            raise_error=False,
            follow_redirects=False,
        )
        cookies += [v.split(";")[0] for k, v in page.headers.get_all() if k == "Set-Cookie"]
    cookie = "; ".join(cookies)
    xsrf = next(c.split("=", 1)[1] for c in cookies if c.startswith("_xsrf="))
    body = json.dumps({"runtime_id": "r1"})
    refused = await jp_fetch(
        "api/v1/runtimes/checkpoint",
        method="POST",
        body=body,
        headers={"Cookie": cookie, "Authorization": ""},
        raise_error=False,
    )
    assert refused.code == 403
    accepted = await jp_fetch(
        "api/v1/runtimes/checkpoint",
        method="POST",
        body=body,
        headers={"Cookie": cookie, "X-XSRFToken": xsrf, "Authorization": ""},
        raise_error=False,
    )
    assert accepted.code == 200, accepted.body
    listing = await jp_fetch("api/v1/runtimes", headers={"Cookie": cookie, "Authorization": ""})
    assert listing.code == 200  # GET needs no XSRF token


async def test_every_route_asks_the_authorizer_about_resource_ditto(
    api: Api, ditto_app: DittoJupyterApp, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await new_runtime(ditto_app, "r1", x=1)
    asked: list[tuple[str, str]] = []

    def deny(handler: Any, user: Any, action: str, resource: str) -> bool:
        asked.append((action, resource))
        return resource != "ditto"

    monkeypatch.setattr(jp_serverapp.authorizer, "is_authorized", deny)
    for method, route, body in ALL_ROUTES:
        asked.clear()
        status, answer = await api(method, route, body)
        assert status == 403 and answer["error"] == "Forbidden", (method, route, answer)
        assert asked == [("read" if method == "GET" else "write", "ditto")], route
    _, rows = await api("GET", "r1/checkpoints")
    assert rows == {"error": "Forbidden", "message": rows["message"]}


async def test_no_handler_would_trigger_the_auth_warning(jp_serverapp: Any) -> None:
    web_app = jp_serverapp.web_app
    for pattern, handler in route_table():
        assert handler.auth_resource == "ditto"
        assert web_app._check_handler_auth(pattern, handler) == [], pattern
    assert web_app._check_handler_auth("/ditto-unprotected", _Unprotected)  # the check works


@pytest.fixture
def strict_auth_config(jp_server_config: Any) -> Any:
    jp_server_config["ServerApp"]["allow_unauthenticated_access"] = False
    return jp_server_config


async def test_server_with_strict_auth_loads_the_extension_without_warning(
    strict_auth_config: Any, api: Api, jp_serverapp: Any
) -> None:
    """With allow_unauthenticated_access=False an undecorated handler warns; ours do not.

    The module's filterwarnings mark turns a JupyterServerAuthWarning into an error, so
    the server start (which registers our handlers) would fail here if one were missing.
    """
    status, _ = await api("GET")
    assert status == 200
    with pytest.warns(JupyterServerAuthWarning):
        jp_serverapp.web_app.add_handlers(".*$", [("/ditto-unprotected", _Unprotected)])


class _Unprotected(__import__("tornado.web").web.RequestHandler):  # type: ignore[misc]
    """A handler without @authenticated, to prove the server's check would see one."""

    def get(self) -> None:
        self.finish("open")


async def test_unknown_route_and_method_answer_in_the_error_shape(api: Api) -> None:
    status, answer = await api("GET", "checkpoint")
    assert (status, answer["error"]) == (405, "MethodNotAllowed")
    status, answer = await api("POST", "r1/checkpoints", {"runtime_id": "r1"})
    assert (status, answer["error"]) == (405, "MethodNotAllowed")

"""Auth and routing of the REST API: tokens, XSRF, the authorizer, unknown routes and methods.

A real Jupyter server (pytest-jupyter) with the extension and real kernels, as in
test_server_api.py. The routes checked are the route table's own (`routes.ROUTES`) plus the
OpenAPI document, so a new route is covered without being listed here.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import tornado.web
from jupyter_server.utils import JupyterServerAuthWarning

from ditto_jupyter.server.app import DittoJupyterApp
from ditto_jupyter.server.handlers import route_table
from ditto_jupyter.server.openapi import openapi_document
from ditto_jupyter.server.routes import API_PREFIX, ROUTES
from tests.server.conftest import OpenRuntime

Api = Any  # the `api` fixture of conftest.py

pytestmark = pytest.mark.filterwarnings("error::jupyter_server.utils.JupyterServerAuthWarning")


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


def all_routes(runtime_id: str) -> list[tuple[str, str, Any]]:
    """(method, route below /api/v1/runtimes, body) of every route, for this runtime."""
    routes: list[tuple[str, str, Any]] = [("GET", "openapi.json", None)]
    for spec in ROUTES:
        route = spec.path.removeprefix(API_PREFIX).strip("/")
        route = route.format(runtime_id=runtime_id, reference="x")
        body = {"runtime_id": runtime_id} if spec.method == "POST" else None
        routes.append((spec.method, route, body))
    return routes


async def test_no_or_wrong_token_is_refused_on_every_route(
    api: Api, open_runtime: OpenRuntime
) -> None:
    rid = (await open_runtime(x=1)).runtime_id  # one kernel for every header below
    for authorization in (None, "token wrong", "Bearer wrong", "Basic abc"):
        headers = {"Authorization": authorization or ""}
        for method, route, body in all_routes(rid):
            status, answer = await api(method, route, body, headers=headers)
            assert status == 403, (authorization, method, route, answer)
            assert answer["error"] == "Forbidden"
    _, rows = await api("GET", f"{rid}/checkpoints")
    assert rows["checkpoints"] == []


async def test_token_and_bearer_both_accepted(
    api: Api, open_runtime: OpenRuntime, jp_serverapp: Any
) -> None:
    rid = (await open_runtime(x=1)).runtime_id
    token = jp_serverapp.identity_provider.token
    for scheme in ("token", "Bearer", "bearer"):
        headers = {"Authorization": f"{scheme} {token}"}
        status, answer = await api("POST", "checkpoint", {"runtime_id": rid}, headers=headers)
        assert status == 200, (scheme, answer)
        status, _ = await api("GET", f"{rid}/checkpoints", headers=headers)
        assert status == 200


async def test_cookie_requests_need_xsrf(
    jp_fetch: Any, open_runtime: OpenRuntime, jp_serverapp: Any
) -> None:
    rid = (await open_runtime(x=1)).runtime_id
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
    body = json.dumps({"runtime_id": rid})
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
    api: Api, open_runtime: OpenRuntime, jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = (await open_runtime(x=1)).runtime_id
    asked: list[tuple[str, str]] = []

    def deny(handler: Any, user: Any, action: str, resource: str) -> bool:
        asked.append((action, resource))
        return resource != "ditto"

    monkeypatch.setattr(jp_serverapp.authorizer, "is_authorized", deny)
    for method, route, body in all_routes(rid):
        asked.clear()
        status, answer = await api(method, route, body)
        assert status == 403 and answer["error"] == "Forbidden", (method, route, answer)
        assert asked == [("read" if method == "GET" else "write", "ditto")], route
    _, rows = await api("GET", f"{rid}/checkpoints")
    assert rows == {"error": "Forbidden", "message": rows["message"]}


async def test_no_handler_would_trigger_the_auth_warning(jp_serverapp: Any) -> None:
    web_app = jp_serverapp.web_app
    table = route_table(openapi_document)
    assert len(table) == len({spec.path for spec in ROUTES}) + 1  # and openapi.json
    for pattern, handler, _ in table:
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


class _Unprotected(tornado.web.RequestHandler):
    """A handler without @authenticated, to prove the server's check would see one."""

    def get(self) -> None:
        self.finish("open")


async def test_unknown_route_and_method_answer_in_the_error_shape(
    api: Api, jp_fetch: Any, ditto_app: DittoJupyterApp
) -> None:
    for method, route, allowed in [
        ("GET", "checkpoint", "POST, OPTIONS"),
        ("POST", "r1/checkpoints", "GET, OPTIONS"),
        ("POST", "checkpoints/x", "GET, OPTIONS"),
        ("POST", "openapi.json", "GET, OPTIONS"),
    ]:
        status, answer = await api(method, route, {"runtime_id": "r1"})
        assert (status, answer["error"]) == (405, "MethodNotAllowed"), route
        body = b"{}" if method == "POST" else None
        response = await jp_fetch(
            "api/v1/runtimes", route, method=method, body=body, raise_error=False
        )
        assert response.headers["Allow"] == allowed, route

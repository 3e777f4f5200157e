"""REST client of the runtime API, shared by the `ditto` CLI and the magics.

`RuntimeClient` sends JSON and turns an error answer into one `CliError` line with an
exit code; it resolves a checkpoint reference (id, unique id prefix, name,
`RUNTIME:NAME`) to its checkpoint on the server. `find_server` finds the server the way
`jupyter server list` does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import httpx

from ditto_jupyter.core.environment import SERVER_URL_ENV, TOKEN_ENV

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_SERVER = 4

API = "api/v1/runtimes"
#: Checkpoints asked for per request when a whole listing is fetched page by page (the
#: server's largest page).
PAGE_SIZE = 1000


class CliError(Exception):
    """A failure to report in one line, with its exit code."""

    def __init__(self, message: str, exit_code: int, body: Any = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.body = body


class UsageError(CliError):
    """Bad arguments: nothing was sent."""

    def __init__(self, message: str) -> None:
        super().__init__(f"usage error: {message}", EXIT_USAGE)


def parse_metadata(pairs: Sequence[str] | None) -> dict[str, str] | None:
    """`["owner=ana", "k=v=w"]` -> `{"owner": "ana", "k": "v=w"}`; None when none given."""
    if not pairs:
        return None
    metadata: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"metadata must be KEY=VALUE, got {pair!r}")
        metadata[key] = value
    return metadata


def api_path(*parts: str) -> str:
    """Path segments of a route under `api/v1/runtimes`, each quoted (ids may hold `/`)."""
    return "/".join(quote(part, safe="") for part in parts)


def split_reference(reference: str, runtime_id: str | None) -> tuple[str | None, str]:
    """The runtime and the checkpoint a reference names.

    With `runtime_id` the reference is an id, id prefix or name in that runtime, taken
    whole. Without one, `RUNTIME:NAME` (split at the first colon; ids never hold one)
    names a checkpoint in RUNTIME, and anything else is looked up across every runtime.
    """
    if runtime_id is not None:
        return runtime_id, reference
    owner, colon, name = reference.partition(":")
    if colon and owner and name:
        return owner, name
    return None, reference


def find_server(url: str | None, token: str | None) -> tuple[str, str]:
    """The server URL and token: flags, then environment, then a running Jupyter server."""
    url = url or os.environ.get(SERVER_URL_ENV)
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    if url:
        return url, token or ""
    from jupyter_server.serverapp import list_running_servers

    for info in list_running_servers():
        found = str(info.get("url") or "")
        if found:
            return found, token if token is not None else str(info.get("token") or "")
    raise CliError(
        "no Jupyter server found: start one (make lab) or pass --url/--token "
        "(or set DITTO_SERVER_URL/DITTO_TOKEN)",
        EXIT_SERVER,
    )


class RuntimeClient:
    """A small synchronous client of the runtime API."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        headers = {"Authorization": f"token {token}"} if token else {}
        self.http = httpx.Client(headers=headers, timeout=timeout)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
    ) -> Any:
        """Send one request to `api/v1/runtimes/<path>`; its JSON answer, or CliError."""
        url = self.base_url + f"{API}/{path}".rstrip("/")
        try:
            response = self.http.request(method, url, json=body, params=query)
        except httpx.HTTPError as error:
            raise CliError(
                f"cannot reach the server at {self.base_url}: {error}", EXIT_SERVER
            ) from None
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.status_code < 400:
            return payload
        code = payload.get("error") if isinstance(payload, dict) else None
        message = payload.get("message") if isinstance(payload, dict) else None
        text = f"{code}: {message}" if code else f"HTTP {response.status_code}"
        if response.status_code == 403 and not code:
            text = "HTTP 403: not authorized (check --token / DITTO_TOKEN)"
        exit_code = EXIT_REFUSED if response.status_code < 500 else EXIT_SERVER
        raise CliError(text, exit_code, payload)

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        """GET a route (with query parameters); its JSON answer."""
        return self.request("GET", path, query=query)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST a JSON body (fields that are None left out); the JSON answer."""
        return self.request("POST", path, {k: v for k, v in body.items() if v is not None})

    def list_checkpoints(
        self,
        runtime_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        newest_first: bool = False,
    ) -> Any:
        """A runtime's checkpoints: one page of at most `limit` (its `next_cursor` names
        where the next starts), or, without `limit`, every one, fetched page by page."""
        query = {"order": "newest" if newest_first else "oldest"}
        if limit is not None:
            query["limit"] = str(limit)
            if cursor is not None:
                query["cursor"] = cursor
            return self.get(api_path(runtime_id, "checkpoints"), query)
        checkpoints: list[Any] = []
        query["limit"] = str(PAGE_SIZE)
        while True:
            if cursor is not None:
                query["cursor"] = cursor
            page = self.get(api_path(runtime_id, "checkpoints"), query)
            checkpoints += page["checkpoints"]
            cursor = page.get("next_cursor")
            if cursor is None:
                return {"checkpoints": checkpoints, "next_cursor": None}

    def checkpoint_detail(self, reference: str, runtime_id: str | None = None) -> Any:
        """The server's `{checkpoint, context_manifest_id}` for a checkpoint reference.

        The server resolves it (`RuntimeService.resolve_checkpoint`): an id, a unique id
        prefix or a name, in `runtime_id` or `RUNTIME:NAME`'s runtime when one is given,
        else across every runtime. CheckpointNotFound (404) when nothing matches,
        InvalidRequest (400) when a prefix matches several.
        """
        owner, name = split_reference(reference, runtime_id)
        if owner is None:
            return self.get(api_path("checkpoints", name))
        return self.get(api_path(owner, "checkpoints", name))

    def resolve_checkpoint_id(self, reference: str, runtime_id: str | None = None) -> str:
        """The full id of the checkpoint a reference names (see `checkpoint_detail`)."""
        detail = self.checkpoint_detail(reference, runtime_id)
        return str(detail["checkpoint"]["checkpoint_id"])

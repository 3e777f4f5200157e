"""Schemathesis against the served openapi.json of a real server with a real notebook kernel.

Every check schemathesis has runs, except `positive_data_acceptance`: it expects any
schema-valid body to be accepted, while this API refuses some schema-valid requests by
contract (a checkpoint whose snapshot was deleted is 422 UnsupportedBackend, a forged
self-capture manifest is 400). What must hold: no 500 for anything, every answer matches
the documented status codes, content type, headers and schemas, malformed input is refused,
auth is enforced, unsupported methods answer 405 with `Allow`. The run is bounded by an
example count per operation and a time budget for the whole run, and seeded.

The schema it runs on is the served one plus explicit examples (`explicit_examples`): bodies
that once answered 500 (issue 10 section 5), sent as written in schemathesis's examples
phase on every run, on the live notebook's runtime. Schemathesis sends only examples that
its schema allows, so the copy it runs on drops the constraints those bodies break (the
`minLength` of `checkpoint_id`, the `pattern` of `command`); the served document keeps them
and carries no such examples.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.live_server import LiveServer

pytestmark = pytest.mark.slow  # real kernels / a jupyter server process

CHECKS = "all"
EXCLUDED = "positive_data_acceptance"


def explicit_examples(runtime_id: str) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """Request bodies sent as they are, by operation path: each once answered 500. Each
    names the field whose schema constraint it breaks."""
    return {
        "/api/v1/runtimes/restore": (
            "empty_checkpoint_id",
            "checkpoint_id",
            {"runtime_id": runtime_id, "checkpoint_id": ""},
        ),
        "/api/v1/runtimes/exec": (
            "nul_in_command",
            "command",
            {"runtime_id": runtime_id, "command": "echo a\x00b"},
        ),
    }


def schema_with_examples(server: LiveServer, runtime_id: str, target: Path) -> Path:
    """The served OpenAPI document with `explicit_examples` added, written to `target`."""
    document = httpx.get(
        server.url + "api/v1/runtimes/openapi.json",
        headers={"Authorization": f"Bearer {server.token}"},
    ).json()
    schemas = document["components"]["schemas"]
    for path, (name, field, body) in explicit_examples(runtime_id).items():
        media = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        media["examples"] = {name: {"value": body}}
        model = schemas[media["schema"]["$ref"].rsplit("/", 1)[-1]]
        for constraint in ("minLength", "pattern"):
            model["properties"][field].pop(constraint, None)
    target.write_text(json.dumps(document))
    return target


def test_schemathesis_finds_no_500_and_no_schema_violation(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "server") as server:
        session = server.open_notebook("fuzzed.ipynb")  # a real runtime for the stateful links
        st = Path(sys.executable).with_name("st")
        schema = schema_with_examples(server, session["id"], tmp_path / "openapi.json")
        result = subprocess.run(
            [
                str(st),
                "run",
                str(schema),
                "--url",
                server.url.rstrip("/"),
                "--header",
                f"Authorization: Bearer {server.token}",
                "--checks",
                CHECKS,
                "--exclude-checks",
                EXCLUDED,
                "--max-examples",
                "5",
                "--max-time",
                "45",
                "--workers",
                "1",
                "--seed",
                "20261130",
                "--request-timeout",
                "120",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        log = server.log_path.read_text()
    report = result.stdout[-8000:]
    assert result.returncode == 0, report
    generated = re.search(r"(\d+) generated", result.stdout)
    assert generated is not None, report
    assert int(generated.group(1)) >= 200, report
    assert " 500 POST " not in log and " 500 GET " not in log
    for path in explicit_examples(session["id"]):  # the examples were sent, and refused
        assert f"400 POST {path} " in log, path

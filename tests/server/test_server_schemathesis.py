"""Schemathesis against the served openapi.json of a real server with a real notebook kernel.

Every check schemathesis has runs, except `positive_data_acceptance`: it expects any
schema-valid body to be accepted, while this API refuses some schema-valid requests by
contract (a checkpoint whose snapshot was deleted is 422 UnsupportedBackend, a forged
self-capture manifest is 400). What must hold: no 500 for anything, every answer matches
the documented status codes, content type, headers and schemas, malformed input is refused,
auth is enforced, unsupported methods answer 405 with `Allow`. The run is bounded by an
example count per operation and a time budget for the whole run, and seeded.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.live_server import LiveServer

pytestmark = pytest.mark.slow  # real kernels / a jupyter server process

CHECKS = "all"
EXCLUDED = "positive_data_acceptance"


def test_schemathesis_finds_no_500_and_no_schema_violation(tmp_path: Path) -> None:
    with LiveServer(tmp_path / "server") as server:
        server.open_notebook("fuzzed.ipynb")  # a real runtime for the stateful links
        st = Path(sys.executable).with_name("st")
        result = subprocess.run(
            [
                str(st),
                "run",
                server.url + "api/v1/runtimes/openapi.json",
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

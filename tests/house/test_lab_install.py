"""`make lab` links the built lab extension into the environment: JupyterLab lists it.

`make test` links it first (as `make lab` does), so a broken link step fails here, not
only for a newcomer running `make lab`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# the lab extension built and linked into the venv, as `make lab` does
pytestmark = pytest.mark.labextension


def test_jupyterlab_lists_the_runtimes_extension_enabled() -> None:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run(
        [str(bin_dir / "jupyter"), "labextension", "list"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    output = listed.stdout + listed.stderr
    lines = [line for line in output.splitlines() if "ditto-jupyter" in line]
    assert lines, output
    assert "enabled" in lines[0] and "OK" in lines[0], lines

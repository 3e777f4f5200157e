"""Fixtures of the browser tests: Debian's chromium through pytest-playwright, and a real
`jupyter lab` with this checkout's server and lab extensions (`LabServer`).

Chromium comes from Debian (`make chromium` installs it; Playwright's own download cannot
run here). A missing browser or an unbuilt extension fails the tests with the command that
fixes it; it never skips them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.lab_server import LabServer

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def chromium_path() -> str:
    """Debian's chromium, or a clear error naming the command that installs it."""
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    found = shutil.which("chromium")
    if found:
        return found
    raise RuntimeError("chromium is not installed; install it with `make chromium`")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    return {
        **browser_type_launch_args,
        "executable_path": chromium_path(),
        "headless": True,
        "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
    }


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "viewport": {"width": 1440, "height": 900}}


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """A JupyterLab process for the module's tests, stopped (kernels and all) after them."""
    server = LabServer(tmp_path_factory.mktemp("lab"))
    server.root_dir.mkdir(parents=True, exist_ok=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        if server.log_path.exists():  # shown by pytest only when a test failed
            print(f"---- {server.log_path} (end) ----\n{server.log_path.read_text()[-20_000:]}")

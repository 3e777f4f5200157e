"""Fixtures of the browser tests: Debian's chromium driven by Playwright, and a real
`jupyter lab` with this checkout's server and lab extensions (`LabServer`).

Chromium comes from Debian (`make chromium` installs it; Playwright's own download cannot
run here). A missing browser or an unbuilt extension fails the tests with the command that
fixes it; it never skips them.

Playwright's sync API runs an asyncio event loop in this thread for as long as it is
started, and every asyncio test after it would find that loop running. So Playwright is
started per module and stopped when the module's tests end (pytest-playwright's fixtures
keep it for the whole session, which is why they are not used).
"""

from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.browser.lab_server import LabServer

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
VIEWPORT = {"width": 1440, "height": 900}


def chromium_path() -> str:
    """Debian's chromium, or a clear error naming the command that installs it."""
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    found = shutil.which("chromium")
    if found:
        return found
    raise RuntimeError("chromium is not installed; install it with `make chromium`")


def launch_chromium(playwright: object) -> Browser:
    """Headless Debian chromium (the sandbox needs privileges containers lack)."""
    browser: Browser = playwright.chromium.launch(  # type: ignore[attr-defined]
        executable_path=chromium_path(),
        headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
    )
    return browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = launch_chromium(playwright)
        try:
            yield launched
        finally:
            launched.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Page]:
    """A fresh browser page; when the test fails, its screenshot goes to the test's tmp."""
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    opened = context.new_page()
    try:
        yield opened
    finally:
        if request.node.stash.get(_FAILED, False):
            shot = tmp_path / "failure.png"
            opened.screenshot(path=str(shot))
            print(f"screenshot of the failed test: {shot}")
        context.close()


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

"""Repository-wide pytest setup (tests/ and the nbval notebooks in notebooks/).

Kernels that nbval starts have no server behind them, and no fixture runs before they
start, so their environment is set here, in pytest_configure: the magics' embedded store
goes to a throwaway data directory, never the user's own.

Under `CI=true` (or 1/yes) a skipped test is a failure: a suite that skips for want of
something on the machine (PostgreSQL, a driver) must make the run red, not quietly pass.
Each skip, in collection or in a test's setup, call or teardown, is reported as failed
with its reason. Expected failures (xfail) stay what they are.

A test never writes into the checkout. After the whole run, `git status` must list what it
listed when the run started, each file unchanged (size and modification time): a file the
run added, changed or removed fails the run, and the summary names it. A developer's
uncommitted work from before the run is therefore no failure, only a change to it during
the run is. `make screenshots` (DITTO_UPDATE_SCREENSHOTS=1) may rewrite docs/images/.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

SKIP_IS_FAILURE_ENV = "CI"
UPDATE_SCREENSHOTS_ENV = "DITTO_UPDATE_SCREENSHOTS"
SCREENSHOTS_DIR = "docs/images/"

# A path `git status` lists -> (its status code, size, mtime in ns); -1s when it is gone.
CheckoutState = dict[str, tuple[str, int, int]]
_STATE_AT_START = pytest.StashKey[CheckoutState]()
_LEFT_IN_CHECKOUT = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("DITTO_TEST_KEEP_ENV"):
        os.environ["DITTO_DATA_DIR"] = tempfile.mkdtemp(prefix="ditto-test-data-")
        for name in (
            "DITTO_SERVER_URL",
            "DITTO_TOKEN",
            "DITTO_RUNTIME_ID",
            "DITTO_RUNTIME_TOKEN",
            "DITTO_WORKSPACE",
        ):
            os.environ.pop(name, None)


@pytest.fixture(autouse=True)
def _ditto_variables_kept() -> Iterator[None]:
    """The DITTO_* variables as they were before each test: code a test runs in this process
    (an in-process control sets DITTO_WORKSPACE) must not leak them into later tests, nor
    into the kernels nbval starts, whose `ditto_jupyter.workspace()` would trust them."""
    before = {name: value for name, value in os.environ.items() if name.startswith("DITTO_")}
    yield
    for name in [name for name in os.environ if name.startswith("DITTO_")]:
        if name not in before:
            del os.environ[name]
    os.environ.update(before)


def skips_fail() -> bool:
    """True when the environment says this run is CI, where a skip is a failure."""
    return os.environ.get(SKIP_IS_FAILURE_ENV, "").strip().lower() in {"1", "true", "yes"}


def _skip_reason(longrepr: object) -> str:
    """The reason of a skip report (pytest keeps it as (path, line, reason))."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_the_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and skips_fail():
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under {SKIP_IS_FAILURE_ENV}=true, where a skip is a failure: "
            f"{_skip_reason(report.longrepr)}"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_the_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_the_skip(report)
    return report


def checkout_state(root: Path) -> CheckoutState | None:
    """What `git status` lists under `root`, untracked files one by one; None outside git."""
    try:
        listed = subprocess.run(
            ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"],
            cwd=root,
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None  # not a git checkout (an unpacked sdist), or no git: nothing to compare
    fields = listed.decode(errors="surrogateescape").split("\0")
    state: CheckoutState = {}
    index = 0
    while index < len(fields):
        entry = fields[index]
        index += 1
        if not entry:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            index += 1  # a rename or copy names its source next
        if path in state:  # listed twice (deleted in the index, and back untracked)
            code = state[path][0] + code
        try:
            stat = (root / path).lstat()
            state[path] = (code, stat.st_size, stat.st_mtime_ns)
        except OSError:
            state[path] = (code, -1, -1)
    return state


def changed_paths(before: CheckoutState, after: CheckoutState) -> list[str]:
    """The paths whose status, size or modification time differ between two states."""
    changed = (path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    if os.environ.get(UPDATE_SCREENSHOTS_ENV) == "1":
        changed = (path for path in changed if not path.startswith(SCREENSHOTS_DIR))
    return sorted(changed)


def pytest_sessionstart(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a worker of a distributed run: the controller compares
    state = checkout_state(session.config.rootpath)
    if state is not None:
        session.config.stash[_STATE_AT_START] = state


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_STATE_AT_START, None)
    if before is None:
        return
    after = checkout_state(session.config.rootpath)
    left = changed_paths(before, after if after is not None else {})
    if left:
        session.config.stash[_LEFT_IN_CHECKOUT] = left
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    left = terminalreporter.config.stash.get(_LEFT_IN_CHECKOUT, [])
    if left:
        terminalreporter.section("the run changed the checkout", red=True)
        terminalreporter.write_line(
            "A test wrote into the checkout (use tmp_path); these changed since the run "
            "started, so the run fails:"
        )
        for path in left:
            terminalreporter.write_line(f"  {path}")

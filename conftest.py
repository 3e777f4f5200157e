"""Repository-wide pytest setup (tests/ and the nbval notebooks in notebooks/).

Kernels that nbval starts have no server behind them, and no fixture runs before they
start, so their environment is set here, in pytest_configure: the magics' embedded store
goes to a throwaway data directory, never the user's own.

Under `CI=true` (or 1/yes) a skipped test is a failure: a suite that skips for want of
something on the machine (PostgreSQL, a driver) must make the run red, not quietly pass.
Each skip, in collection or in a test's setup, call or teardown, is reported as failed
with its reason. Expected failures (xfail) stay what they are.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Generator

import pytest

SKIP_IS_FAILURE_ENV = "CI"


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("DITTO_TEST_KEEP_ENV"):
        os.environ["DITTO_DATA_DIR"] = tempfile.mkdtemp(prefix="ditto-test-data-")
        for name in ("DITTO_SERVER_URL", "DITTO_TOKEN", "DITTO_RUNTIME_ID", "DITTO_RUNTIME_TOKEN"):
            os.environ.pop(name, None)


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

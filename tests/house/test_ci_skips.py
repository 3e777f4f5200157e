"""The root conftest's rule: under CI=true a skip is a failure, with its reason.

Each case runs a small suite in a subprocess with a copy of the repository's root
conftest.py (and no other plugin), with CI unset or false (skips stay skips) or set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT_CONFTEST = Path(__file__).resolve().parents[2] / "conftest.py"

SUITE = """
import pytest

def test_passes():
    pass

def test_skips_in_its_body():
    pytest.skip("no postgres here")

@pytest.mark.skipif(True, reason="a marker said so")
def test_skipped_by_a_marker():
    pass

@pytest.fixture
def server():
    pytest.skip("the fixture found no server")

def test_skipped_by_its_fixture(server):
    pass

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_to_fail():
    assert False
"""

SKIPPED_MODULE = """
import pytest

pytest.importorskip("no_such_driver_for_this_test", reason="the driver is not installed")

def test_never_collected():
    pass
"""


def run_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None, source: str
) -> pytest.RunResult:
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    pytester.makepyfile(test_suite=source)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the suite needs no plugin
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


def test_without_ci_a_skip_is_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_suite(pytester, monkeypatch, None, SUITE)
    result.assert_outcomes(passed=1, skipped=3, xfailed=1)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.parametrize("ci", ["true", "1", "TRUE"])
def test_under_ci_every_skip_fails_with_its_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str
) -> None:
    result = run_suite(pytester, monkeypatch, ci, SUITE)
    # a skip in the body fails the test; one in setup (marker, fixture) is a setup error
    result.assert_outcomes(passed=1, failed=1, errors=2, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines_random(
        [
            "FAILED *test_skips_in_its_body - skipped under CI=true*: no postgres here",
            "ERROR *test_skipped_by_a_marker - skipped under CI=true*: a marker said so",
            "ERROR *test_skipped_by_its_fixture - skipped under CI=true*: "
            "the fixture found no server",
        ]
    )


def test_ci_false_keeps_skips(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_suite(pytester, monkeypatch, "false", SUITE)
    result.assert_outcomes(passed=1, skipped=3, xfailed=1)


def test_under_ci_a_skipped_module_fails_the_collection(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_suite(pytester, monkeypatch, None, SKIPPED_MODULE).ret == (
        pytest.ExitCode.NO_TESTS_COLLECTED
    )
    result = run_suite(pytester, monkeypatch, "true", SKIPPED_MODULE)
    result.assert_outcomes(errors=1)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["ERROR *test_suite.py - skipped under CI=true*: the driver*"])

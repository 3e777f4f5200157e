"""The root conftest's rule: a run that changes the checkout fails, naming what it changed.

Each case is a small suite in a git repository of its own (a subprocess with a copy of the
repository's root conftest.py): a test writing a relative path fails the run, while a
developer's uncommitted work from before the run does not, unless the run changes it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT_CONFTEST = Path(__file__).resolve().parents[2] / "conftest.py"

LEAKS = """
from pathlib import Path

def test_writes_a_relative_path():
    Path("data.txt").write_text("")
"""

CLEAN = """
def test_touches_nothing(tmp_path):
    (tmp_path / "data.txt").write_text("in the temporary folder")
"""

APPENDS_TO_NOTES = """
from pathlib import Path

def test_appends():
    with open("notes.md", "a") as notes:
        notes.write("more")
"""


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def checkout(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A git repository holding the root conftest, committed, with a suite beside it."""
    pytester.makeconftest(ROOT_CONFTEST.read_text())
    (pytester.path / "README.md").write_text("committed\n")
    # pytester keeps its own files there: the suite's temporary folders and its output
    (pytester.path / ".gitignore").write_text("runpytest-*/\nstdout\nstderr\n")
    git(pytester.path, "init", "-q")
    git(pytester.path, "add", "-A")
    git(pytester.path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the suite needs no plugin
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("DITTO_UPDATE_SCREENSHOTS", raising=False)
    return pytester


def run(checkout: pytest.Pytester, source: str) -> pytest.RunResult:
    checkout.makepyfile(test_suite=source)  # untracked before the run: not a change of it
    return checkout.runpytest_subprocess("-p", "no:cacheprovider")


def test_a_file_written_into_the_checkout_fails_the_run_and_is_named(
    checkout: pytest.Pytester,
) -> None:
    result = run(checkout, LEAKS)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*the run changed the checkout*", "*use tmp_path*", "  data.txt"])


def test_a_run_that_writes_only_to_tmp_path_passes(checkout: pytest.Pytester) -> None:
    result = run(checkout, CLEAN)
    assert result.ret == pytest.ExitCode.OK
    assert "changed the checkout" not in result.stdout.str()


def test_uncommitted_work_from_before_the_run_is_no_failure(checkout: pytest.Pytester) -> None:
    (checkout.path / "README.md").write_text("edited, not committed\n")
    (checkout.path / "draft.py").write_text("x = 1\n")
    result = run(checkout, CLEAN)
    assert result.ret == pytest.ExitCode.OK


def test_a_change_to_uncommitted_work_during_the_run_is_one(checkout: pytest.Pytester) -> None:
    (checkout.path / "notes.md").write_text("mine\n")
    result = run(checkout, APPENDS_TO_NOTES)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["  notes.md"])


def test_screenshots_may_be_refreshed_when_asked(
    checkout: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = """
from pathlib import Path

def test_saves_a_screenshot():
    Path("docs/images").mkdir(parents=True)
    Path("docs/images/panel.png").write_bytes(b"png")
"""
    monkeypatch.setenv("DITTO_UPDATE_SCREENSHOTS", "1")
    assert run(checkout, source).ret == pytest.ExitCode.OK

"""`ditto --help` and the `--help` of every subcommand answer, through the installed
console script (the entry point a user runs, not `main()` in this process).

argparse formats every help string as a %-template, so one bare `%` in a help text
(`(%budget)`) turned `ditto --help` into a traceback. The subcommands come from the
parser itself: a command added later is covered without touching this test.
"""

from __future__ import annotations

import argparse
import subprocess
import sysconfig
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from ditto_jupyter.cli import build_parser


def subcommands() -> list[str]:
    """Every subcommand the `ditto` parser knows."""
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    return sorted(actions[0].choices)


def console_script() -> Path:
    """The installed `ditto` script of this environment, checked to be our entry point."""
    (entry,) = entry_points(group="console_scripts", name="ditto")
    assert entry.value == "ditto_jupyter.cli:main"
    script = Path(sysconfig.get_path("scripts")) / "ditto"
    assert script.is_file(), f"no installed console script at {script}"
    return script


def test_the_parser_has_the_commands_users_know() -> None:
    assert {"checkpoint", "checkout", "restore", "pause", "resume", "budget", "doctor"} <= set(
        subcommands()
    )


@pytest.mark.parametrize("command", [[], *([name] for name in subcommands())], ids=str)
def test_help_answers(command: list[str], tmp_path: Path) -> None:
    answer = subprocess.run(
        [str(console_script()), *command, "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith("usage: ditto"), answer.stdout
    assert "Traceback" not in answer.stderr

"""Write one benchmark's table into its own section of benchmarks/RESULTS.md.

Each benchmark owns a section delimited by HTML comments, so benchmarks can be re-run
one at a time without disturbing the others' tables.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = (
    "# Benchmark results\n\nEach section is written by the script it names; re-run it to refresh.\n"
)


def machine_line() -> str:
    """One line describing where and when the figures were taken."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return (
        f"_{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit or 'n/a'}, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores, {platform.machine()}_"
    )


def markdown_table(headers: list[str], rows: list[list[object]]) -> str:
    """Render rows as a GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _repo_relative(argv: list[str]) -> list[str]:
    """The command line with the checkout's own path cut off (`benchmarks/bench_x.py`)."""
    root = str(Path(__file__).resolve().parent.parent) + "/"
    return [arg.removeprefix(root) for arg in argv]


def write_section(key: str, title: str, body: str) -> None:
    """Replace (or append) the section `key` of RESULTS.md, atomically."""
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    command = " ".join([Path(sys.executable).name, *_repo_relative(sys.argv)])
    block = (
        f"{start}\n## {title}\n\n{machine_line()}; command: `{command}`\n\n{body.strip()}\n{end}"
    )
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else text.rstrip() + "\n\n" + block + "\n"
    )
    fd, tmp = tempfile.mkstemp(dir=RESULTS.parent, prefix=".RESULTS.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, RESULTS)

"""Kishu 0.3.4 beside our capture: how the benchmarks attach it, time it and size its store.

Shared by bench_kernel and bench_notebooks. Both halves live here:

- host side (the benchmark process): `KishuNotebook` lays out the notebook file Kishu keys
  its store on, the kernel environment of its test mode, and sizes its `.kishudb`;
- kernel side (imported inside the Kishu kernel as `benchmarks.kishu_harness`, without binding
  a name): `install` wraps Kishu's `pre_run_cell` / `post_run_cell` hooks to time them, and
  `last`, `head`, `checkout`, `hook_errors` are called through `KernelHost.call`.

Kishu's hooks run inside the kernel, so their time is measured there (the ZMQ round trip is
not charged to Kishu). A hook that raises is still timed, and counted in `hook_errors`:
IPython reports callback errors and carries on, so without that the cell would silently
count as committed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the cell that attaches Kishu (init_kishu looks get_ipython up in the calling frame); call
#: INSTALL right after it, so the hooks it timed start with the next cell
ATTACH_KISHU = "from kishu import init_kishu; init_kishu()"
INSTALL = "benchmarks.kishu_harness:install"
LAST = "benchmarks.kishu_harness:last"
HEAD = "benchmarks.kishu_harness:head"
CHECKOUT = "benchmarks.kishu_harness:checkout"
HOOK_ERRORS = "benchmarks.kishu_harness:hook_errors"


def tree_size(path: Path) -> int:
    """Bytes on disk under a path (a file or a directory; 0 when it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass(frozen=True)
class KishuNotebook:
    """The notebook file a Kishu kernel is attached to, in Kishu's test mode.

    The file stays empty of cells (test mode skips the browser save), so Kishu's store holds
    the namespace and its commit records, not copies of the notebook: like for like with a
    namespace capture.
    """

    path: Path

    def create(self) -> None:
        """Write the empty notebook Kishu attaches to."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(
            json.dumps(
                {
                    "cells": [],
                    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
                    "nbformat": 4,
                    "nbformat_minor": 5,
                }
            )
        )

    def env(self) -> dict[str, str]:
        """The kernel environment: Kishu's test mode on this notebook, this repo importable."""
        return {
            "TEST_NOTEBOOK_PATH": str(self.path),
            "ENV_KISHU_TEST_MODE": "1",
            "KISHU_PATH_ROOT": str(self.path.parent / "kishu_home"),
            "PYTHONPATH": os.pathsep.join(
                part for part in [str(ROOT), os.environ.get("PYTHONPATH", "")] if part
            ),
        }

    def db_size(self) -> int:
        """Bytes of Kishu's store for this notebook (the SQLite file and its journals)."""
        return sum(
            p.stat().st_size
            for p in self.path.parent.glob(f"{self.path.stem}.kishudb*")
            if p.is_file()
        )


# ---- kernel side ------------------------------------------------------------------------

_times: list[float] = []
_errors: list[str] = []
_state: dict[str, Any] = {}


def install() -> bool:
    """Replace Kishu's cell hooks by timed wrappers around them."""
    from IPython import get_ipython

    shell = get_ipython()
    kishu = shell.user_ns["_kishu"]
    _state["kishu"] = kishu
    shell.events.unregister("pre_run_cell", kishu.pre_run_cell)
    shell.events.unregister("post_run_cell", kishu.post_run_cell)
    shell.events.register("pre_run_cell", _pre)
    shell.events.register("post_run_cell", _post)
    return True


def _pre(info: Any) -> None:
    start = time.perf_counter()
    try:
        _state["kishu"].pre_run_cell(info)
    finally:
        _state["pre"] = time.perf_counter() - start


def _post(result: Any) -> None:
    start = time.perf_counter()
    try:
        _state["kishu"].post_run_cell(result)
    except Exception as error:
        _errors.append(f"{type(error).__name__}: {error}"[:300])
        raise
    finally:
        _times.append(_state.pop("pre", 0.0) + time.perf_counter() - start)


def last() -> float:
    """Seconds Kishu's hooks took around the last cell."""
    return _times[-1]


def hook_errors() -> list[str]:
    """The errors Kishu's post-cell hook raised so far, oldest first."""
    return list(_errors)


def head() -> str:
    """Kishu's current commit."""
    return str(_state["kishu"]._kishu_branch.get_head().commit_id)


def checkout(commit_id: str) -> float:
    """Check a commit out in place; the seconds it took."""
    start = time.perf_counter()
    _state["kishu"].checkout(commit_id)
    return time.perf_counter() - start

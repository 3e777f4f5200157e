"""The worker API's home is `ditto_jupyter.worker`; the package root is the Jupyter product.

What a user meets: the README's import block works from `ditto_jupyter.worker`, each name
it documents is exported there; an old `from ditto_jupyter import Runtime` still works for
this release and warns, naming the import to use; the root itself shows the product.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import ditto_jupyter
import ditto_jupyter.worker as worker

README = Path(__file__).resolve().parents[2] / "README.md"

#: The names the worker document lists (the brief of issue 41 and the README).
DOCUMENTED = [
    "checkpoint_state",
    "restore_state",
    "StateError",
    "StateValidationError",
    "StateScopeError",
    "StateVersionError",
    "StateDigestError",
    "BranchStore",
    "Branch",
    "BranchConflictError",
    "BranchClosedError",
    "TokenBudget",
    "SharedTokenBudget",
    "budgeted_provider",
    "BudgetExceededError",
    "Graph",
    "Runtime",
    "GraphCheckpointOptions",
    "LoopCheckpointOptions",
    "UncertainCheckpointError",
]


def readme_worker_names() -> list[str]:
    """The names of the README's `from ditto_jupyter.worker import (...)` block."""
    match = re.search(r"from ditto_jupyter\.worker import \(([^)]*)\)", README.read_text())
    assert match is not None, "the README shows no worker import block"
    return [name.strip() for name in match.group(1).split(",") if name.strip()]


@pytest.mark.parametrize("name", DOCUMENTED)
def test_each_documented_name_is_exported_by_the_worker_package(name: str) -> None:
    assert name in worker.__all__
    assert getattr(worker, name) is not None


def test_the_readme_block_is_what_the_worker_package_exports() -> None:
    names = readme_worker_names()
    assert set(names) <= set(worker.__all__)
    assert set(DOCUMENTED) >= set(names)


def test_every_name_of_the_worker_package_resolves() -> None:
    missing = [name for name in worker.__all__ if not hasattr(worker, name)]
    assert missing == []


@pytest.mark.parametrize("name", sorted(ditto_jupyter.MOVED_TO_WORKER))
def test_an_old_root_import_warns_naming_the_new_one_and_still_works(name: str) -> None:
    with pytest.warns(DeprecationWarning) as caught:
        value = getattr(ditto_jupyter, name)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"from ditto_jupyter.worker import {name}" in message
    assert "deprecated" in message
    assert caught[0].filename == __file__  # it points at the importing line
    assert value is getattr(worker, name)


def test_the_old_from_import_statement_runs_as_before() -> None:
    """`from ditto_jupyter import Graph, Runtime` in a fresh interpreter, warnings as
    Python shows them by default: a graph runs, and each name warned once, at the line of
    the import."""
    code = textwrap.dedent(
        """
        import asyncio, warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            from ditto_jupyter import Graph, Runtime
        g = Graph("g")
        g.node("one", lambda ctx: 1)
        result = asyncio.run(Runtime().run(g, None))
        print(result["one"])
        for w in caught:
            print(w.category.__name__, w.lineno, w.message)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "1", out
    assert out[1:] == [
        "DeprecationWarning 5 `from ditto_jupyter import Graph` is deprecated and goes in the "
        "next release: use `from ditto_jupyter.worker import Graph`",
        "DeprecationWarning 5 `from ditto_jupyter import Runtime` is deprecated and goes in "
        "the next release: use `from ditto_jupyter.worker import Runtime`",
    ]


def test_the_root_shows_the_jupyter_product_and_no_worker_name() -> None:
    assert set(ditto_jupyter.__all__) == {
        "load_ipython_extension",
        "unload_ipython_extension",
        "runtime_budget",
        "workspace",
    }
    assert not set(ditto_jupyter.__all__) & ditto_jupyter.MOVED_TO_WORKER
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the product's names do not warn
        for name in ditto_jupyter.__all__:
            assert callable(getattr(ditto_jupyter, name))


def test_an_unknown_root_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Runtim'"):
        ditto_jupyter.Runtim  # noqa: B018

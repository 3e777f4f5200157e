"""No import cycle at run time in ditto_jupyter, and the check `make lint` runs finds one
of any length (function-level imports count, `TYPE_CHECKING` ones do not)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.house.import_cycles import describe, import_graph, strongly_connected

CHECK = Path(__file__).with_name("import_cycles.py")


def test_ditto_jupyter_has_no_import_cycle() -> None:
    assert describe(import_graph("ditto_jupyter")) == []


@pytest.fixture
def looped_package(tmp_path: Path) -> Iterator[str]:
    """A package `looped` whose modules a -> b -> c -> a import each other in a loop (the
    last at function level), beside d, which imports a only for type checking."""
    root = tmp_path / "looped"
    root.mkdir()
    modules = {
        "__init__": "",
        "a": "from looped import b\n",
        "b": "import looped.c\n",
        "c": "def late():\n    from looped.a import thing\n    return thing\n",
        "d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from looped import a\n",
        "e": "from looped import d\n",
    }
    modules["a"] += "thing = 1\nfrom looped import d\n"
    modules["d"] += "from looped import e\n"
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(tmp_path))
    try:
        yield "looped"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "looped" or m.startswith("looped.")]:
            del sys.modules[name]


def test_a_long_cycle_is_found_and_type_checking_imports_are_not_counted(
    looped_package: str,
) -> None:
    components = strongly_connected(import_graph(looped_package))
    assert components == [
        ["looped.a", "looped.b", "looped.c"],
        ["looped.d", "looped.e"],
    ]


def test_the_check_fails_naming_every_cycle(looped_package: str, tmp_path: Path) -> None:
    answer = subprocess.run(
        [sys.executable, str(CHECK), looped_package],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path)},
        check=False,
    )
    assert answer.returncode == 1
    assert "cycle of 3 modules: looped.a, looped.b, looped.c" in answer.stdout
    assert "looped.a -> looped.b -> looped.c -> looped.a" in answer.stdout
    assert "cycle of 2 modules: looped.d, looped.e" in answer.stdout

"""Every `DITTO_*` environment variable is named once, in `ditto_jupyter.core.environment`;
the rest of the package uses its constants (a typo in a literal would be a silent miss)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ditto_jupyter
from ditto_jupyter.core import environment

PACKAGE = Path(ditto_jupyter.__file__).parent
NAME = re.compile(r"DITTO_[A-Z_]+")


def literals(path: Path) -> list[str]:
    """The string constants of a module that are a DITTO_* name, with their line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and NAME.fullmatch(node.value)
    ]


def test_ditto_names_are_defined_only_in_core_environment() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != Path(environment.__file__)
        for hit in literals(path)
    ]
    assert found == []

"""The capture modules that moved (issue 41: `figures/` and `reducers`) are still found by
their old dotted names: a pickle stored before that names a function or class of theirs
still loads, in a kernel where nothing imported the capture yet."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from ditto_jupyter.kernel.capture import MOVED_MODULES
from ditto_jupyter.kernel.capture.figures import figure_watch, pods, pyplot_access, pyplot_state
from ditto_jupyter.kernel.capture.reducers import (
    _callback_registry,
    _colormap,
    _keeping,
    cache_bases,
    counter_reducers,
    kept_state_bases,
)

OLD = "ditto_jupyter.kernel.capture"
#: (old module, name) -> what a pickle naming it must load.
NAMED: dict[tuple[str, str], object] = {
    ("counters", "_callback_registry"): _callback_registry,
    ("counters", "counter_reducers"): counter_reducers,
    ("lazy_caches", "_colormap"): _colormap,
    ("lazy_caches", "cache_bases"): cache_bases,
    ("kept_state", "_keeping"): _keeping,
    ("kept_state", "kept_state_bases"): kept_state_bases,
    ("pods", "Pod"): pods.Pod,
    ("pods", "pod_name"): pods.pod_name,
    ("pyplot_state", "show_only"): pyplot_state.show_only,
    ("pyplot_access", "FigureAccess"): pyplot_access.FigureAccess,
    ("figure_watch", "watch"): figure_watch.watch,
}


def old_pickle(module: str, name: str, protocol: int) -> bytes:
    """A pickle of the global `module.name` as an older version wrote it (by its path)."""
    path = f"{OLD}.{module}"
    if protocol < 4:  # GLOBAL: 'c' module '\n' name '\n'
        return b"c" + path.encode() + b"\n" + name.encode() + b"\n."
    body = bytearray(b"\x80\x04")  # PROTO 4, then SHORT_BINUNICODE twice, STACK_GLOBAL
    for text in (path, name):
        data = text.encode()
        body += b"\x8c" + bytes([len(data)]) + data
    return bytes(body + b"\x93.")


def test_every_moved_module_is_covered() -> None:
    assert {module for module, _ in NAMED} == set(MOVED_MODULES)


@pytest.mark.parametrize("protocol", [0, 4])
@pytest.mark.parametrize(("module", "name"), sorted(NAMED))
def test_a_pickle_naming_an_old_path_loads(module: str, name: str, protocol: int) -> None:
    assert pickle.loads(old_pickle(module, name, protocol)) is NAMED[module, name]


def test_an_old_path_loads_in_a_fresh_interpreter() -> None:
    """Nothing imported the capture yet: unpickling imports it, which keeps the old paths."""
    data = old_pickle("counters", "_callback_registry", 4)
    code = (
        "import pickle, sys\n"
        f"found = pickle.loads({data!r})\n"
        "print(found.__module__, found.__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.split() == [f"{OLD}.reducers", "_callback_registry"]

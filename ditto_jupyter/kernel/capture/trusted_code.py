"""Which code is a library's (trusted) and which may be the notebook's.

Trusted modules live in the standard library or an installed package: a cell that names
one cannot have reached the notebook's values through it. Anything else (the user's own
`.py` files, `__main__`, modules made at run time) may hold aliases to notebook values, so
`cell_effects` takes a cell that names one as able to have touched anything, and
`thread_activity` a thread running such code as the notebook's.
"""

from __future__ import annotations

import functools
import importlib.machinery
import os
import site
import sys
import sysconfig
import types

#: Where trusted modules live: the standard library and installed packages. Anything else
#: (the user's own `.py` files, `__main__`, modules made at run time) may hold aliases to
#: notebook values, so a cell that names one can have touched anything.
_TRUSTED_ROOTS = tuple(
    {
        os.path.realpath(path)
        for path in (
            *(sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib")),
            sysconfig.get_paths().get("platlib"),
            *site.getsitepackages(),
            site.getusersitepackages(),
        )
        if path
    }
)


def is_trusted_module(module: types.ModuleType) -> bool:
    """Whether a module is built in, or its file lives in the stdlib or site-packages."""
    if module.__name__ == "__main__":
        return False
    if module.__name__ in sys.builtin_module_names:
        return True
    return _is_trusted_spec(getattr(module, "__spec__", None), getattr(module, "__file__", None))


def is_trusted_module_name(name: str) -> bool:
    """Whether a top-level module a cell imports is trusted, found without importing it."""
    module = sys.modules.get(name)
    if module is not None:
        return is_trusted_module(module)
    if name in sys.builtin_module_names:
        return True
    spec = importlib.machinery.PathFinder.find_spec(name) if name.isidentifier() else None
    return spec is not None and _is_trusted_spec(spec, None)


def _is_trusted_spec(spec: object, file: object) -> bool:
    """Whether a module's file (or, for a namespace package, every directory) is trusted."""
    origin = getattr(spec, "origin", None)
    if origin in ("built-in", "frozen"):
        return True
    if isinstance(file or origin, str):
        return _is_trusted_file(str(file or origin))
    locations = list(getattr(spec, "submodule_search_locations", None) or ())
    return bool(locations) and all(_is_trusted_file(path) for path in locations)


@functools.lru_cache(maxsize=4096)
def _is_trusted_file(file: str) -> bool:
    """Whether a module file lives under the stdlib or site-packages (symlinks resolved)."""
    real = os.path.realpath(file)
    return any(real.startswith(root + os.sep) for root in _TRUSTED_ROOTS)


def is_trusted_file_name(file: str) -> bool:
    """Whether a code file (a coroutine's, a function's) is of the stdlib or site-packages."""
    return _is_trusted_file(file)


def from_untrusted_module(module_name: object) -> bool:
    """Whether a `__module__` names a module we do not trust (unknown ones included)."""
    if module_name == "__main__":
        return False
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    return module is None or not is_trusted_module(module)

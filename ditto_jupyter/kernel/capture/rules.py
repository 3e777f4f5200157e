"""Which namespace entries are state: IPython's own names are not, a user's own `_name` is.

Also how a value and a failure are named in the manifest and in the unrestorable list.
"""

from __future__ import annotations

import re
import sys
from typing import Any

IPYTHON_NAMES = frozenset(
    {
        "In",
        "Out",
        "_",
        "__",
        "___",
        "_i",
        "_ii",
        "_iii",
        "_oh",
        "_ih",
        "_dh",
        "exit",
        "quit",
        "get_ipython",
    }
)
_IPYTHON_PATTERN = re.compile(r"_i\d+|_\d+|__\w*__")


def ipython_shell(namespace: dict[str, object]) -> Any:
    """The running IPython shell whose user namespace is `namespace`, if any."""
    module = sys.modules.get("IPython")
    if module is None:
        return None
    shell = module.get_ipython()
    if shell is not None and getattr(shell, "user_ns", None) is namespace:
        return shell
    return None


def hidden_names(namespace: dict[str, object]) -> dict[str, object]:
    """The shell's `user_ns_hidden` (names IPython put there itself); empty outside IPython."""
    shell = ipython_shell(namespace)
    hidden = getattr(shell, "user_ns_hidden", None) if shell is not None else None
    return hidden if isinstance(hidden, dict) else {}


def is_state_name(name: object, value: object, hidden: dict[str, object]) -> bool:
    """Whether a namespace entry is user state (not one of IPython's own names)."""
    if not isinstance(name, str) or name in IPYTHON_NAMES or _IPYTHON_PATTERN.fullmatch(name):
        return False
    return not (name in hidden and hidden[name] is value)


def type_name(value: object) -> str:
    """The type of a value as the manifest records it (`list`, `numpy.ndarray`)."""
    cls = type(value)
    module = getattr(cls, "__module__", "builtins")
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def failure_reason(error: BaseException) -> str:
    """One line (at most 300 characters) saying why a value could not be kept."""
    text = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def imported_class(module: str, name: str) -> type | None:
    """The class `module.name` when its module is already imported (never imports)."""
    cls = getattr(sys.modules.get(module), name, None)
    return cls if isinstance(cls, type) else None

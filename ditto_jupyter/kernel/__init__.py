"""Code that runs inside a kernel: namespace capture and restore, the magics, adoption by
a runtime, `%autocheckpoint` and its write-behind, the workspace helper, `%budget`, and
this kernel's runtime control (`this_kernel`).

What starts and drives kernels from outside lives in `ditto_jupyter.hosts`. Kept
import-light: importing this package (as every kernel call does) pulls in neither IPython
nor jupyter_client; its modules are imported on use. `dispatch_call` is the one entry
point a host's silent user expression calls.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from typing import Any

_FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class CallResult:
    """A call's JSON result, shown to the host as the expression's application/json."""

    def __init__(self, value: Any) -> None:
        self.value = {"result": value}

    def _repr_json_(self) -> Any:
        return self.value

    def __repr__(self) -> str:
        return json.dumps(self.value)


def dispatch_call(request_json: str) -> CallResult:
    """Run `module:function(**args)` from a JSON request `{"function": ..., "args": {...}}`."""
    request = json.loads(request_json)
    if not isinstance(request, dict):
        raise TypeError("a kernel call request must be a JSON object")
    function, args = request.get("function"), request.get("args")
    if not isinstance(function, str) or not _FUNCTION.fullmatch(function):
        raise ValueError(f"kernel call target {function!r} is not 'module:function'")
    if not isinstance(args, dict):
        raise TypeError("kernel call arguments must be a JSON object")
    module_name, _, name = function.partition(":")
    journal = sys.modules.get("ditto_jupyter.kernel.capture.journal")
    if journal is not None:  # code no cell showed runs: the change journal must know
        journal.note_kernel_call(function)
    target = getattr(importlib.import_module(module_name), name)
    try:
        return CallResult(target(**args))
    except Exception as error:
        raise _by_code(error) from None


def _by_code(error: Exception) -> Exception:
    """A ditto error as the error type of its stable code (the host sees the class name,
    so `BlobStorageFull` goes back as `StorageFull`); any other error as it is."""
    from ditto_jupyter.core.errors import DittoError, error_type_of

    if not isinstance(error, DittoError):
        return error
    kind = error_type_of(error.code)
    return kind(error.message) if kind is not None and kind is not type(error) else error

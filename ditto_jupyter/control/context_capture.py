"""The old name of `context_driver`, kept for one release so code importing it still runs.

`SessionContextCapture` is `ContextDriver`: import that from `ditto_jupyter.control.context_driver`.
"""

from __future__ import annotations

from ditto_jupyter.control.context_driver import ContextDriver

#: The old name of `ContextDriver`.
SessionContextCapture = ContextDriver

__all__ = ["SessionContextCapture"]

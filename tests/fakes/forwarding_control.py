"""A TEST DOUBLE of a runtime control: forwards every operation to a real control and
records which ones were asked.

It is neither of the product's controls (`LocalControl`, `ServerControl`), so code that
works with it reads a control through the `RuntimeControl` protocol alone.
"""

from __future__ import annotations

from typing import Any


class ForwardingControl:
    """A RuntimeControl that forwards to `inner` and lists the operations asked of it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.asked: list[str] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if callable(value):
            self.asked.append(name)
        return value

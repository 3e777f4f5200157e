"""A kernel's own capture, recorded by its server, and taken again once when the server
finds bytes it names gone (`CaptureLost`).

A kernel captures before its server opens the checkpoint's write intent. On a bounded
cache in front of an object store, a chunk the kernel reused (its memo, or a kept
component's pickle) may have been evicted here and then collected from the bucket in that
gap. The server refuses such a capture; the kernel forgets what it remembered as stored and
captures again from nothing, which writes those chunks' bytes again.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from ditto_jupyter.core.errors import CaptureLost
from ditto_jupyter.kernel.capture.chunks import forget_chunks

Captured = TypeVar("Captured")
Recorded = TypeVar("Recorded")


def record_own_capture(
    take: Callable[[bool], Captured], record: Callable[[Captured], Recorded]
) -> tuple[Captured, Recorded]:
    """`take(False)` (the capture as the kernel would take it), then `record` it; on
    CaptureLost, forget the chunk memo and record `take(True)` (a whole capture from
    nothing) instead. A second CaptureLost is the caller's to report."""
    captured = take(False)
    try:
        return captured, record(captured)
    except CaptureLost as error:
        print(f"ditto: capturing again: {error.message}", file=sys.stderr)
        forget_chunks()
        captured = take(True)
        return captured, record(captured)

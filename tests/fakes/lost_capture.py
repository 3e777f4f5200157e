"""A test double for the server's check that a kernel's own capture still has its bytes
(`Replication.require_backed`): it refuses the first capture as the real check does when
a collection of the bucket deleted chunks the capture names, and passes the rest on.

The real condition needs a bounded cache and a second server collecting the bucket of a
real gateway (tests/control/test_bucket_gc.py reaches it); this double lets a test of the
REST answer and of the kernel's retry refuse one capture without staging that race.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ditto_jupyter.core.errors import CaptureLost


class RefusesFirstCapture:
    """Stands in for `Replication.require_backed`: CaptureLost once, then the real check."""

    def __init__(self, real: Callable[[Sequence[str]], None]) -> None:
        self.real = real
        self.asked: list[list[str]] = []

    def __call__(self, manifest_ids: Sequence[str]) -> None:
        self.asked.append(list(manifest_ids))
        if len(self.asked) == 1:
            raise CaptureLost(
                f"the capture {', '.join(manifest_ids)} lists 1 chunk(s) whose bytes are gone "
                "(a test double refused it): capture again, which stores them again"
            )
        self.real(manifest_ids)

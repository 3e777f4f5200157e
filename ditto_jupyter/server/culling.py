"""The one culling policy: which kernels jupyter-server's idle culler must leave alone.

jupyter-server culls kernels idle for `cull_idle_timeout` seconds. Two parts of the
extension know better for some kernels, and each registers a rule here:

- the warm kernel pool: its kernels are idle by design, and culling one only makes the
  pool start another (`KernelPool`);
- the idle pauser: a runtime's kernel is paused (checkpointed, then stopped), never culled
  with its variables (`IdlePauser`).

Dead kernels, and kernels no rule claims (a kernel of no runtime), are culled as before.
The hook that asks this policy lives with every other patch in `jupyter_hooks`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class CullingPolicy:
    """The rules that spare kernels from jupyter-server's idle culler, and why."""

    def __init__(self, kernel_manager: Any) -> None:
        self.kernel_manager: Any = kernel_manager  # jupyter_server is untyped
        self._rules: list[tuple[str, Callable[[str], bool]]] = []

    @property
    def active(self) -> bool:
        """Whether any rule is registered (none: the culler needs no hook)."""
        return bool(self._rules)

    def spare(self, why: str, spares: Callable[[str], bool]) -> None:
        """Leave kernels for which `spares(kernel_id)` holds to their owner (`why` says who)."""
        self._rules.append((why, spares))

    def reason_to_spare(self, kernel_id: str) -> str | None:
        """Why the culler must leave this kernel alone, or None: cull it as usual (a kernel
        that is dead or gone, or one no rule claims)."""
        manager = self.kernel_manager
        if kernel_id not in manager:
            return None
        if getattr(manager.get_kernel(kernel_id), "execution_state", None) == "dead":
            return None
        for why, spares in self._rules:
            try:
                if spares(kernel_id):
                    return why
            except Exception as error:  # a rule that cannot tell: spare the kernel, say why
                log.warning(
                    "ditto_jupyter: culling rule %r failed for kernel %s: %s", why, kernel_id, error
                )
                return why
        return None

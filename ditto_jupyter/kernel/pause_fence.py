"""A pause's fence and seal, inside the kernel being paused: no cell is lost to a pause.

A pause captures the kernel, snapshots its workspace, then stops it. A cell sent while
that runs queues behind the capture and would run just before the kernel stops, its work
lost. So the server fences the kernel before it captures (`set_fence`: from now on every
cell counts) and, once the snapshot is taken, asks it to seal (`seal`). That call queues
behind any cell that arrived, so it sees it: when a cell ran since the fence, the kernel
stays as it is and the pause is given up (it is tried again later); otherwise the kernel
is sealed, and refuses every cell with one line until it is gone. A pause that fails after
the seal undoes it (`unseal`).

`seal_now` seals a kernel that paused itself (`%pause`): the cells queued behind the one
running the magic would otherwise run just before the kernel stops.

The server calls these by name (`ditto_jupyter.hosts.kernel_calls`); a host's own call is
an empty cell with user expressions, which IPython neither counts nor transforms.
"""

from __future__ import annotations

from typing import Any

from ditto_jupyter.kernel.capture import kernel_hooks

#: What a sealed kernel answers a cell with (`{runtime}`: the runtime's id).
REFUSAL = (
    "ditto: runtime {runtime} is pausing: this cell did not run. Resume the runtime, then "
    "run the cell again."
)


class RuntimePausing(Exception):
    """A cell sent to a sealed kernel: shown as one line, not a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


class _Fence:
    """The kernel's count of cells run, the fence a pause set, and the seal."""

    def __init__(self) -> None:
        self.cells = 0
        self.fence: int | None = None
        self.sealed_for: str | None = None  # the runtime id the seal names
        self.installed = False

    def install(self) -> None:
        """Count every cell that runs and refuse cells while sealed (once per kernel)."""
        if self.installed:
            return
        shell = _shell()
        kernel_hooks.register_event(shell, "pre_execute", self._count)
        kernel_hooks.insert_input_transformer(shell, self._refuse_when_sealed)
        kernel_hooks.on_removal("the pause fence", self._forget)
        self.installed = True

    def _forget(self) -> None:
        self.installed = False
        self.fence = None
        self.sealed_for = None

    def _count(self) -> None:
        self.cells += 1

    def _refuse_when_sealed(self, lines: list[str]) -> list[str]:
        if self.sealed_for is None or not "".join(lines).strip():
            return lines
        return ["raise __import__('ditto_jupyter.kernel.pause_fence', fromlist=['_']).refusal()\n"]


_state = _Fence()


def _shell() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an IPython kernel")
    return shell


def refusal() -> RuntimePausing:
    """The error a cell sent to a sealed kernel raises instead of running."""
    return RuntimePausing(REFUSAL.format(runtime=_state.sealed_for))


def set_fence() -> bool:
    """A pause's capture comes next: count every cell from here on."""
    _state.install()
    _state.fence = _state.cells
    return True


def seal(runtime_id: str) -> bool:
    """Refuse every cell from now on, when none ran since the fence; False (nothing sealed,
    the fence gone) when one did, or when no fence was set."""
    fenced = _state.fence is not None and _state.fence == _state.cells
    _state.fence = None
    if fenced:
        _state.sealed_for = runtime_id
    return fenced


def unseal() -> bool:
    """Run cells again (the pause that sealed this kernel failed after)."""
    _state.sealed_for = None
    _state.fence = None
    return True


def seal_now(runtime_id: str) -> None:
    """Refuse every cell after the running one (this kernel paused itself)."""
    _state.install()
    _state.fence = None
    _state.sealed_for = runtime_id


def sealed() -> bool:
    """Whether this kernel refuses cells (tests)."""
    return _state.sealed_for is not None

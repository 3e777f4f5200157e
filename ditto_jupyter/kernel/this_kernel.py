"""This kernel's runtime control: the one owner that the magics, widgets and helpers ask.

A kernel serves one runtime at a time and reaches it through one `RuntimeControl` (the
server's REST API, or an in-process RuntimeService when no server started the kernel).
`KernelControl` holds it, with what goes with it: the notebook's folder (where the
kernels of the runtime run without a server) and the namespace manifest of the head as
far as this kernel knows. It is made on first use, so loading the magics is free, and
dropped when the server's warm pool hands the kernel to a runtime (`adopt`), so the next
use builds it from the new identity.

Importing this module is cheap (adoption, a call on the checkout path, uses it).
Loading the magics installs their `KernelControl` here. In a kernel with no magics
loaded, a kernel a server started still finds its control from its environment
(`control`). Nobody searches IPython's magics registry for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ditto_jupyter.core.errors import InvalidRequest

if TYPE_CHECKING:
    from ditto_jupyter.kernel.runtime_control import RuntimeControl


class KernelControl:
    """The runtime control of this kernel, built on first use by `factory`."""

    def __init__(
        self,
        factory: Callable[[KernelControl], RuntimeControl],
        *,
        notebook_folder: Path | None = None,
    ) -> None:
        self._factory = factory
        self._control: RuntimeControl | None = None
        #: With no server, the notebook's folder is where the kernel was when it loaded us.
        self.notebook_folder = notebook_folder or Path.cwd()
        #: The namespace manifest of this kernel's head, as far as this kernel knows.
        self.last_manifest: str | None = None
        #: Called when a host restored this kernel from outside (restore, undo, checkout,
        #: resume), with the `%autocheckpoint` setting the restored capture was taken under.
        self.on_restore: list[Callable[[int | None], None]] = []
        #: This kernel's `%autocheckpoint` setting: how many it keeps, None while off (the
        #: magics' hook answers). Every capture records it, so a resumed or checked-out
        #: kernel takes it up again (`restored`).
        self.autocheckpoint_keep: Callable[[], int | None] = lambda: None
        #: The first cell whose automatic checkpoint was not recorded, when no checkpoint
        #: holds this kernel's state since (the magics' hook answers; every capture says it).
        self.unrecorded_cell: Callable[[], int | None] = lambda: None

    @property
    def control(self) -> RuntimeControl:
        """The runtime control, created on first use."""
        if self._control is None:
            self._control = self._factory(self)
        return self._control

    @property
    def built(self) -> RuntimeControl | None:
        """The runtime control if it was made (None: nothing to shut down)."""
        return self._control

    def adopt(self, notebook_folder: Path) -> None:
        """The kernel was handed to a runtime (the server's warm pool): start afresh there.

        The control is built again, on next use, from the new environment.
        """
        self.notebook_folder = notebook_folder
        self._control = None
        self.last_manifest = None


_installed: KernelControl | None = None


def install(kernel_control: KernelControl) -> None:
    """Make `kernel_control` this kernel's (the magics do, when they are loaded)."""
    global _installed
    _installed = kernel_control


def installed() -> KernelControl | None:
    """The installed KernelControl (None until the magics are loaded)."""
    return _installed


def control() -> RuntimeControl:
    """This kernel's runtime control: the magics', else the server's from the environment.

    InvalidRequest, with what to do, when the kernel has neither.
    """
    if _installed is not None:
        return _installed.control
    # Imported here: adoption and `workspace()` with its variable set need none of it.
    from ditto_jupyter.kernel.server_control import server_control_from_environment

    server = server_control_from_environment()
    if server is None:
        raise InvalidRequest(
            "this kernel has no ditto runtime: run `%load_ext ditto_jupyter` first, or start "
            "it from a Jupyter server with the ditto_jupyter extension"
        )
    return server


def runtime_id() -> str | None:
    """The runtime this kernel's magics serve (None when no magics are loaded)."""
    return _installed.control.runtime_id if _installed is not None else None


def autocheckpoint_keep() -> int | None:
    """This kernel's `%autocheckpoint` setting (how many kept; None: off or no magics)."""
    return _installed.autocheckpoint_keep() if _installed is not None else None


def unrecorded_cell() -> int | None:
    """The first cell whose automatic checkpoint was not recorded since this kernel's state
    was last a checkpoint's (None: none, or no magics)."""
    return _installed.unrecorded_cell() if _installed is not None else None


def restored(manifest_id: str | None, autocheckpoint_keep: int | None = None) -> None:
    """A host restored this kernel's namespace from `manifest_id` (a restore or an undo
    asked over REST, a checkout or resume): the head is that manifest now, as far as this
    kernel knows, and whoever follows the kernel's state (`%autocheckpoint`) is told, with
    the setting that capture was taken under."""
    if _installed is None:
        return
    _installed.last_manifest = manifest_id
    for listener in list(_installed.on_restore):
        listener(autocheckpoint_keep)


def adopt(notebook_folder: Path) -> None:
    """The kernel now serves another runtime: drop the control the magics made, if any."""
    if _installed is not None:
        _installed.adopt(notebook_folder)

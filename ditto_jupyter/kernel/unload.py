"""`%unload_ext ditto_jupyter`: the extension leaves the kernel as it found it.

Automatic checkpoints stop (what they recorded stays), the magics go, and every hook of
ours comes out of IPython, ipykernel and matplotlib (`kernel_hooks`).
"""

from __future__ import annotations

from IPython.core.interactiveshell import InteractiveShell

from ditto_jupyter.kernel.capture import kernel_hooks
from ditto_jupyter.kernel.history_magics import HistoryMagics
from ditto_jupyter.kernel.magics import DittoMagics


def unload_ipython_extension(shell: InteractiveShell) -> list[str]:
    """`%unload_ext ditto_jupyter`: automatic checkpoints stop (what they recorded stays),
    the magics go, and every hook of ours comes out of IPython, ipykernel and matplotlib
    (`kernel_hooks`). Returns what could not be taken out (each is logged)."""
    ours = (DittoMagics, HistoryMagics)
    for magics in list(shell.magics_manager.registry.values()):
        if isinstance(magics, DittoMagics) and magics.autocheckpointer.enabled:
            magics.autocheckpointer.turn_off()
    for table in shell.magics_manager.magics.values():
        for name, bound in list(table.items()):
            if isinstance(getattr(bound, "__self__", None), ours):
                del table[name]
    for key, magics in list(shell.magics_manager.registry.items()):
        if isinstance(magics, ours):
            del shell.magics_manager.registry[key]
    return kernel_hooks.remove_all()

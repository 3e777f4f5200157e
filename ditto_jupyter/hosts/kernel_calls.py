"""The in-kernel functions the hosts call, by name (`module:function`).

They run inside a kernel and live in `ditto_jupyter.kernel`; the hosts, which run
outside, only name them (a host never imports kernel code). `dispatch_call` in
`ditto_jupyter.kernel` resolves a name inside the kernel.
"""

from __future__ import annotations

from typing import Final

#: Capture the kernel's namespace into the blob store (`kernel_capture`).
CAPTURE: Final = "ditto_jupyter.kernel.capture:kernel_capture"
#: Replace the kernel's namespace with a captured one (`kernel_restore`).
RESTORE: Final = "ditto_jupyter.kernel.capture:kernel_restore"
#: Import the capture code and open the blob store, before the first checkpoint.
WARM_UP: Final = "ditto_jupyter.kernel.capture:warm_up"
#: A kernel the server did not start: import the capture code, learn the workspace.
PREPARE_KERNEL: Final = "ditto_jupyter.kernel.workspace:prepare_kernel"
#: A pooled kernel learns which runtime it now serves.
ADOPT_RUNTIME: Final = "ditto_jupyter.kernel.adoption:adopt_runtime"
#: A pause's capture comes next: the kernel counts every cell from here on.
FENCE: Final = "ditto_jupyter.kernel.pause_fence:set_fence"
#: Refuse every cell from now on, unless one ran since the fence (then False).
SEAL: Final = "ditto_jupyter.kernel.pause_fence:seal"
#: Run cells again (a pause failed after it sealed the kernel).
UNSEAL: Final = "ditto_jupyter.kernel.pause_fence:unseal"

#: Wait for the kernel's `%autocheckpoint` write-behind (before an undo plans).
SETTLE: Final = "ditto_jupyter.kernel.write_behind:settle"

#: Every name above (a test checks each one resolves to a function in the kernel code).
ALL: Final = (
    CAPTURE,
    RESTORE,
    WARM_UP,
    PREPARE_KERNEL,
    ADOPT_RUNTIME,
    FENCE,
    SEAL,
    UNSEAL,
    SETTLE,
)

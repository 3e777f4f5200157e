"""A kernel spec whose kernel dies at every start, before it answers: an import error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: The name of the kernel spec `write_dying_kernel_spec` writes.
DYING_KERNEL = "dies-at-start"


def write_dying_kernel_spec(kernels: Path) -> str:
    """Write the spec into a `kernels` folder of a Jupyter data path; its name."""
    spec = kernels / DYING_KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", "import no_such_module_for_ditto", "-f", "{connection_file}"]
    document = {"argv": argv, "display_name": "Dies at start", "language": "python"}
    spec.joinpath("kernel.json").write_text(json.dumps(document))
    return DYING_KERNEL

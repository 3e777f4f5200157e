"""This kernel process's nonce: drawn once when ditto_jupyter's kernel code is first
imported in a process, reported in every capture (`ContextCapture.kernel_process`).

Jupyter's restarter revives a dead kernel under the same kernel id, and its execution
count starts again from 1, so "kernel id and execution count" can repeat after a restart;
this nonce cannot. Checkpointing reuses a workspace snapshot only on a mark that names it.
"""

from __future__ import annotations

import uuid
from typing import Final

#: A random id of this process (a new process, a restarted kernel, draws another).
KERNEL_PROCESS: Final = uuid.uuid4().hex

"""Kernel entry points: what a kernel host calls inside a kernel (through `KernelHost.call`).

The kernel's own blob store is opened once per process and root, and reused by every later
checkpoint and restore of that kernel, on every thread (each capture is a bulk write of it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.kernel import this_kernel
from ditto_jupyter.kernel.capture.capturing import capture_namespace
from ditto_jupyter.kernel.capture.restoring import restore_namespace
from ditto_jupyter.kernel.capture.rules import ipython_shell
from ditto_jupyter.kernel.write_behind import flush_all


def _user_namespace() -> dict[str, object]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an IPython kernel")
    return shell.user_ns  # type: ignore[no-any-return]


_stores: dict[str, BlobStore] = {}


def open_blob_store(blob_root: str | os.PathLike[str]) -> BlobStore:
    """The kernel's own BlobStore on a shared root (opened once per process)."""
    given = str(blob_root)
    store = _stores.get(given)  # as given: no path resolution for every cell's checkpoint
    if store is None:
        key = str(Path(blob_root).resolve())
        store = _stores.get(key)
        if store is None:
            store = _stores[key] = BlobStore(key)
        _stores[given] = store
    return store


def warm_up(blob_root: str) -> bool:
    """Import the capture machinery and open the store ahead of the first checkpoint."""
    open_blob_store(blob_root)
    return True


_last_timing: dict[str, float] = {}


def last_timing() -> dict[str, float]:
    """Seconds the last kernel_capture / kernel_restore of this kernel took inside it."""
    return dict(_last_timing)


def kernel_capture(
    blob_root: str, previous_manifest_id: str | None = None, runtime_id: str | None = None
) -> dict[str, Any]:
    """Capture this kernel's namespace for `runtime_id`; the ContextCapture as JSON."""
    started = time.perf_counter()
    namespace = _user_namespace()
    flush_all()  # `%autocheckpoint`'s write-behind first: the cells' checkpoints come first
    result = capture_namespace(
        namespace,
        open_blob_store(blob_root),
        previous_manifest_id=previous_manifest_id,
        runtime_id=runtime_id,
    )
    _last_timing["capture_s"] = time.perf_counter() - started
    shell = ipython_shell(namespace)
    if shell is not None:  # idle: the last finished cell is one before the next count
        result = result.model_copy(update={"execution_count": shell.execution_count - 1})
    return result.model_dump(mode="json")


def kernel_restore(blob_root: str, manifest_id: str | None) -> list[dict[str, Any]]:
    """Restore this kernel's namespace in place; the unrestorable values as JSON."""
    started = time.perf_counter()
    flush_all()  # `%autocheckpoint`'s write-behind first: the cells' checkpoints come first
    lost = restore_namespace(_user_namespace(), open_blob_store(blob_root), manifest_id)
    _last_timing["restore_s"] = time.perf_counter() - started
    this_kernel.restored(manifest_id)  # `%autocheckpoint` follows the kernel's new state
    return [entry.model_dump(mode="json") for entry in lost]

"""Kernel entry points: what a kernel host calls inside a kernel (through `KernelHost.call`).

The kernel's own blob store is opened once per process and root, and reused by every later
checkpoint and restore of that kernel, on every thread (each capture is a bulk write of it).
Each capture follows the one before it (`capture_following`, the change journal), and runs
with the garbage collector paused (`collection_paused`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.models import ContextCapture
from ditto_jupyter.kernel import this_kernel
from ditto_jupyter.kernel.capture.capturing import capture_with_snapshot
from ditto_jupyter.kernel.capture.incremental import CaptureBase
from ditto_jupyter.kernel.capture.journal import ChangeJournal, journal_of
from ditto_jupyter.kernel.capture.manifest import AUTOCHECKPOINT_KEY, load_manifest
from ditto_jupyter.kernel.capture.pickling import dumps_so_far
from ditto_jupyter.kernel.capture.restoring import restore_namespace
from ditto_jupyter.kernel.capture.rules import ipython_shell
from ditto_jupyter.kernel.capture.thread_activity import ThreadActivity
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
#: The last capture of each namespace, whoever took it (the server's call, a magic,
#: `%autocheckpoint`, the in-process control): the one base the next capture follows (by
#: id; the base holds the namespace's values, the namespace is checked to be the same dict).
_bases: dict[int, tuple[dict[str, object], CaptureBase]] = {}


def take_base(namespace: dict[str, object]) -> CaptureBase | None:
    """The last capture of `namespace`, taken out: used once, so a capture that fails
    leaves none, and the next one is whole."""
    held = _bases.pop(id(namespace), None)
    return held[1] if held is not None and held[0] is namespace else None


def keep_base(namespace: dict[str, object], base: CaptureBase | None) -> None:
    """Make `base` the capture the next capture of `namespace` follows (None: whole)."""
    if base is None:
        _bases.pop(id(namespace), None)
    else:
        _bases[id(namespace)] = (namespace, base)


def capture_following(
    namespace: dict[str, object],
    blobs: BlobStore,
    *,
    previous_manifest_id: str | None = None,
    runtime_id: str | None = None,
    whole: bool = False,
) -> ContextCapture:
    """Capture `namespace`, following the last capture of it taken here (by any path):
    what the change journal cannot vouch for is pickled again, the rest kept as stored
    (whole the first time, with `whole`, after a restore, when code ran that no cell showed,
    inside a cell that ran code of its own, outside IPython)."""
    pickles = dumps_so_far()
    journal = journal_of(namespace)
    base = take_base(namespace)
    if whole or (journal is not None and not journal.running_cell_is_quiet()):
        base = None
    changes = changes_since(journal, base)
    mark = journal.serial if journal is not None else 0
    snapshot, capture = capture_with_snapshot(
        namespace,
        blobs,
        previous_manifest_id=None if whole else previous_manifest_id,
        runtime_id=runtime_id,
        base=base,
        touched=changes.touched,
        figures_reached=changes.reached,
        fresh=changes.fresh,
        mark=mark,
    )
    if journal is not None and snapshot.base is not None:
        snapshot.base.foreign = changes.foreign
        keep_base(namespace, snapshot.base)
    _last_timing["pickles"] = float(dumps_so_far() - pickles)
    return capture


class Changes(NamedTuple):
    """What may have changed since a capture, by the journal."""

    touched: set[str] | None  # the names the cells can have touched (None: anything)
    reached: list[Any]  # the figures pyplot handed to them
    foreign: ThreadActivity  # what may run behind the cells' back now
    fresh: set[str]  # touched names bound anew before any read: their old values unreached


def changes_since(journal: ChangeJournal | None, base: CaptureBase | None) -> Changes:
    """What may have changed since `base` by the journal (anything, when code ran behind
    the cells' back since `base` was taken)."""
    if journal is None:
        return Changes(None, [], ThreadActivity(), set())
    foreign = journal.foreign_activity()
    if base is None or not base.usable() or not foreign.quiet_since(base.foreign):
        return Changes(None, [], foreign, set())
    touched, reached = journal.since(base.mark)
    fresh = journal.fresh_since(base.mark) if touched is not None else set()
    return Changes(touched, reached, foreign, fresh)


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (it runs at the next allocation after).

    A capture allocates thousands of short-lived objects (pickler memos, manifests); each
    700 of them would start a collection of the young generation, now and then of all
    generations, which in a kernel with pandas loaded walks hundreds of thousands of objects
    while the cell waits. Refcounting frees the temporaries as before; what survives is
    looked at once, afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def last_timing() -> dict[str, float]:
    """Seconds the last kernel_capture / kernel_restore of this kernel took inside it, and
    how many pickles the last capture by any path but `%autocheckpoint` made (`pickles`:
    streams, each value or pod one)."""
    return dict(_last_timing)


def kernel_capture(
    blob_root: str, previous_manifest_id: str | None = None, runtime_id: str | None = None
) -> dict[str, Any]:
    """Capture this kernel's namespace for `runtime_id`; the ContextCapture as JSON.

    It follows the capture before it (`capture_following`): only what the cells since can
    have changed is pickled again."""
    started = time.perf_counter()
    namespace = _user_namespace()
    flush_all()  # `%autocheckpoint`'s write-behind first: the cells' checkpoints come first
    with collection_paused():
        result = capture_following(
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


def autocheckpoint_setting(blobs: BlobStore, manifest_id: str | None) -> int | None:
    """The `%autocheckpoint` setting a capture was taken under (None: off, or unknown)."""
    if manifest_id is None:
        return None
    keep = load_manifest(blobs, manifest_id).get(AUTOCHECKPOINT_KEY)
    return keep if isinstance(keep, int) and not isinstance(keep, bool) and keep >= 1 else None


def kernel_restore(
    blob_root: str, manifest_id: str | None, arrivals: str | None = None
) -> list[dict[str, Any]]:
    """Restore this kernel's namespace in place; the unrestorable values as JSON.

    `arrivals`: the arrival log of the server's fetch of the checkpoint, still under way:
    what the store lacks is read from it as it lands (`BlobStore.reading_arrivals`)."""
    started = time.perf_counter()
    flush_all()  # `%autocheckpoint`'s write-behind first: the cells' checkpoints come first
    with open_blob_store(blob_root).reading_arrivals(arrivals) as blobs:
        lost = restore_namespace(_user_namespace(), blobs, manifest_id)
        keep = autocheckpoint_setting(blobs, manifest_id)
    _last_timing["restore_s"] = time.perf_counter() - started
    this_kernel.restored(manifest_id, keep)  # `%autocheckpoint` follows the kernel's state
    return [entry.model_dump(mode="json") for entry in lost]

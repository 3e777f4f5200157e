"""The kernel's memory: everything the capture keeps between one call and the next, in one
object (`MEMORY`, one per process: a kernel runs one shell, and what is per namespace is
keyed by it), with one `forget()`.

`forget()` is called wherever what the captures remembered may no longer hold: a restore
replaced values in place (`restore_namespace`), or the store lost chunks the memo named (a
capture that met `BlobNotFound`, a capture the server refused, `CaptureLost`, a write-behind
that failed on either). It drops exactly what such a change makes wrong:

- every capture base goes stale (the generation moves on; a base stays until taken, so the
  path that finds it knows a restore came between);
- the chunk memo (fingerprint -> chunk name) and the manifests it learned are emptied.

Everything else is kept, because no restore or lost chunk makes it wrong: what is derived
from classes or loaded modules (type verdicts, the library data and its look-ups), the
open stores, the figures' change stamps, the change journals (attached to their shells),
the record of hooks put in (`kernel_hooks` takes them out), counters, timings.

What stays module-level elsewhere is no memory: compiled patterns, constant tables, the
per-thread context of an unpickling under way (`pickling`, set and reset by a `with`
block), and `functools.cache`d thread pools.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ditto_jupyter.kernel.capture.library_data import LibraryData

if TYPE_CHECKING:
    from ditto_jupyter.core.blobs import BlobStore
    from ditto_jupyter.kernel.capture.figures.pyplot_access import FigureAccess
    from ditto_jupyter.kernel.capture.incremental import CaptureBase
    from ditto_jupyter.kernel.capture.journal import ChangeJournal


class ChunkMemo:
    """Fingerprint -> BLAKE3 chunk name, the manifests learned, and the chunks a deferred
    writer is writing now (`chunks`); `lock` guards all three."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: dict[str, str] = {}
        self.seeded: set[str] = set()  # manifests (captured or restored here) learned
        self.in_flight: set[str] = set()  # not forgotten: writers under way land them

    def forget(self) -> None:
        """Empty the memo (a chunk it named may be gone)."""
        with self.lock:
            self.names.clear()
            self.seeded.clear()


class FigureStamps:
    """The watched figures' wrapped callbacks and the serial of each one's last change
    (`figure_watch`)."""

    def __init__(self) -> None:
        self.serials = itertools.count(1)
        self.last = 0
        #: figure -> the wrapper installed as its stale_callback
        self.wrappers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        #: figure -> serial of its last change
        self.stamps: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


class HookRecord:
    """The hooks put into code the kernel does not own, and how to take each out
    (`kernel_hooks`)."""

    def __init__(self) -> None:
        #: How to take out each hook put in, oldest first: (what it is, the undo).
        self.undos: list[tuple[str, Callable[[], object]]] = []
        #: figure -> (the wrapper installed as its stale_callback, the callback it replaced)
        self.figures: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()
        #: The access the pyplot wrappers tell (the shell's journal's; `pyplot_access`).
        self.figure_access: list[FigureAccess] = []


class KernelMemory:
    """What the kernel side keeps between calls (see the module)."""

    def __init__(self) -> None:
        #: Restores so far: a capture base of an older generation is stale (`incremental`).
        self.generation = 0
        self.chunks = ChunkMemo()
        #: The last capture of each namespace, by id (`kernel_entry.take_base`).
        self.bases: dict[int, tuple[dict[str, object], CaptureBase]] = {}
        #: Each shell's change journal, by id of the shell (`journal.journal_of`).
        self.journals: dict[int, ChangeJournal] = {}
        #: The kernel's blob stores, by root as given and resolved (`open_blob_store`).
        self.stores: dict[str, BlobStore] = {}
        #: Seconds and pickles of the last kernel capture / restore (`last_timing`).
        self.timing: dict[str, float] = {}
        #: Streams pickled so far (`pickling.dumps_so_far`): a thread-safe serial.
        self.dumps = itertools.count()
        self.dumped = 0
        #: The library data (`library_data`) and, per component id set, its library
        #: objects (`library_held`): for the map they were looked up in, the last capture's.
        self.library = LibraryData()
        self.library_hits: tuple[dict[int, object] | None, dict[int, tuple[set[int], list[int]]]]
        self.library_hits = (None, {})
        #: Library classes by the modules loaded, and class verdicts by kinds (`atoms`).
        self.library_types: dict[tuple[str, ...], tuple[type, ...]] = {}
        self.verdicts: dict[tuple[type, ...], dict[type, int]] = {}
        self.figures = FigureStamps()
        self.hooks = HookRecord()

    def forget(self) -> None:
        """A restore replaced values in place, or the store lost chunks the memo named:
        every capture base is stale from here, and the chunk memo is empty."""
        self.generation += 1
        self.chunks.forget()


#: The kernel's memory (one per process).
MEMORY = KernelMemory()

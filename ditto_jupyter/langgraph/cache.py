"""The newest checkpoint of each thread of a runtime, kept in the kernel: `get_tuple` of a
thread's newest checkpoint is answered here, without a read of the store.

Why it stays true to the store: the kernel is the only writer of its runtime's threads.
The `self/langgraph/...` routes take the runtime's own token (the owner can only list the
threads), a checkout's child is a new runtime with threads of its own, and a paused
runtime's kernel is gone (the resumed one starts with an empty cache). So every write to a
thread passes through a `DittoSaver` of this kernel, which tells this cache (one per
runtime and store in the process, shared by every saver of it):

- a thread's entry is only made from what the store answered (`fill`), then kept up to
  date by this kernel's puts and writes (`put`, `put_writes`), never guessed: a put
  while the entry is unknown leaves it unknown;
- a put whose checkpoint had pending writes stored already, or one that names a channel
  version the cached checkpoint does not hold (a fork from an older checkpoint), or writes
  to a checkpoint other than the newest, make the entry unknown again;
- `delete_thread`, `copy_thread` (its target), `prune` forget the threads they name,
  `delete_for_runs` the whole runtime, and so does a write that failed (the store may or
  may not have it);
- a version names one value (the store keeps the first value stored at a version, and the
  saver's versions carry a random suffix), so an unchanged version keeps its cached value.

Values are kept serialized, as the store keeps them, and read back on every hit, so a
caller that changes what it got changes nothing here.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

#: A serialized value: the serializer's type and bytes.
Serialized = tuple[str, bytes]
#: A pending write: task id, task path, idx, channel, value.
CachedWrite = tuple[str, str, int, str, Serialized]

#: What `lookup` answers for a thread not known here (None means: no checkpoint).
UNKNOWN: Any = object()


@dataclass(frozen=True)
class CachedCheckpoint:
    """A namespace's newest checkpoint as the store holds it."""

    checkpoint_id: str
    parent_checkpoint_id: str | None
    body: Serialized
    #: channel -> (version, value) for every version the checkpoint names that the store
    #: holds a value of (an `empty` one included); a version without one is left out.
    values: dict[str, tuple[str, Serialized]]
    versions: dict[str, str]
    metadata: bytes
    writes: tuple[CachedWrite, ...]


_Key = tuple[str, str]


class ThreadCache:
    """The newest checkpoint of each (thread, namespace) this kernel knows (see module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._newest: dict[_Key, CachedCheckpoint | None] = {}
        #: Counts the writes told here: a read of the store fills only when none came
        #: while it ran (the write may have landed before or after the read saw the store).
        self._generation = 0

    def generation(self) -> int:
        """Taken before a read of the store whose answer `fill` gets."""
        with self._lock:
            return self._generation

    def lookup(self, thread_id: str, checkpoint_ns: str) -> CachedCheckpoint | None:
        """The namespace's newest checkpoint, None when it has none, UNKNOWN when not
        known here."""
        with self._lock:
            return self._newest.get((thread_id, checkpoint_ns), UNKNOWN)

    def fill(
        self,
        thread_id: str,
        checkpoint_ns: str,
        newest: CachedCheckpoint | None,
        generation: int,
    ) -> None:
        """What the store answered for the namespace's newest checkpoint, read after
        `generation` was taken (kept only if no write was told here since)."""
        with self._lock:
            if generation == self._generation:
                self._newest[(thread_id, checkpoint_ns)] = newest

    def put(
        self,
        thread_id: str,
        checkpoint_ns: str,
        stored: CachedCheckpoint,
        new_values: dict[str, tuple[str, Serialized]],
        *,
        had_writes: bool,
    ) -> None:
        """A checkpoint this kernel stored; `stored.values` holds none yet: the values new
        in it are `new_values`, the others are the cached newest's at the same version."""
        key = (thread_id, checkpoint_ns)
        with self._lock:
            self._generation += 1
            known = self._newest.get(key, UNKNOWN)
            if known is UNKNOWN:
                return
            if had_writes:
                del self._newest[key]
                return
            if known is not None and stored.checkpoint_id < known.checkpoint_id:
                return  # an older one: the newest stays
            same = known is not None and known.checkpoint_id == stored.checkpoint_id
            before = known.values if known is not None else {}
            values: dict[str, tuple[str, Serialized]] = {}
            for channel, version in stored.versions.items():
                held = before.get(channel)
                if held is not None and held[0] == version:
                    values[channel] = held  # a version names the value stored first
                elif channel in new_values and new_values[channel][0] == version:
                    values[channel] = new_values[channel]
                else:  # neither new here nor held by the newest: not known here
                    del self._newest[key]
                    return
            writes = known.writes if same and known is not None else ()
            self._newest[key] = replace(stored, values=values, writes=writes)

    def put_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        writes: list[CachedWrite],
        *,
        replace_existing: bool,
    ) -> None:
        """Pending writes this kernel stored for a checkpoint."""
        key = (thread_id, checkpoint_ns)
        with self._lock:
            self._generation += 1
            known = self._newest.get(key, UNKNOWN)
            if known is UNKNOWN or known is None:
                # writes to a namespace with no checkpoint yet: its first put must not
                # take them for none
                self._newest.pop(key, None)
                return
            if known.checkpoint_id != checkpoint_id:
                # an older checkpoint's (its writes are not cached) or a newer one's that is
                # not stored yet: whose writes a later put would not know
                if checkpoint_id > known.checkpoint_id:
                    del self._newest[key]
                return
            merged = {(write[0], write[2]): write for write in known.writes}
            for write in writes:
                if replace_existing or (write[0], write[2]) not in merged:
                    merged[(write[0], write[2])] = write
            ordered = sorted(merged.values(), key=lambda write: (write[1], write[0], write[2]))
            self._newest[key] = replace(known, writes=tuple(ordered))

    def forget(self, thread_ids: list[str] | None) -> None:
        """Forget these threads (every namespace), or every thread (None)."""
        with self._lock:
            self._generation += 1
            if thread_ids is None:
                self._newest.clear()
                return
            going = set(thread_ids)
            for key in [key for key in self._newest if key[0] in going]:
                del self._newest[key]


_caches: dict[tuple[str, str], ThreadCache] = {}
_caches_lock = threading.Lock()


def cache_of(runtime_id: str, place: str) -> ThreadCache:
    """The cache of a runtime's threads in the store at `place`, shared by every saver of
    this process."""
    with _caches_lock:
        return _caches.setdefault((runtime_id, place), ThreadCache())

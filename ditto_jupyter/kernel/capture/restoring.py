"""Restore a namespace in place from a kernel-namespace manifest.

Restore verifies the manifest's signature and every chunk it reads before unpickling, and
reads everything before touching the namespace: a failed restore changes nothing. In place,
chunks that live arrays already hold are copied from memory, and a big writable buffer whose
variable still holds a same-sized, non-overlapping one is patched chunk by chunk instead of
allocated afresh (fresh memory is the slow part of restoring large arrays).

Choices where the brief was silent: identity is kept for mutable objects (immutable values
such as strings, bytes and tuples shared by two variables come back equal, not identical);
numpy views come back as copies (numpy's own pickling); a variable the checkpoint could not
keep stays when its live value still has the recorded type (a database connection keeps
working), otherwise it is removed; pyplot's figures come back under their numbers
(`pyplot_state`).
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import mmap
from dataclasses import dataclass, field
from typing import Any

from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobIntegrityError, BlobStore
from ditto_jupyter.core.models import UnrestorableValue
from ditto_jupyter.kernel.capture import pyplot_state
from ditto_jupyter.kernel.capture.chunks import fingerprint_chunks, read_chunks, remember_manifest
from ditto_jupyter.kernel.capture.incremental import namespace_replaced
from ditto_jupyter.kernel.capture.manifest import (
    BUFFER_BYTEARRAY,
    BUFFER_BYTES,
    BUFFER_PICKLE,
    load_manifest,
)
from ditto_jupyter.kernel.capture.pickling import (
    NamespaceUnpickler,
    Pickled,
    loading_pods,
    pickle_values,
    restoring_into,
)
from ditto_jupyter.kernel.capture.rules import (
    failure_reason,
    hidden_names,
    is_state_name,
    type_name,
)

#: Buffers at least this big are restored into anonymous memory maps (no zero-fill pass)
#: instead of bytearrays.
MMAP_MIN = CHUNK_SIZE


def _allocate(size: int, kind: str) -> Any:
    if kind == BUFFER_BYTEARRAY or size < MMAP_MIN:
        return bytearray(size)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _chunk_views(stored: dict[str, Any], chunk_size: int) -> list[tuple[int, int]]:
    """Where each chunk of a stored byte string goes: fixed-size chunks, or the lengths
    its entry lists (`cuts`: a stream cut by content), each checked against the entry."""
    size, chunks = stored["size"], stored["chunks"]
    if len(stored.get("fps", chunks)) != len(chunks):
        raise BlobIntegrityError("a manifest entry does not match its chunk count")
    cuts = stored.get("cuts")
    if cuts is None:
        if len(chunks) != -(-size // chunk_size):
            raise BlobIntegrityError("a manifest entry does not match its chunk count")
        return [(start, min(start + chunk_size, size)) for start in range(0, size, chunk_size)]
    lengths_fit = all(isinstance(n, int) and 0 < n <= CHUNK_SIZE for n in cuts)
    if not lengths_fit or len(cuts) != len(chunks) or sum(cuts) != size:
        raise BlobIntegrityError("a manifest entry's chunk lengths do not add up to its size")
    ends = list(itertools.accumulate(cuts))
    return [(end - length, end) for end, length in zip(ends, cuts, strict=True)]


@dataclass
class _LiveBuffer:
    """A big writable buffer a live variable holds, with the fingerprints of its chunks."""

    name: str
    view: memoryview
    address: int
    fingerprints: list[str]
    exclusive: bool = True
    used: bool = False


class _LiveState:
    """The big buffers of the live variables a restore replaces.

    An in-place restore copies matching chunks from these instead of reading and hashing
    them again, and reuses a live buffer's memory outright (patching only the chunks that
    differ) when a variable of the same name holds a same-sized writable buffer that no
    other live buffer overlaps. Fresh memory is the slow part of restoring big arrays.
    """

    def __init__(self, namespace: dict[str, object], names: set[str]) -> None:
        self.holders: list[Pickled] = []
        self.buffers: list[_LiveBuffer] = []
        self.chunks: dict[str, memoryview] = {}
        for name in sorted(names):
            if name not in namespace:
                continue
            try:
                pickled = pickle_values(namespace, [namespace[name]])
            except Exception:
                continue
            self.holders.append(pickled)
            for buffer in pickled.buffers:
                self._add(name, buffer.raw())
        active: list[_LiveBuffer] = []  # a sweep over start addresses marks every overlap
        for live in sorted((b for b in self.buffers if b.exclusive), key=lambda b: b.address):
            active = [a for a in active if a.address + len(a.view) > live.address]
            if active:
                live.exclusive = False
                for other in active:
                    other.exclusive = False
            active.append(live)

    def _add(self, name: str, view: memoryview) -> None:
        parts = [view[offset : offset + CHUNK_SIZE] for offset in range(0, len(view), CHUNK_SIZE)]
        fingerprints = fingerprint_chunks(parts)
        for fingerprint, part in zip(fingerprints, parts, strict=True):
            self.chunks.setdefault(fingerprint, part)
        address = -1
        if not view.readonly and len(view):
            address = ctypes.addressof(ctypes.c_char.from_buffer(view))
        self.buffers.append(_LiveBuffer(name, view, address, fingerprints, address != -1))

    def claim(self, names: list[str], stored: dict[str, Any]) -> _LiveBuffer | None:
        """A live buffer of one of `names` to patch into `stored`, if one fits."""
        if stored["kind"] != BUFFER_PICKLE or stored["readonly"]:
            return None
        wanted = set(stored.get("fps", ()))
        best: _LiveBuffer | None = None
        best_shared = 0
        for live in self.buffers:
            if live.used or not live.exclusive or live.name not in names:
                continue
            if len(live.view) != stored["size"]:
                continue
            shared = sum(1 for fingerprint in live.fingerprints if fingerprint in wanted)
            if shared > best_shared:
                best, best_shared = live, shared
        if best is not None:
            best.used = True
        return best

    def release(self) -> None:
        self.buffers.clear()
        self.chunks.clear()
        self.holders.clear()


@dataclass
class _PlannedBuffer:
    """One restored buffer: fresh memory already filled, or a live buffer plus patches."""

    stored: dict[str, Any]
    memory: Any
    patches: list[tuple[int, bytearray]] = field(default_factory=list)

    def apply(self) -> Any:
        view = memoryview(self.memory)
        for start, data in self.patches:
            view[start : start + len(data)] = data
        self.patches.clear()
        if self.stored["kind"] == BUFFER_PICKLE:
            return view.toreadonly() if self.stored["readonly"] else self.memory
        if self.stored["kind"] == BUFFER_BYTES:
            return bytes(view)
        return self.memory


def _plan_buffer(
    blobs: BlobStore,
    stored: dict[str, Any],
    chunk_size: int,
    live: _LiveState | None,
    names: list[str],
) -> _PlannedBuffer:
    """Read and check everything a buffer needs, without touching any live object yet."""
    spans = _chunk_views(stored, chunk_size)
    chunks = stored["chunks"]
    fingerprints = stored.get("fps") or [None] * len(chunks)
    reuse = live.claim(names, stored) if live is not None else None
    if reuse is not None:
        plan = _PlannedBuffer(stored, reuse.view)
        for index, (start, stop) in enumerate(spans):
            if reuse.fingerprints[index] == fingerprints[index]:
                continue
            patch = bytearray(stop - start)
            source = live.chunks.get(fingerprints[index]) if live is not None else None
            if source is not None and len(source) == len(patch):
                patch[:] = source
            else:
                blobs.read_chunk_into(chunks[index], memoryview(patch))
            plan.patches.append((start, patch))
        return plan
    memory = _allocate(stored["size"], stored.get("kind", "stream"))
    view = memoryview(memory)
    reads: list[tuple[str, memoryview]] = []
    for index, (start, stop) in enumerate(spans):
        target = view[start:stop]
        source = live.chunks.get(fingerprints[index]) if live is not None else None
        if source is not None and len(source) == len(target):
            target[:] = source
        else:
            reads.append((chunks[index], target))
    read_chunks(blobs, reads)
    return _PlannedBuffer(stored, memory)


def restore_namespace(
    namespace: dict[str, object], blobs: BlobStore, manifest_id: str | None
) -> list[UnrestorableValue]:
    """Replace `namespace` in place with the checkpoint `manifest_id` (None: empty state).

    Names the checkpoint did not have are removed (IPython's own names stay), what it had is
    back with its aliasing. A variable the checkpoint could not keep stays as it is when the
    live one is still of the recorded type (a connection or an open file keeps working),
    and is listed in the result. Every chunk is read and checked before anything live is
    touched, so a damaged checkpoint changes nothing. A big writable buffer (a numpy array)
    whose variable still holds a same-sized one is patched in place, chunk by chunk, so
    anything outside the namespace that kept the old array sees the restored values.
    Returns every value that could not be restored.
    """
    body: dict[str, Any] = {"components": [], "modules": {}, "unrestorable": []}
    if pyplot_state.owns_pyplot(namespace):  # the empty state has no figures open either
        body[pyplot_state.MANIFEST_KEY] = True
    if manifest_id is not None:
        body = load_manifest(blobs, manifest_id)
    chunk_size = int(body.get("chunk_size", CHUNK_SIZE))
    unrestorable = [UnrestorableValue(**entry) for entry in body["unrestorable"]]
    with_buffers = {n for c in body["components"] if c["buffers"] for n in c["names"]}
    live = _LiveState(namespace, with_buffers) if with_buffers else None
    planned: list[tuple[dict[str, Any], bytearray, list[_PlannedBuffer]]] = []
    try:
        for component in body["components"]:
            stream_plan = _plan_buffer(blobs, component["stream"], chunk_size, None, [])
            buffers = [
                _plan_buffer(blobs, stored, chunk_size, live, component["names"])
                for stored in component["buffers"]
            ]
            planned.append((component, stream_plan.memory, buffers))
    finally:
        if live is not None:
            live.release()

    staged: dict[str, object] = {}
    figures_before = pyplot_state.managers()
    namespace_replaced()  # values change in place from here: no capture base holds
    pods: dict[str, dict[int, Any]] = {}  # each loaded pod's memo, for the streams after it
    with restoring_into(namespace), loading_pods(pods):
        for component, stream, buffers in planned:
            in_order: list[Any] = []
            extracted: list[Any] = []
            for plan in buffers:
                value = plan.apply()
                (in_order if plan.stored["kind"] == BUFFER_PICKLE else extracted).append(value)
            try:
                unpickler = NamespaceUnpickler(stream, in_order, extracted)
                loaded = unpickler.load_all(len(stream))
                if component.get("pod"):  # a figure pod: what later streams refer into
                    pods[component["names"][0]] = unpickler.memo.copy()
                    continue
                slots = component.get("slots")
                if slots is not None:  # a kept stream with values of names bound anew since
                    loaded = [loaded[slot] for slot in slots]
            except Exception as error:  # e.g. a module missing in this kernel
                for name in component["names"]:
                    unrestorable.append(
                        UnrestorableValue(
                            name=name,
                            type=component["types"].get(name, "object"),
                            reason=f"could not be loaded: {failure_reason(error)}",
                        )
                    )
                continue
            staged.update(zip(component["names"], loaded, strict=True))
    planned.clear()
    for name, module_name in body["modules"].items():
        try:
            staged[name] = importlib.import_module(module_name)
        except Exception as error:
            unrestorable.append(
                UnrestorableValue(
                    name=name, type="module", reason=f"import failed: {failure_reason(error)}"
                )
            )
    for name in body.get("namespace_refs", []):
        staged[name] = namespace

    hidden = hidden_names(namespace)
    kept = {
        entry.name
        for entry in unrestorable
        if entry.name in namespace and type_name(namespace[entry.name]) == entry.type
    }
    for name, value in list(namespace.items()):
        if name not in staged and name not in kept and is_state_name(name, value, hidden):
            del namespace[name]
    figures = staged.pop(pyplot_state.PYPLOT_FIGURES, None)
    namespace.update(staged)
    if body.get(pyplot_state.MANIFEST_KEY):
        if isinstance(figures, list):
            pyplot_state.show_only(figures)
        elif any(entry.name == pyplot_state.PYPLOT_FIGURES for entry in unrestorable):
            pyplot_state.put_back(figures_before)
        else:
            pyplot_state.show_only([])
    if manifest_id is not None:
        remember_manifest(manifest_id, body)
    return unrestorable

"""Capture and restore a Python namespace (a kernel's `user_ns`) into the blob store.

Runs inside an IPython kernel, and in plain Python for tests. One checkpoint is one signed
manifest `{"kind": "kernel-namespace", "components", "modules", "namespace_refs",
"unrestorable", "chunks"}`:

- every variable is pickled alone first; variables whose pickles share a mutable object
  (found in the picklers' memos) form one alias-connected component, pickled together as one
  protocol-5 stream, so `a is b` and `d["ref"] is arr` survive a restore. A variable that
  cannot be pickled is reported and never joins a component, so it sinks nothing else;
- large buffers (numpy, pandas and arrow data: anything pickled as a `PickleBuffer` of at
  least 64 KiB; big bytes/bytearray objects inside a stream over 1 MiB) go out of band into
  fixed-size chunks stored by BLAKE3 content hash, so a checkpoint after `arr[0] = 42`
  writes about one chunk. A per-process memo maps an XXH3-128 fingerprint of a chunk to its
  BLAKE3 name: an unchanged buffer is fingerprinted (fast), never re-hashed or re-written.
  The memo learns from every capture and every restored manifest (whose fingerprints it
  signs), so the first checkpoint after a resume is incremental too;
- functions, lambdas and classes defined in the notebook are pickled by value (cloudpickle);
  their globals are the live namespace again after restore, not a frozen copy;
- modules are recorded as imports (`np` -> `numpy`, `p` -> `posixpath` for `os.path`) and
  re-imported;
- IPython's own names (`In`, `Out`, `_`, `_i3`, `_3`, `exit`, `get_ipython`, everything in
  `user_ns_hidden`, dunders) are not state; a user's own `_name` is;
- values that cannot be pickled (generators, open files, sockets, locks, threads, database
  connections, anything whose pickling raises) are listed with name, type and reason.

Choices where the brief was silent: identity is kept for mutable objects (immutable values
such as strings, bytes and tuples shared by two variables come back equal, not identical);
numpy views come back as copies (numpy's own pickling); on an in-place restore a variable the
checkpoint could not keep stays when its live value still has the recorded type (a database
connection keeps working), otherwise it is removed. A capture writes without per-file fsync
and makes everything durable with one `syncfs` before it returns (Linux; elsewhere every
file is fsynced by the store).

Restore verifies the manifest's signature and every chunk it reads before unpickling, and
reads everything before touching the namespace: a failed restore changes nothing. In place,
chunks that live arrays already hold are copied from memory, and a big writable buffer whose
variable still holds a same-sized, non-overlapping one is patched chunk by chunk instead of
allocated afresh (fresh memory is the slow part of restoring large arrays).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import io
import mmap
import os
import pickle
import re
import sys
import threading
import time
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3
import cloudpickle

from ditto_jupyter.core.blobs import (
    CHUNK_SIZE,
    BlobError,
    BlobIntegrityError,
    BlobNotFound,
    BlobStore,
)
from ditto_jupyter.core.models import ContextCapture, UnrestorableValue

try:  # a fast non-cryptographic fingerprint; BLAKE3 stands in when xxhash is missing
    import xxhash

    def _fingerprint(data: memoryview) -> str:
        return xxhash.xxh3_128_hexdigest(data)

except ImportError:  # pragma: no cover - depends on the environment

    def _fingerprint(data: memoryview) -> str:
        return blake3.blake3(data).hexdigest()[:32]


MANIFEST_KIND = "kernel-namespace"
MANIFEST_VERSION = 1
#: Buffers smaller than this stay inside the pickle stream.
OUT_OF_BAND_MIN = 64 * 1024
#: A component whose in-band stream exceeds this is pickled again with big bytes/bytearray
#: objects taken out of band (the C pickler never offers them to `reducer_override`).
LARGE_STREAM = CHUNK_SIZE

IPYTHON_NAMES = frozenset(
    {
        "In",
        "Out",
        "_",
        "__",
        "___",
        "_i",
        "_ii",
        "_iii",
        "_oh",
        "_ih",
        "_dh",
        "exit",
        "quit",
        "get_ipython",
    }
)
_IPYTHON_PATTERN = re.compile(r"_i\d+|_\d+|__\w*__")


# ---- which names are state --------------------------------------------------------------


def _ipython_shell(namespace: dict[str, object]) -> Any:
    """The running IPython shell whose user namespace is `namespace`, if any."""
    module = sys.modules.get("IPython")
    if module is None:
        return None
    shell = module.get_ipython()
    if shell is not None and getattr(shell, "user_ns", None) is namespace:
        return shell
    return None


def _hidden(namespace: dict[str, object]) -> dict[str, object]:
    shell = _ipython_shell(namespace)
    hidden = getattr(shell, "user_ns_hidden", None) if shell is not None else None
    return hidden if isinstance(hidden, dict) else {}


def is_state_name(name: object, value: object, hidden: dict[str, object]) -> bool:
    """Whether a namespace entry is user state (not one of IPython's own names)."""
    if not isinstance(name, str) or name in IPYTHON_NAMES or _IPYTHON_PATTERN.fullmatch(name):
        return False
    return not (name in hidden and hidden[name] is value)


def _type_name(value: object) -> str:
    cls = type(value)
    module = getattr(cls, "__module__", "builtins")
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
    return line if len(line) <= 300 else line[:297] + "..."


# ---- pickling -----------------------------------------------------------------------------


class _NamespaceRef:
    """Stands for the namespace being captured; unpickles as the namespace being restored."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_live_namespace, ())


_NAMESPACE_REF = _NamespaceRef()
_restore_target = threading.local()


def _live_namespace() -> dict[str, object]:
    target = getattr(_restore_target, "namespace", None)
    if target is None:
        raise pickle.UnpicklingError("a notebook function can only be loaded by restore_namespace")
    return target  # type: ignore[no-any-return]


@contextmanager
def _restoring_into(namespace: dict[str, object]) -> Iterator[None]:
    previous = getattr(_restore_target, "namespace", None)
    _restore_target.namespace = namespace
    try:
        yield
    finally:
        _restore_target.namespace = previous


def _make_empty_cell() -> types.CellType:
    if False:  # the compiler makes `cell` a free variable of the lambda, left empty
        cell: object = None
    return (lambda: cell).__closure__[0]  # type: ignore[index]


def _make_function(
    code: types.CodeType,
    globals_: dict[str, object],
    name: str,
    closure: tuple[types.CellType, ...] | None,
) -> types.FunctionType:
    return types.FunctionType(code, globals_, name, None, closure)


def _set_function_state(func: types.FunctionType, state: dict[str, Any]) -> None:
    func.__dict__.update(state.pop("__dict__"))
    for cell, (full, value) in zip(
        func.__closure__ or (), state.pop("__closure_values__"), strict=True
    ):
        if full:
            cell.cell_contents = value
    for key, value in state.items():
        setattr(func, key, value)


class _NamespacePickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle, plus: notebook functions keep the live namespace as their globals, open
    files are refused (cloudpickle would copy a readable file's text), and big buffers go out
    of band."""

    def __init__(
        self, file: io.BytesIO, namespace: dict[str, object], buffers: list[pickle.PickleBuffer]
    ) -> None:
        super().__init__(file, protocol=5, buffer_callback=self._take_buffer)
        self.namespace = namespace
        self.buffers = buffers

    def _take_buffer(self, buffer: pickle.PickleBuffer) -> bool:
        try:
            raw = buffer.raw()
        except BufferError:  # not contiguous: keep it in band
            return True
        if raw.nbytes < OUT_OF_BAND_MIN:
            return True
        self.buffers.append(buffer)
        return False

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.FunctionType and obj.__globals__ is self.namespace:
            return self._main_function_reduce(obj)
        if isinstance(obj, io.IOBase) and not isinstance(obj, (io.StringIO, io.BytesIO)):
            name = getattr(obj, "name", None)
            raise pickle.PicklingError(f"cannot pickle an open file ({name!r})")
        return super().reducer_override(obj)

    @staticmethod
    def _main_function_reduce(func: types.FunctionType) -> tuple[Any, ...]:
        code = func.__code__
        closure = None
        values: list[tuple[bool, object]] = []
        if func.__closure__ is not None:
            closure = tuple(_make_empty_cell() for _ in code.co_freevars)
            for cell in func.__closure__:
                try:
                    values.append((True, cell.cell_contents))
                except ValueError:  # an empty cell (a name not yet bound)
                    values.append((False, None))
        state = {
            "__dict__": func.__dict__,
            "__closure_values__": values,
            "__qualname__": func.__qualname__,
            "__module__": func.__module__,
            "__doc__": func.__doc__,
            "__defaults__": func.__defaults__,
            "__kwdefaults__": func.__kwdefaults__,
            "__annotations__": func.__annotations__,
        }
        newargs = (code, _NAMESPACE_REF, func.__name__, closure)
        return (_make_function, newargs, state, None, None, _set_function_state)


class _ExtractingPickler(_NamespacePickler):
    """Also takes big bytes/bytearray objects out of band, through persistent ids (slower:
    used only for components whose in-band stream is large)."""

    def __init__(
        self, file: io.BytesIO, namespace: dict[str, object], buffers: list[pickle.PickleBuffer]
    ) -> None:
        super().__init__(file, namespace, buffers)
        self.extracted: list[tuple[str, bytes | bytearray]] = []
        self._extracted_ids: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if (kind is bytes or kind is bytearray) and len(obj) >= OUT_OF_BAND_MIN:
            index = self._extracted_ids.get(id(obj))
            if index is None:
                index = len(self.extracted)
                self._extracted_ids[id(obj)] = index
                self.extracted.append((kind.__name__, obj))
            return ("ditto-buffer", index)
        return None


_ATOMIC = (
    str,
    bytes,
    int,
    float,
    complex,
    bool,
    type(None),
    tuple,
    frozenset,
    range,
    slice,
    type,
    types.ModuleType,
    types.CodeType,
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    pickle.PickleBuffer,
    _NamespaceRef,
)


@dataclass
class _Pickled:
    """One pickled component: its stream, its out-of-band buffers, the objects it holds."""

    stream: bytes
    buffers: list[pickle.PickleBuffer]
    extracted: list[tuple[str, bytes | bytearray]] = field(default_factory=list)
    memo: dict[int, Any] = field(default_factory=dict)


def _pickle_values(namespace: dict[str, object], values: list[object]) -> _Pickled:
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    pickler = _NamespacePickler(out, namespace, buffers)
    pickler.dump(values)
    stream = out.getvalue()
    memo: dict[int, Any] = pickler.memo.copy()
    if len(stream) > LARGE_STREAM and any(
        type(obj) in (bytes, bytearray) and len(obj) >= OUT_OF_BAND_MIN for _, obj in memo.values()
    ):
        buffers = []
        out = io.BytesIO()
        extractor = _ExtractingPickler(out, namespace, buffers)
        extractor.dump(values)
        return _Pickled(out.getvalue(), buffers, extractor.extracted, memo)
    return _Pickled(stream, buffers, [], memo)


def _identity_ids(pickled: _Pickled, namespace: dict[str, object]) -> set[int]:
    """Ids of the objects in a pickle whose identity matters (mutable, shared by reference)."""
    ids = set()
    for object_id, (_, obj) in pickled.memo.items():
        if isinstance(obj, _ATOMIC):
            continue
        if isinstance(obj, types.FunctionType) and obj.__globals__ is not namespace:
            continue  # a module-level function, pickled by reference
        ids.add(object_id)
    return ids


def _components(names: list[str], ids: dict[str, set[int]]) -> list[list[str]]:
    """Group names whose pickles share an identity-bearing object (union-find)."""
    parent = {name: name for name in names}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    owner: dict[int, str] = {}
    for name in names:
        for object_id in ids[name]:
            other = owner.setdefault(object_id, name)
            if other != name:
                root_a, root_b = find(name), find(other)
                if root_a != root_b:
                    parent[root_b] = root_a
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(find(name), []).append(name)
    return sorted((sorted(group) for group in groups.values()), key=lambda group: group[0])


# ---- chunk storage ------------------------------------------------------------------------

_MEMO_LIMIT = 1 << 21
_memo_lock = threading.Lock()
_chunk_memo: dict[str, str] = {}  # fingerprint -> BLAKE3 chunk name
_seeded: set[str] = set()  # manifests (captured or restored here) the memo has learned


def _remember_chunk(fingerprint: str, digest: str) -> None:
    with _memo_lock:
        if len(_chunk_memo) >= _MEMO_LIMIT:
            _chunk_memo.clear()
            _seeded.clear()
        _chunk_memo[fingerprint] = digest


def _remember_manifest(manifest_id: str, body: dict[str, Any]) -> None:
    """Learn the fingerprints of a manifest's chunks (once per manifest and process)."""
    with _memo_lock:
        if manifest_id in _seeded:
            return
        _seeded.add(manifest_id)
    for stored in _stored_entries(body):
        for fingerprint, digest in zip(stored["fps"], stored["chunks"], strict=True):
            _remember_chunk(fingerprint, digest)


def _stored_entries(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for component in body.get("components", []):
        yield component["stream"]
        yield from component["buffers"]


_writer_pool: ThreadPoolExecutor | None = None
_thread_stores = threading.local()


def _pool() -> ThreadPoolExecutor:
    """Two writer threads: BLAKE3, zstd and file writes release the GIL, so new chunks of a
    big buffer are hashed and written in parallel."""
    global _writer_pool
    if _writer_pool is None:
        _writer_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ditto-chunks")
    return _writer_pool


def _store_for_thread(blobs: BlobStore) -> BlobStore:
    """This thread's own BlobStore on the same root (a store's zstd compressor is not
    thread-safe)."""
    if threading.current_thread() is threading.main_thread():
        return blobs
    stores: dict[tuple[str, bool], BlobStore] = _thread_stores.__dict__.setdefault("stores", {})
    key = (str(blobs.root), blobs.durable)
    store = stores.get(key)
    if store is None:
        store = stores[key] = BlobStore(blobs.root, durable=blobs.durable)
    return store


def _put_chunk(blobs: BlobStore, part: memoryview) -> tuple[str, int]:
    store = _store_for_thread(blobs)
    digest, written = store.put_chunk(part, blake3.blake3(part).hexdigest())
    if store is not blobs:
        store.flush()  # a durable store's directory fsyncs happen where it wrote
    if written and not store.durable and _start_writeback is not None:
        _begin_writeback(store, digest)
    return digest, written


def _load_libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):  # not Linux
        return None


_start_writeback = _load_libc_function("sync_file_range")
_SYNC_FILE_RANGE_WRITE = 2


def _begin_writeback(store: BlobStore, digest: str) -> None:
    """Start writing a new chunk to disk now, so the final sync has little left to do."""
    try:
        fd = os.open(store.chunk_file(digest), os.O_RDONLY)
    except OSError:
        return
    try:
        _start_writeback(fd, ctypes.c_longlong(0), ctypes.c_longlong(0), _SYNC_FILE_RANGE_WRITE)
    finally:
        os.close(fd)


def _fingerprints(parts: list[memoryview]) -> list[str]:
    """Fingerprints of chunks; a big buffer's second half is done on a writer thread."""
    if len(parts) < 8 or (os.cpu_count() or 1) < 2:
        return [_fingerprint(part) for part in parts]
    half = len(parts) // 2
    rest = _pool().submit(lambda: [_fingerprint(part) for part in parts[half:]])
    return [_fingerprint(part) for part in parts[:half]] + rest.result()


class _ChunkWriter:
    """Stores byte views as fixed-size chunks, skipping the ones already stored."""

    def __init__(self, blobs: BlobStore) -> None:
        self.blobs = blobs
        self.bytes_written = 0
        self.chunks: dict[str, None] = {}

    def store(self, data: memoryview) -> dict[str, Any]:
        view = data.cast("B") if data.format != "B" or data.ndim != 1 else data
        parts = [view[offset : offset + CHUNK_SIZE] for offset in range(0, len(view), CHUNK_SIZE)]
        fingerprints = _fingerprints(parts)
        digests = [_chunk_memo.get(fingerprint) for fingerprint in fingerprints]
        missing: dict[str, memoryview] = {}
        for part, fingerprint, digest in zip(parts, fingerprints, digests, strict=True):
            if digest is None:
                missing.setdefault(fingerprint, part)
        if missing:
            if len(missing) >= 4 and (os.cpu_count() or 1) > 1:
                results = list(_pool().map(lambda p: _put_chunk(self.blobs, p), missing.values()))
            else:
                results = [_put_chunk(self.blobs, part) for part in missing.values()]
            learned = {}
            for fingerprint, (digest, written) in zip(missing, results, strict=True):
                self.bytes_written += written
                learned[fingerprint] = digest
                _remember_chunk(fingerprint, digest)
            digests = [learned.get(f, d) for d, f in zip(digests, fingerprints, strict=True)]
        chunks = [str(digest) for digest in digests]
        for digest in chunks:
            self.chunks[digest] = None
        return {"size": len(view), "chunks": chunks, "fps": fingerprints}


_syncfs = _load_libc_function("syncfs")  # None off Linux: write through the durable store
_twins: dict[str, BlobStore] = {}


def _write_store(blobs: BlobStore) -> tuple[BlobStore, bool]:
    """The store a capture writes through, and whether it must sync the filesystem after.

    A durable store fsyncs every chunk file, which costs more than the capture itself for a
    big new array (50 chunks, 50 fsyncs). With `syncfs` a capture writes its chunks and its
    manifest without fsync and makes them durable with one filesystem sync before returning:
    the same guarantee when it returns, and a crash in between leaves at worst a manifest
    whose chunks fail their hash check (refused on restore, never registered).
    """
    if not blobs.durable or _syncfs is None:
        return blobs, False
    key = str(blobs.root)
    twin = _twins.get(key)
    if twin is None:
        twin = _twins[key] = BlobStore(blobs.root, durable=False)
    return twin, True


def _sync_filesystem(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise BlobError(f"could not sync the blob store at {root}: {os.strerror(error)}")
    finally:
        os.close(fd)


# ---- capture ------------------------------------------------------------------------------


def capture_namespace(
    namespace: dict[str, object],
    blobs: BlobStore,
    *,
    previous_manifest_id: str | None = None,
) -> ContextCapture:
    """Capture `namespace` into `blobs` as one signed manifest; return its id and cost.

    `previous_manifest_id` (the checkpoint this one follows) teaches the chunk memo what that
    checkpoint stored, so unchanged buffers are not re-hashed even in a new process.
    """
    try:
        return _capture(namespace, blobs, previous_manifest_id)
    except BlobNotFound:  # a chunk the memo knew was collected since: forget, store again
        with _memo_lock:
            _chunk_memo.clear()
            _seeded.clear()
        return _capture(namespace, blobs, None)


def _capture(
    namespace: dict[str, object], blobs: BlobStore, previous_manifest_id: str | None
) -> ContextCapture:
    if previous_manifest_id is not None and previous_manifest_id not in _seeded:
        # only an optimisation: a missing previous manifest costs re-hashing
        with contextlib.suppress(BlobError):
            _remember_manifest(previous_manifest_id, blobs.get_manifest(previous_manifest_id))
    hidden = _hidden(namespace)
    modules: dict[str, str] = {}
    namespace_refs: list[str] = []
    unrestorable: list[UnrestorableValue] = []
    values: dict[str, object] = {}
    for name, value in list(namespace.items()):
        if not is_state_name(name, value, hidden):
            continue
        if isinstance(value, types.ModuleType):
            module_name = getattr(value, "__name__", None)
            if isinstance(module_name, str) and sys.modules.get(module_name) is value:
                modules[name] = module_name
            else:
                reason = f"module {module_name!r} cannot be imported by name"
                unrestorable.append(UnrestorableValue(name=name, type="module", reason=reason))
        elif value is namespace:
            namespace_refs.append(name)
        else:
            values[name] = value

    singles: dict[str, _Pickled] = {}
    for name, value in values.items():
        try:
            singles[name] = _pickle_values(namespace, [value])
        except Exception as error:
            unrestorable.append(
                UnrestorableValue(name=name, type=_type_name(value), reason=_reason(error))
            )
    ids = {name: _identity_ids(pickled, namespace) for name, pickled in singles.items()}
    groups = _components(list(singles), ids)

    store, sync = _write_store(blobs)
    writer = _ChunkWriter(store)
    components: list[dict[str, Any]] = []
    for group in groups:
        parts: list[tuple[list[str], _Pickled]]
        if len(group) == 1:
            parts = [(group, singles[group[0]])]
        else:
            try:
                parts = [(group, _pickle_values(namespace, [values[n] for n in group]))]
            except Exception:  # together they fail (e.g. recursion depth): keep them apart
                parts = [([n], singles[n]) for n in group]
        for names, pickled in parts:
            components.append(_store_component(writer, names, values, pickled))
    singles.clear()  # release the pickles' memos (they keep temporaries alive)

    body: dict[str, Any] = {
        "kind": MANIFEST_KIND,
        "version": MANIFEST_VERSION,
        "chunk_size": CHUNK_SIZE,
        "components": components,
        "modules": modules,
        "namespace_refs": sorted(namespace_refs),
        "unrestorable": [u.model_dump() for u in sorted(unrestorable, key=lambda u: u.name)],
        "chunks": list(writer.chunks),
    }
    manifest_id, manifest_bytes = store.put_manifest(body)
    if sync and (writer.bytes_written or manifest_bytes):
        _sync_filesystem(blobs.root)
    _remember_manifest(manifest_id, body)
    shell = _ipython_shell(namespace)
    count = getattr(shell, "execution_count", None) if shell is not None else None
    return ContextCapture(
        manifest_id=manifest_id,
        bytes_written=writer.bytes_written + manifest_bytes,
        unrestorable=sorted(unrestorable, key=lambda u: u.name),
        execution_count=count if isinstance(count, int) else None,
    )


def _store_component(
    writer: _ChunkWriter, names: list[str], values: dict[str, object], pickled: _Pickled
) -> dict[str, Any]:
    buffers: list[dict[str, Any]] = []
    for buffer in pickled.buffers:
        raw = buffer.raw()
        buffers.append({"kind": "pickle", "readonly": raw.readonly, **writer.store(raw)})
    for kind, obj in pickled.extracted:
        buffers.append({"kind": kind, "readonly": kind == "bytes", **writer.store(memoryview(obj))})
    return {
        "names": names,
        "types": {name: _type_name(values[name]) for name in names},
        "stream": writer.store(memoryview(pickled.stream)),
        "buffers": buffers,
    }


# ---- restore ------------------------------------------------------------------------------

#: Buffers at least this big are restored into anonymous memory maps (no zero-fill pass)
#: instead of bytearrays.
MMAP_MIN = CHUNK_SIZE


def _allocate(size: int, kind: str) -> Any:
    if kind == "bytearray" or size < MMAP_MIN:
        return bytearray(size)
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _read_chunk_into(blobs: BlobStore, digest: str, target: memoryview) -> None:
    """Read one chunk straight into `target`, checking its BLAKE3 name."""
    blobs.read_chunk_into(digest, target)


def _chunk_views(stored: dict[str, Any], chunk_size: int) -> list[tuple[int, int]]:
    size, chunks = stored["size"], stored["chunks"]
    if len(chunks) != -(-size // chunk_size) or len(stored.get("fps", chunks)) != len(chunks):
        raise BlobIntegrityError("a manifest entry does not match its chunk count")
    return [(start, min(start + chunk_size, size)) for start in range(0, size, chunk_size)]


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
        self.holders: list[_Pickled] = []
        self.buffers: list[_LiveBuffer] = []
        self.chunks: dict[str, memoryview] = {}
        for name in sorted(names):
            if name not in namespace:
                continue
            try:
                pickled = _pickle_values(namespace, [namespace[name]])
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
        fingerprints = _fingerprints(parts)
        for fingerprint, part in zip(fingerprints, parts, strict=True):
            self.chunks.setdefault(fingerprint, part)
        address = -1
        if not view.readonly and len(view):
            address = ctypes.addressof(ctypes.c_char.from_buffer(view))
        self.buffers.append(_LiveBuffer(name, view, address, fingerprints, address != -1))

    def claim(self, names: list[str], stored: dict[str, Any]) -> _LiveBuffer | None:
        """A live buffer of one of `names` to patch into `stored`, if one fits."""
        if stored["kind"] != "pickle" or stored["readonly"]:
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
        if self.stored["kind"] == "pickle":
            return view.toreadonly() if self.stored["readonly"] else self.memory
        if self.stored["kind"] == "bytes":
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
                _read_chunk_into(blobs, chunks[index], memoryview(patch))
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
    _read_chunks(blobs, reads)
    return _PlannedBuffer(stored, memory)


def _read_chunks(blobs: BlobStore, reads: list[tuple[str, memoryview]]) -> None:
    """Read and check chunks; a long run is split over a writer thread (reads and BLAKE3
    release the GIL)."""
    if len(reads) < 8 or (os.cpu_count() or 1) < 2:
        for digest, target in reads:
            _read_chunk_into(blobs, digest, target)
        return
    half = len(reads) // 2

    def second_half() -> None:
        for digest, target in reads[half:]:
            _read_chunk_into(blobs, digest, target)

    rest = _pool().submit(second_half)
    try:
        for digest, target in reads[:half]:
            _read_chunk_into(blobs, digest, target)
    finally:
        rest.result()


class _NamespaceUnpickler(pickle.Unpickler):
    def __init__(self, data: Any, buffers: list[Any], extracted: list[Any]) -> None:
        super().__init__(io.BytesIO(data), buffers=buffers)
        self.extracted = extracted

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "ditto-buffer":
            return self.extracted[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")


def load_manifest(blobs: BlobStore, manifest_id: str) -> dict[str, Any]:
    """A kernel-namespace manifest, signature checked (ManifestSignatureError otherwise)."""
    body = blobs.get_manifest(manifest_id)
    if body.get("kind") != MANIFEST_KIND or body.get("version") != MANIFEST_VERSION:
        raise BlobError(f"manifest {manifest_id} is not a kernel-namespace manifest")
    return body


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
    with _restoring_into(namespace):
        for component, stream, buffers in planned:
            in_order: list[Any] = []
            extracted: list[Any] = []
            for plan in buffers:
                value = plan.apply()
                (in_order if plan.stored["kind"] == "pickle" else extracted).append(value)
            try:
                loaded = _NamespaceUnpickler(stream, in_order, extracted).load()
            except Exception as error:  # e.g. a module missing in this kernel
                for name in component["names"]:
                    unrestorable.append(
                        UnrestorableValue(
                            name=name,
                            type=component["types"].get(name, "object"),
                            reason=f"could not be loaded: {_reason(error)}",
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
                    name=name, type="module", reason=f"import failed: {_reason(error)}"
                )
            )
    for name in body.get("namespace_refs", []):
        staged[name] = namespace

    hidden = _hidden(namespace)
    kept = {
        entry.name
        for entry in unrestorable
        if entry.name in namespace and _type_name(namespace[entry.name]) == entry.type
    }
    for name, value in list(namespace.items()):
        if name not in staged and name not in kept and is_state_name(name, value, hidden):
            del namespace[name]
    namespace.update(staged)
    if manifest_id is not None:
        _remember_manifest(manifest_id, body)
    return unrestorable


# ---- kernel entry points (run through KernelHost.call) -----------------------------------


def _user_namespace() -> dict[str, object]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("not running inside an IPython kernel")
    return shell.user_ns  # type: ignore[no-any-return]


_stores: dict[str, BlobStore] = {}


def open_store(blob_root: str | os.PathLike[str]) -> BlobStore:
    """The kernel's own BlobStore on a shared root (opened once per process)."""
    key = str(Path(blob_root).resolve())
    store = _stores.get(key)
    if store is None:
        store = _stores[key] = BlobStore(key)
    return store


def warm_up(blob_root: str) -> bool:
    """Import the capture machinery and open the store ahead of the first checkpoint."""
    _write_store(open_store(blob_root))
    return True


_last_timing: dict[str, float] = {}


def last_timing() -> dict[str, float]:
    """Seconds the last kernel_capture / kernel_restore of this kernel took inside it."""
    return dict(_last_timing)


def kernel_capture(blob_root: str, previous_manifest_id: str | None = None) -> dict[str, Any]:
    """Capture this kernel's namespace; the ContextCapture as JSON."""
    started = time.perf_counter()
    namespace = _user_namespace()
    result = capture_namespace(
        namespace, open_store(blob_root), previous_manifest_id=previous_manifest_id
    )
    _last_timing["capture_s"] = time.perf_counter() - started
    shell = _ipython_shell(namespace)
    if shell is not None:  # idle: the last finished cell is one before the next count
        result = result.model_copy(update={"execution_count": shell.execution_count - 1})
    return result.model_dump(mode="json")


def kernel_restore(blob_root: str, manifest_id: str | None) -> list[dict[str, Any]]:
    """Restore this kernel's namespace in place; the unrestorable values as JSON."""
    started = time.perf_counter()
    lost = restore_namespace(_user_namespace(), open_store(blob_root), manifest_id)
    _last_timing["restore_s"] = time.perf_counter() - started
    return [entry.model_dump(mode="json") for entry in lost]

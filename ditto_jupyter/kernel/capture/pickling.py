"""Pickling a namespace: components of aliased variables, notebook functions, big buffers.

Variables whose pickles share a mutable object (found in the picklers' memos) form one
alias-connected component, pickled together as one protocol-5 stream, so `a is b` survives a
restore. Each object is pickled once per checkpoint: a variable is pickled alone only up to
the objects an earlier pickle holds (`stop_at`), and a component's stream continues the
pickle of its first member with the others (`continue_pickling`: several pickles one after
another, one memo, loaded by `NamespaceUnpickler.load_all`). Functions, lambdas and classes
defined in the notebook are pickled by value (cloudpickle), with the live namespace as their
globals again after restore. Big buffers (a `PickleBuffer` of at least 64 KiB; big bytes/bytearray
objects inside a large stream) go out of band, for the chunk store.
"""

from __future__ import annotations

import copyreg
import io
import itertools
import pickle
import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from ditto_jupyter.core.blobs import CHUNK_SIZE
from ditto_jupyter.kernel.capture.atoms import MEMO_OBJECT, Atoms
from ditto_jupyter.kernel.capture.counters import Reducer, counter_reducers
from ditto_jupyter.kernel.capture.figure_watch import figure_types
from ditto_jupyter.kernel.capture.kept_state import kept_state_bases
from ditto_jupyter.kernel.capture.lazy_caches import cache_bases
from ditto_jupyter.kernel.capture.manifest import BUFFER_BYTEARRAY, BUFFER_BYTES

#: Buffers smaller than this stay inside the pickle stream.
OUT_OF_BAND_MIN = 64 * 1024
#: A component whose in-band stream exceeds this is pickled again with big bytes/bytearray
#: objects taken out of band (the C pickler never offers them to `reducer_override`).
LARGE_STREAM = CHUNK_SIZE
#: The persistent-id tag of a bytes/bytearray object taken out of band: `(tag, index)`.
EXTRACTED_BUFFER_TAG = "ditto-buffer"
#: The module that pickled notebook functions name for the helpers that rebuild them. The
#: name is written into every checkpoint's streams, so it is part of the checkpoint format:
#: it stays the package path whatever module the helpers live in (the package binds them).
PICKLE_MODULE = "ditto_jupyter.kernel.capture"


_UNKNOWN: Any = object()
#: copyreg's cache of a class's slot names (what pickling an instance stores in the class).
_slotnames: Any = getattr(copyreg, "_slotnames")  # noqa: B009 - private, not in the stubs


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
def restoring_into(namespace: dict[str, object]) -> Iterator[None]:
    """Notebook functions unpickled inside this block get `namespace` as their globals."""
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


def _held_elsewhere() -> None:
    raise pickle.UnpicklingError("a pickle that stopped at objects held elsewhere is not stored")


_pods_loaded = threading.local()


def _pod_object(pod: str, index: int) -> Any:
    """An object of a pod (a figure pickled in a stream of its own) that another stream
    refers to: the pod's own unpickled object at that memo index (see `pods`)."""
    memos = getattr(_pods_loaded, "memos", None)
    memo = memos.get(pod) if memos is not None else None
    if memo is None or index not in memo:
        raise pickle.UnpicklingError(f"{pod} was not loaded before the values that refer to it")
    return memo[index]


@contextmanager
def loading_pods(memos: dict[str, dict[int, Any]]) -> Iterator[None]:
    """Streams unpickled inside this block resolve pod references through `memos` (each
    pod's unpickler memo, by the pod's name), filled in as the pods load."""
    previous = getattr(_pods_loaded, "memos", None)
    _pods_loaded.memos = memos
    try:
        yield
    finally:
        _pods_loaded.memos = previous


#: The helpers a pickled notebook function names (see PICKLE_MODULE).
PICKLED_HELPERS = (_live_namespace, _make_function, _set_function_state, _pod_object)
for _helper in PICKLED_HELPERS:
    _helper.__module__ = PICKLE_MODULE


#: Every stream this process has pickled (`NamespacePickler.dump` calls): what a capture
#: pickled is the difference around it (`kernel_entry.last_timing` reports it).
_dumps = itertools.count()
_dumped = 0


def dumps_so_far() -> int:
    """How many pickles (dump calls) this process's captures have made."""
    return _dumped


class NamespacePickler(cloudpickle.Pickler):  # type: ignore[misc]
    """cloudpickle, plus: notebook functions keep the live namespace as their globals, open
    files are refused (cloudpickle would copy a readable file's text), big buffers go out of
    band, and counters that pickling advances are wound back (`counters`)."""

    def __init__(
        self,
        file: io.BytesIO,
        namespace: dict[str, object],
        buffers: list[pickle.PickleBuffer],
        stop_at: set[int] | None = None,
    ) -> None:
        # cloudpickle's table is a ChainMap over copyreg's, looked up in Python for every
        # object pickled; the same entries in one dict are looked up at C speed (the C
        # pickler reads the attribute once, in __init__)
        self.dispatch_table = {**copyreg.dispatch_table, **cloudpickle.Pickler._dispatch_table}
        super().__init__(file, protocol=5, buffer_callback=self._take_buffer)
        self.namespace = namespace
        self.buffers = buffers
        self._counter_reducers = counter_reducers()
        self._class_reducers = [*cache_bases(), *kept_state_bases()]
        self._special: dict[type, Reducer | None] = {}
        #: Classes whose instances need nothing of `reducer_override` beyond the checks by
        #: id (pods, `stop_at`) and the animated probe: the C pickler reduces them itself.
        self._ordinary: set[type] = set()
        self.stop_at = stop_at
        self.stopped: set[int] = set()
        #: Objects held by pods pickled before (id -> (pod, memo index)): referred to, not
        #: pickled again; `pods_used` are the pods this pickle referred to.
        self.pod_refs: dict[int, tuple[str, int]] | None = None
        self.pods_used: set[str] = set()
        #: The objects of those pods it referred to, by id.
        self.pod_objects: dict[int, Any] = {}
        #: The matplotlib figures this pickle holds (they are watched for changes), and
        #: whether one of its artists is animated (its changes are not passed up).
        self.figures: list[Any] = []
        self._figure_types = figure_types()
        self.probe_animated = False
        self.animated = False

    def dump(self, obj: Any) -> None:
        global _dumped
        _dumped = next(_dumps) + 1
        super().dump(obj)

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
        refs = self.pod_refs
        if refs is not None:
            hit = refs.get(id(obj))
            if hit is not None:
                self.pods_used.add(hit[0])
                self.pod_objects[id(obj)] = obj
                return (_pod_object, hit)
        if self.stop_at is not None and id(obj) in self.stop_at:
            self.stopped.add(id(obj))
            return (_held_elsewhere, ())
        kind = type(obj)
        if kind in self._ordinary:  # most objects: decided by their class once per pickle
            if self.probe_animated and not self.animated:
                self._probe_animated(obj)
            return NotImplemented
        if self._is_ordinary(kind):
            self._ordinary.add(kind)
            return self.reducer_override(obj)
        if kind is types.FunctionType and obj.__globals__ is self.namespace:
            return self._main_function_reduce(obj)
        if isinstance(obj, type) and "__slotnames__" not in obj.__dict__:
            # pickling an instance caches this in its class (copyreg): cached before the
            # class is pickled, a class pickles to the same bytes before and after
            _slotnames(obj)
        if isinstance(obj, io.IOBase) and not isinstance(obj, (io.StringIO, io.BytesIO)):
            name = getattr(obj, "name", None)
            raise pickle.PicklingError(f"cannot pickle an open file ({name!r})")
        if kind in self._figure_types:
            self.figures.append(obj)
        if self.probe_animated and not self.animated:
            self._probe_animated(obj)
        special = self._special.get(kind, _UNKNOWN)
        if special is _UNKNOWN:
            special = self._special[kind] = self._special_reducer(kind)
        if special is not None:
            return special(obj)
        return super().reducer_override(obj)

    def _probe_animated(self, obj: Any) -> None:
        """Note whether `obj` is an animated artist (its `_animated` flag is set)."""
        attributes = getattr(obj, "__dict__", None)
        self.animated = isinstance(attributes, dict) and attributes.get("_animated") is True

    def _is_ordinary(self, kind: type) -> bool:
        """Whether instances of `kind` are neither functions, classes, open files nor
        figures, and have no special reducer: cloudpickle would leave them to the C
        pickler (its `reducer_override` answers NotImplemented), and so does this one."""
        if kind is types.FunctionType or issubclass(kind, (type, io.IOBase)):
            return False
        if kind in self._figure_types:
            return False
        special = self._special.get(kind, _UNKNOWN)
        if special is _UNKNOWN:
            special = self._special[kind] = self._special_reducer(kind)
        return special is None

    def _special_reducer(self, kind: type) -> Reducer | None:
        """The reducer for a class whose pickling has a side effect, takes a cache along or
        leaves state out (`counters`, `lazy_caches`, `kept_state`), or None."""
        found = self._counter_reducers.get(kind)
        if found is None:
            found = next((r for base, r in self._class_reducers if issubclass(kind, base)), None)
        return found

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


class ExtractingPickler(NamespacePickler):
    """Also takes big bytes/bytearray objects out of band, through persistent ids (slower:
    used only for components whose in-band stream is large)."""

    def __init__(
        self,
        file: io.BytesIO,
        namespace: dict[str, object],
        buffers: list[pickle.PickleBuffer],
        stop_at: set[int] | None = None,
    ) -> None:
        super().__init__(file, namespace, buffers, stop_at)
        self.extracted: list[tuple[str, bytes | bytearray]] = []
        self._extracted_ids: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if (kind is bytes or kind is bytearray) and len(obj) >= OUT_OF_BAND_MIN:
            index = self._extracted_ids.get(id(obj))
            if index is None:
                index = len(self.extracted)
                self._extracted_ids[id(obj)] = index
                self.extracted.append((BUFFER_BYTES if kind is bytes else BUFFER_BYTEARRAY, obj))
            return (EXTRACTED_BUFFER_TAG, index)
        return None


class NamespaceUnpickler(pickle.Unpickler):
    """Loads a component's stream with its out-of-band buffers and extracted bytes."""

    def __init__(self, data: Any, buffers: list[Any], extracted: list[Any]) -> None:
        self._file = io.BytesIO(data)
        super().__init__(self._file, buffers=buffers)
        self.extracted = extracted

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) == 2 and pid[0] == EXTRACTED_BUFFER_TAG:
            return self.extracted[pid[1]]
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")

    def load_all(self, size: int) -> list[Any]:
        """The values of a component stream of `size` bytes: one pickled list, or several
        written one after another by one pickler (`continue_pickling`), concatenated; later
        lists refer to the earlier ones' objects through the shared memo."""
        values: list[Any] = []
        while True:
            values.extend(self.load())
            if self._file.tell() >= size:
                return values


@dataclass
class Pickled:
    """One pickled component: its stream, its out-of-band buffers, the objects it holds."""

    stream: bytes
    buffers: list[pickle.PickleBuffer]
    extracted: list[tuple[str, bytes | bytearray]] = field(default_factory=list)
    memo: dict[int, Any] = field(default_factory=dict)
    #: The pickler that wrote `stream` and its file, so `continue_pickling` can go on.
    pickler: NamespacePickler | None = field(default=None, repr=False)
    out: io.BytesIO | None = field(default=None, repr=False)
    #: Ids of the objects pickling stopped at (`stop_at`): when any, the stream is partial,
    #: good for grouping only.
    stopped: set[int] = field(default_factory=set)
    #: The pods it refers to, the figures it holds, whether an artist of them is animated.
    pods_used: set[str] = field(default_factory=set)
    pod_objects: dict[int, Any] = field(default_factory=dict)
    figures: list[Any] = field(default_factory=list)
    animated: bool = False


_BYTES_TYPES = frozenset({bytes, bytearray})


def _holds_big_bytes(memo: dict[int, Any]) -> bool:
    """Whether a pickle's memo holds a bytes or bytearray object of OUT_OF_BAND_MIN or more
    (the bytes objects are picked out at C speed: a figure's memo has 100,000s of objects)."""
    objects = list(map(MEMO_OBJECT, memo.values()))
    picked = itertools.compress(objects, map(_BYTES_TYPES.__contains__, map(type, objects)))
    return any(len(obj) >= OUT_OF_BAND_MIN for obj in picked)


#: Exact types `_flat_memo` looks through: atoms the pickler memoises, if at all, as values.
_FLAT_MEMBER_TYPES = frozenset({str, int, float, bool, complex, type(None)})
#: Containers at least this long are checked for being flat (below, copying the memo is as
#: cheap as looking).
_FLAT_MIN_LENGTH = 256


def _flat_memo(values: list[object]) -> dict[int, Any] | None:
    """The identity-bearing part of the pickler's memo after pickling `values`, when every
    value is a big builtin container of nothing but numbers, strings, booleans and None
    (a list of 5,000 names): the values themselves. Copying the memo would copy an entry
    for every string. None otherwise (the memo must be copied)."""
    memo: dict[int, Any] = {id(values): (0, values)}
    flat = _FLAT_MEMBER_TYPES
    for value in values:
        kind = type(value)
        members: Any
        if kind is dict:
            members = itertools.chain(value.keys(), value.values())  # type: ignore[attr-defined]
        elif kind in (list, tuple, set, frozenset):
            members = value
        else:
            return None
        if len(value) < _FLAT_MIN_LENGTH:  # type: ignore[arg-type]
            return None
        if not all(type(member) in flat for member in members):
            return None
        memo[id(value)] = (len(memo), value)
    return memo


def pickle_values(
    namespace: dict[str, object],
    values: list[object],
    stop_at: set[int] | None = None,
    *,
    extract: bool = False,
    pod_refs: dict[int, tuple[str, int]] | None = None,
    probe_animated: bool = False,
) -> Pickled:
    """Pickle `values` as one stream, big buffers out of band (raises what pickling raises).

    With `stop_at`, objects (other than builtin containers) whose ids it holds are not
    pickled: they are recorded in `stopped`, and a pickle that stopped is partial, for
    grouping only (those objects and all they hold are in another pickle already).
    With `extract` (the same values needed it last time), big bytes objects are taken out of
    band in the one pass, instead of in a second pass once the first shows they are there.
    With `pod_refs`, objects that pods pickled before hold are referred to (`_pod_object`);
    the memo is always the one of the pickler that wrote the stream (a pod's index).
    """
    buffers: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    kind = ExtractingPickler if extract else NamespacePickler
    pickler = kind(out, namespace, buffers, stop_at)
    pickler.pod_refs = pod_refs
    pickler.probe_animated = probe_animated
    pickler.dump(values)
    stream = out.getvalue()
    memo = _flat_memo(values)
    if memo is None:
        memo = pickler.memo.copy()
    plain = not pickler.stopped and not isinstance(pickler, ExtractingPickler)
    if plain and len(stream) > LARGE_STREAM and _holds_big_bytes(memo):
        buffers = []
        out = io.BytesIO()
        pickler = ExtractingPickler(out, namespace, buffers)
        pickler.pod_refs = pod_refs
        pickler.probe_animated = probe_animated
        pickler.dump(values)
        stream = out.getvalue()
        memo = pickler.memo.copy()
    extracted = pickler.extracted if isinstance(pickler, ExtractingPickler) else []
    pickled = Pickled(stream, buffers, extracted, memo, pickler, out)
    if pickler.stopped:
        pickled.pickler = pickled.out = None
        pickled.stopped = pickler.stopped
    pickled.pods_used = set(pickler.pods_used)
    pickled.pod_objects = dict(pickler.pod_objects)
    pickled.figures = list(pickler.figures)
    pickled.animated = pickler.animated
    return pickled


def continue_pickling(
    namespace: dict[str, object], first: Pickled, first_values: list[object], values: list[object]
) -> Pickled:
    """A component: `first` (the pickle of `first_values`) followed by `values`, pickled by
    the same pickler, so objects `first` already holds are memo references (pickled once,
    aliasing kept) and are not pickled again. `first` itself is left as it was, even when
    this raises; its pickler continues only once.

    A stream that ends up large with big bytes objects in band is pickled afresh with them
    out of band (`pickle_values`), as a single pickling would have been.
    """
    pickler, out = first.pickler, first.out
    first.pickler = first.out = None
    if pickler is None or out is None:
        return pickle_values(namespace, [*first_values, *values])
    pickler.stop_at = None  # the group is complete: everything it reaches is pickled
    kept_buffers, kept_extracted = len(first.buffers), len(first.extracted)
    extracted = pickler.extracted if isinstance(pickler, ExtractingPickler) else []
    try:
        pickler.dump(values)
        buffers, extracted = list(pickler.buffers), list(extracted)
    finally:
        del first.buffers[kept_buffers:]  # the same lists as the pickler's
        del first.extracted[kept_extracted:]
    stream = out.getvalue()
    large = not isinstance(pickler, ExtractingPickler) and len(stream) > LARGE_STREAM
    if large and _gained_big_bytes(first, len(stream), pickler):
        return pickle_values(namespace, [*first_values, *values], pod_refs=pickler.pod_refs)
    together = Pickled(stream, buffers, extracted)
    together.pods_used = set(pickler.pods_used)
    together.figures = list(pickler.figures)
    return together


def _gained_big_bytes(first: Pickled, size: int, pickler: NamespacePickler) -> bool:
    """Whether a continued stream (now `size` bytes) holds a big bytes object in band: in
    `first`'s part (its memo, copied already), or in what was added, which can hold one
    only if it added OUT_OF_BAND_MIN bytes or more (else no copy of the memo is made)."""
    if _holds_big_bytes(first.memo):
        return True
    return size - len(first.stream) >= OUT_OF_BAND_MIN and _holds_big_bytes(pickler.memo.copy())


#: Opcodes the C pickler writes outside any frame: PROTO (one byte after it), and the
#: header of a payload of a frame's size or more, by the width of its length field.
_PROTO = 0x80
_FRAME = 0x95
_UNFRAMED_LENGTHS = {ord("B"): 4, ord("X"): 4, 0x8E: 8, 0x8D: 8, 0x96: 8}


def unframed(stream: bytes) -> bytes:
    """The same pickle without its FRAME opcodes (framing is optional to an unpickler).

    The C pickler of protocol 4+ cuts its output into frames of about 64 KiB, each opened
    by a FRAME opcode and its 8-byte length: after a few bytes inserted or removed, every
    later frame starts at another place of the content, and its header with it, so a
    stream cut by content (`chunks.content_cuts`) would differ in every chunk after the
    change. Any byte sequence this does not recognise leaves the stream as it was."""
    view = memoryview(stream)
    parts: list[memoryview] = []
    position, end = 0, len(view)
    while position < end:
        opcode = view[position]
        if opcode == _FRAME and position + 9 <= end:
            length = int.from_bytes(view[position + 1 : position + 9], "little")
            parts.append(view[position + 9 : position + 9 + length])
            position += 9 + length
        elif opcode == _PROTO and position + 2 <= end:
            parts.append(view[position : position + 2])
            position += 2
        elif opcode in _UNFRAMED_LENGTHS:
            width = _UNFRAMED_LENGTHS[opcode]
            length = int.from_bytes(view[position + 1 : position + 1 + width], "little")
            stop = position + 1 + width + length
            parts.append(view[position:stop])
            position = stop
        else:
            return stream
    if position != end:
        return stream
    return b"".join(parts)


def identity_ids(pickled: Pickled, atoms: Atoms) -> set[int]:
    """Ids of the objects in a pickle whose identity matters (mutable, shared by reference);
    immutable values and singletons are atomic (see `atoms`)."""
    found, riders = atoms.identity_bearing(pickled.memo)
    ids = set(found)
    ids.discard(id(_NAMESPACE_REF))
    return ids - riders


def components(names: list[str], ids: dict[str, set[int]]) -> list[list[str]]:
    """The components: names whose pickles share an identity-bearing object (union-find)."""
    parent = {name: name for name in names}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    owner: dict[int, str] = {}
    for name in names:
        mine = ids[name]
        for object_id in owner.keys() & mine:  # set operations at C speed; loops on shared
            root_a, root_b = find(name), find(owner[object_id])
            if root_a != root_b:
                parent[root_b] = root_a
        owner.update(dict.fromkeys(mine - owner.keys(), name))
    by_root: dict[str, list[str]] = {}
    for name in names:
        by_root.setdefault(find(name), []).append(name)
    return sorted((sorted(names) for names in by_root.values()), key=lambda names: names[0])

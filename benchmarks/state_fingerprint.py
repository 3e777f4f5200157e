"""Fingerprints of a kernel's variables, to tell whether a restore brought every value back.

Runs inside the kernels (imported as `benchmarks.state_fingerprint`, no name bound; called
through `KernelHost.call`) and reads the namespace without running a cell, so neither our
capture nor Kishu's hooks see it. `snapshot()` digests every variable: the live state right
after a cell, then the state a restore or checkout produced; `compare()` (host side) says
which names came back wrong. The walk is deterministic and reads values without changing
them (no drawing, no lazy caches filled: matplotlib artists are read through the attributes
that hold their data).

What is compared, by value (a BLAKE2b digest over a canonical walk):
- None, bools, numbers, strings, bytes: their repr / bytes; numpy arrays: dtype, shape, raw
  bytes (object arrays element by element); numpy scalars and dtypes: repr; random generators:
  their bit-generator state;
- pandas DataFrame / Series / Index: dtypes, names, index and every column's values;
- lists, tuples, dicts (in order), sets (order-free); functions defined in the notebook: code,
  constants, defaults and closure values; library functions, classes and modules: their names;
- matplotlib figures, axes and artists: size, titles, labels, data and view limits, and each
  artist's data (line data, image arrays, collection offsets, patch geometry, text);
  colormaps: their attributes and the lookup table they give (built on a copy when the
  colormap has not built it yet: the table is a lazy cache);
- any other object: its type and its `__dict__` (sorted), else its repr with addresses masked.
Objects shared inside one variable are walked once, so an alias lost inside a value shows.

What is compared by type only (documented, not a value): weak references and weak
containers, matplotlib callback registries and transforms (ids and caches that pickling and
drawing change), values nested deeper than DEPTH levels or past NODE_BUDGET nodes.

What cannot be compared (reported per variable as `uncomparable`, counted neither right nor
wrong): generators, coroutines, frames and tracebacks (suspended state is not inspectable),
and external resources: open files, sockets, locks, threads, database connections.
Identity between different variables (`a is b`) is not compared.
"""

from __future__ import annotations

import copy
import hashlib
import pickle
import re
import sys
import types
import weakref
from typing import Any

DEPTH = 12
NODE_BUDGET = 200_000
PYPLOT = "<pyplot figures>"
IPYTHON_NAMES = frozenset(
    {"In", "Out", "_", "__", "___", "_i", "_ii", "_iii", "_oh", "_ih", "_dh", "exit", "quit"}
    | {"get_ipython", "_kishu", "kishu", "init_kishu"}  # and what Kishu adds
)
_IPYTHON_PATTERN = re.compile(r"_i\d+|_\d+|__\w*__")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_UNINSPECTABLE = (
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.FrameType,
    types.TracebackType,
)
_RESOURCE_MODULES = ("_io", "io", "socket", "_socket", "_thread", "threading", "sqlite3")
_WEAK = (weakref.ref, weakref.WeakValueDictionary, weakref.WeakKeyDictionary, weakref.WeakSet)
#: the attributes of a matplotlib artist that hold what it shows
_ARTIST_DATA = (
    "_text",
    "_x",
    "_y",
    "_xorig",
    "_yorig",
    "_color",
    "_linestyle",
    "_linewidth",
    "_marker",
    "_A",
    "_extent",
    "_offsets",
    "_sizes",
    "_facecolor",
    "_edgecolor",
    "_facecolors",
    "_edgecolors",
    "_paths",
    "_coordinates",
    "_x0",
    "_y0",
    "_width",
    "_height",
    "center",
    "r",
    "theta1",
    "theta2",
    "_label",
    "_visible",
    "_alpha",
    "_zorder",
    "texts",
)


class Uncomparable(Exception):
    """A value whose state cannot be read back (the reason is the message)."""


def _type_name(value: object) -> str:
    cls = type(value)
    return f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls.__name__)}"


def _module(name: str) -> Any:
    return sys.modules.get(name)


class _Walk:
    """One value's canonical walk into a digest."""

    def __init__(self) -> None:
        self.digest = hashlib.blake2b(digest_size=16)
        self.nodes = 0
        self.seen: dict[int, int] = {}  # mutable objects walked: id -> order of first visit
        self.keep: list[object] = []  # keeps walked objects alive, so ids stay unique

    def token(self, *parts: object) -> None:
        for part in parts:
            self.digest.update(str(part).encode("utf-8", "surrogatepass"))
            self.digest.update(b"\x00")

    def raw(self, data: bytes | memoryview) -> None:
        self.token(len(data))
        self.digest.update(data)

    def value(self, obj: object, depth: int = 0) -> None:
        self.nodes += 1
        if self.nodes > NODE_BUDGET:
            self.token("<budget>")
            return
        cls = type(obj)
        if obj is None or cls in (bool, int, float, complex, str, range, slice):
            self.token(cls.__name__, repr(obj))
            return
        if isinstance(obj, (bytes, bytearray)) and cls in (bytes, bytearray):
            self.raw(bytes(obj))
            return
        if isinstance(obj, _UNINSPECTABLE):
            raise Uncomparable(f"{_type_name(obj)}: suspended state is not inspectable")
        if (
            getattr(cls, "__module__", "") in _RESOURCE_MODULES
            and not isinstance(obj, type)
            and cls.__name__ not in {"StringIO", "BytesIO"}
        ):
            raise Uncomparable(f"{_type_name(obj)}: an external resource")
        if isinstance(obj, _WEAK):
            self.token("<weak>", cls.__name__)
            return
        if depth > DEPTH:
            self.token("<deep>", _type_name(obj))
            return
        if isinstance(obj, (tuple, frozenset, types.ModuleType, type)):
            self._compound(obj, depth)  # immutable or global: no identity to keep
            return
        order = self.seen.get(id(obj))
        if order is not None:
            self.token("<ref>", order)
            return
        self.seen[id(obj)] = len(self.seen)
        self.keep.append(obj)
        self._compound(obj, depth)

    def _compound(self, obj: Any, depth: int) -> None:
        inner = depth + 1
        numpy = _module("numpy")
        pandas = _module("pandas")
        if numpy is not None and self._numpy(numpy, obj, inner):
            return
        if pandas is not None and self._pandas(pandas, obj, inner):
            return
        if _module("matplotlib") is not None and self._matplotlib(obj, inner):
            return
        if isinstance(obj, (list, tuple)):
            self.token(_type_name(obj), len(obj))
            for item in obj:
                self.value(item, inner)
            if type(obj) not in (list, tuple) and hasattr(obj, "__dict__"):
                self._attributes(obj, inner)
        elif isinstance(obj, dict):
            self.token(_type_name(obj), len(obj))
            for key, item in list(obj.items()):
                self.value(key, inner)
                self.value(item, inner)
            if hasattr(obj, "default_factory"):
                self.value(obj.default_factory, inner)
        elif isinstance(obj, (set, frozenset)):
            self.token(_type_name(obj), *sorted(fingerprint(item, inner) for item in obj))
        elif isinstance(obj, types.ModuleType):
            self.token("module", obj.__name__)
        elif isinstance(obj, type):
            self.token("class", obj.__module__, obj.__qualname__)
            if obj.__module__ == "__main__":
                self.token(*sorted(vars(obj)))
        elif isinstance(obj, types.FunctionType):
            self._function(obj, inner)
        elif isinstance(obj, types.MethodType):
            self.token("method", obj.__func__.__qualname__)
            self.value(obj.__self__, inner)
        elif isinstance(obj, types.BuiltinFunctionType):
            self.token("builtin", getattr(obj, "__module__", ""), obj.__qualname__)
        elif hasattr(obj, "__dict__") and isinstance(vars(obj), dict):
            self.token(_type_name(obj))
            self._attributes(obj, inner)
        else:
            self.token(_type_name(obj), _ADDRESS.sub("0x?", repr(obj)))

    def _attributes(self, obj: object, depth: int) -> None:
        for key, item in sorted(vars(obj).items()):
            self.token(key)
            self.value(item, depth)

    def _function(self, func: types.FunctionType, depth: int) -> None:
        self.token("function", func.__module__, func.__qualname__)
        if func.__module__ != "__main__":
            return
        self._code(func.__code__)
        self.value(func.__defaults__, depth)
        self.value(func.__kwdefaults__, depth)
        for cell in func.__closure__ or ():
            try:
                self.value(cell.cell_contents, depth)
            except ValueError:  # an empty cell
                self.token("<empty cell>")

    def _code(self, code: types.CodeType) -> None:
        self.raw(code.co_code)
        self.token(*code.co_names, *code.co_varnames)
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                self._code(constant)
            else:
                self.token(type(constant).__name__, repr(constant))

    def _numpy(self, np: Any, obj: object, depth: int) -> bool:
        if isinstance(obj, np.ndarray):
            self.token(_type_name(obj), obj.dtype.descr, obj.shape)
            if obj.dtype.hasobject:
                for item in obj.flat:
                    self.value(item, depth)
            else:
                self.raw(np.ascontiguousarray(obj).view(np.uint8).reshape(-1).data)
            if isinstance(obj, np.ma.MaskedArray):
                self.raw(np.ascontiguousarray(np.ma.getmaskarray(obj)).view(np.uint8).data)
            return True
        if isinstance(obj, (np.generic, np.dtype)):
            self.token(_type_name(obj), repr(obj))
            return True
        if isinstance(obj, np.random.Generator):
            self.token("Generator")
            self.value(obj.bit_generator.state, depth)
            return True
        if isinstance(obj, np.random.RandomState):
            self.token("RandomState")
            self.value(obj.get_state(legacy=False), depth)
            return True
        if isinstance(obj, np.random.BitGenerator):
            self.token(_type_name(obj))
            self.value(obj.state, depth)
            return True
        return False

    def _pandas(self, pd: Any, obj: object, depth: int) -> bool:
        if isinstance(obj, pd.DataFrame):
            self.token("DataFrame", obj.shape)
            self.value(obj.index, depth)
            self.value(obj.columns, depth)
            for position in range(obj.shape[1]):
                self.value(obj.iloc[:, position], depth)
            return True
        if isinstance(obj, pd.Series):
            self.token("Series", repr(obj.dtype), repr(obj.name))
            self.value(obj.index, depth)
            self.value(obj.to_numpy(), depth)
            return True
        if isinstance(obj, pd.Index):
            self.token(_type_name(obj), repr(obj.dtype), repr(obj.names))
            self.value(obj.to_numpy(), depth)
            return True
        return False

    def _matplotlib(self, obj: object, depth: int) -> bool:
        mpl = _matplotlib_classes()
        if isinstance(obj, mpl["FigureBase"]):
            self.token(_type_name(obj))
            for name in ("_dpi", "bbox_inches"):
                if hasattr(obj, name):
                    self.value(getattr(obj, name), depth)
            title = getattr(obj, "_suptitle", None)
            self.token(title.get_text() if title is not None else "")
            for group in ("axes", "texts", "legends", "images", "lines", "patches", "subfigs"):
                self.value(list(getattr(obj, group, [])), depth)
        elif isinstance(obj, mpl["Axes"]):
            self.token(_type_name(obj))
            for text in (obj.title, obj._left_title, obj._right_title):
                self.token(text.get_text())
            self.token(obj.xaxis.label.get_text(), obj.yaxis.label.get_text())
            self.token(obj.xaxis.get_scale(), obj.yaxis.get_scale())
            for box in (obj.dataLim, obj._viewLim, obj._position):
                self.value(box, depth)
            self.value(list(obj._children), depth)
            self.value(obj.legend_, depth)
        elif isinstance(obj, mpl["Artist"]):
            self.token(_type_name(obj))
            attributes = vars(obj)
            for name in _ARTIST_DATA:
                if name in attributes:
                    self.token(name)
                    self.value(attributes[name], depth)
            if isinstance(obj, mpl["Patch"]) and "_path" in attributes:
                self.value(attributes["_path"], depth)
        elif isinstance(obj, mpl["Bbox"]):
            self.token("Bbox")
            self.value(obj._points, depth)
        elif isinstance(obj, (mpl["TransformNode"], mpl["CallbackRegistry"])):
            self.token(_type_name(obj))  # by type only: ids and caches
        elif isinstance(obj, mpl["Colormap"]):
            # its lookup table is a lazy cache (built when shown): compare the table it
            # gives, built on a copy, with the attributes other than the cache itself
            self.token(_type_name(obj))
            for key, item in sorted(vars(obj).items()):
                if key not in ("_lut", "_isinit"):
                    self.token(key)
                    self.value(item, depth)
            table = copy.copy(obj)
            if not table._isinit:
                table._init()
            self.value(table._lut, depth)
        else:
            return False
        return True


_MATPLOTLIB: dict[str, Any] = {}


def _matplotlib_classes() -> dict[str, Any]:
    """matplotlib's classes the walk treats apart (imported once matplotlib is loaded)."""
    if not _MATPLOTLIB:
        from matplotlib.artist import Artist
        from matplotlib.axes import Axes
        from matplotlib.cbook import CallbackRegistry
        from matplotlib.colors import Colormap
        from matplotlib.figure import FigureBase
        from matplotlib.patches import Patch
        from matplotlib.transforms import Bbox, TransformNode

        _MATPLOTLIB.update(
            FigureBase=FigureBase,
            Axes=Axes,
            Artist=Artist,
            Patch=Patch,
            Bbox=Bbox,
            TransformNode=TransformNode,
            CallbackRegistry=CallbackRegistry,
            Colormap=Colormap,
        )
    return _MATPLOTLIB


def fingerprint(value: object, depth: int = 0) -> str:
    """The digest of one value (Uncomparable when its state cannot be read)."""
    walk = _Walk()
    walk.value(value, depth)
    return walk.digest.hexdigest()


def _pyplot_state() -> dict[str, Any] | None:
    """pyplot's figure manager: the open figures by number, their content, the current one."""
    if "matplotlib.pyplot" not in sys.modules:
        return None
    from matplotlib._pylab_helpers import Gcf

    managers = sorted(Gcf.get_all_fig_managers(), key=lambda manager: manager.num)
    walk = _Walk()
    for manager in managers:
        walk.token(manager.num)
        walk.value(manager.canvas.figure)
    active = Gcf.get_active()
    walk.token("active", active.num if active is not None else None)
    return {
        "digest": walk.digest.hexdigest(),
        "figures": [manager.num for manager in managers],
        "active": active.num if active is not None else None,
    }


def _user_namespace() -> tuple[dict[str, object], dict[str, object]]:
    from IPython import get_ipython

    shell = get_ipython()
    hidden = getattr(shell, "user_ns_hidden", {})
    return shell.user_ns, hidden if isinstance(hidden, dict) else {}


def state_names() -> list[str]:
    """The names of the user's variables (not IPython's, not Kishu's)."""
    namespace, hidden = _user_namespace()
    return sorted(
        name
        for name, value in list(namespace.items())
        if isinstance(name, str)
        and name not in IPYTHON_NAMES
        and not _IPYTHON_PATTERN.fullmatch(name)
        and not (name in hidden and hidden[name] is value)
    )


def _forget_this_call() -> None:
    """Take this call's own entry out of ditto's change journal, when the kernel has one.

    The journal counts a kernel call of anything but ditto's own functions as code no cell
    showed (`note_kernel_call`), so the checkpoint after each fingerprint was a whole one:
    the bench measured its own probe (on skl-clustering-session, a no-op display cell after
    a restore target took 2.3-6 s, 121 pickles). The fingerprint only reads. Were it to
    change a value, our next capture would keep the stale pickle and a later restore would
    compare wrong: dropping the entry can only make our restores look worse, never better.
    A kernel without ditto's journal (Kishu's) is left alone: nothing is attached to it."""
    journal_module = sys.modules.get("ditto_jupyter.kernel.capture.journal")
    from IPython import get_ipython

    shell = get_ipython()
    journal: Any = getattr(journal_module, "_journals", {}).get(id(shell))
    entries = getattr(journal, "_entries", None)
    if entries and entries[-1].touched is None and entries[-1].serial == journal.serial:
        entries.pop()  # the journal as it was before the call: its entries and its serial
        journal.serial -= 1


def snapshot() -> dict[str, Any]:
    """Every variable's digest and type, the uncomparable ones with why, and pyplot's state
    (read only: this call's own change-journal entry is dropped, `_forget_this_call`)."""
    _forget_this_call()
    namespace, _ = _user_namespace()
    values: dict[str, str] = {}
    kinds: dict[str, str] = {}
    uncomparable: dict[str, str] = {}
    for name in state_names():
        value = namespace[name]
        kinds[name] = _type_name(value)
        try:
            values[name] = fingerprint(value)
        except Uncomparable as error:
            uncomparable[name] = str(error)
        except Exception as error:  # a value whose attributes cannot be read is reported
            uncomparable[name] = f"could not be read: {type(error).__name__}: {error}"[:200]
    return {
        "values": values,
        "types": kinds,
        "uncomparable": uncomparable,
        "pyplot": _pyplot_state(),
    }


def unstable_pickles(limit: int = 8) -> list[dict[str, Any]]:
    """Variables whose pickle differs between two consecutive picklings, largest first.

    A capture that fingerprints pickle bytes re-saves these after every cell, changed or not.
    """
    namespace, _ = _user_namespace()
    found: list[dict[str, Any]] = []
    for name in state_names():
        value = namespace[name]
        if isinstance(value, (types.ModuleType, type, types.FunctionType)):
            continue
        try:
            first = pickle.dumps(value, protocol=5)
            second = pickle.dumps(value, protocol=5)
        except Exception:  # not picklable on its own: not this diagnosis
            continue
        if first != second:
            found.append({"name": name, "type": _type_name(value), "bytes": len(second)})
    found.sort(key=lambda entry: -int(entry["bytes"]))
    return found[:limit]


def pickle_cost() -> dict[str, float]:
    """What pickling every variable once, together, costs: seconds and bytes (an anchor for
    a checkpoint's time: a capture that re-pickles everything after each cell costs this)."""
    import time

    namespace, _ = _user_namespace()
    picklable = []
    for name in state_names():
        try:
            pickle.dumps(namespace[name], protocol=5)
        except Exception:  # not picklable on its own: left out of the anchor
            continue
        picklable.append(namespace[name])
    started = time.perf_counter()
    data = pickle.dumps(picklable, protocol=5)
    return {"seconds": time.perf_counter() - started, "bytes": float(len(data))}


# ---- host side ---------------------------------------------------------------------------


def compare(
    live: dict[str, Any], restored: dict[str, Any], declared_lost: set[str]
) -> dict[str, list[str]]:
    """What a restore got wrong against the live snapshot of the same cell.

    `wrong` names a value that differs, one missing that was not declared unrestorable, one
    present that was not there live, or pyplot's figures; `declared` names values the engine
    said it could not restore; `uncomparable` those that cannot be compared either way.
    """
    wrong: list[str] = []
    declared: list[str] = []
    live_names = set(live["types"])
    restored_names = set(restored["types"])
    for name in sorted(live_names - restored_names):
        if name in declared_lost:
            declared.append(name)
        else:
            wrong.append(f"{name} (missing)")
    for name in sorted(live_names & restored_names):
        if name in live["values"] and restored["values"].get(name) != live["values"][name]:
            wrong.append(f"{name} ({live['types'][name]} differs)")
    wrong += [f"{name} (not there live)" for name in sorted(restored_names - live_names)]
    live_plt, restored_plt = live.get("pyplot"), restored.get("pyplot")
    if live_plt is not None and (
        restored_plt is None or restored_plt["digest"] != live_plt["digest"]
    ):
        got = "pyplot not imported" if restored_plt is None else _figures(restored_plt)
        wrong.append(f"{PYPLOT} (live: {_figures(live_plt)}; restored: {got})")
    uncomparable = sorted(set(live["uncomparable"]) | set(restored["uncomparable"]))
    return {"wrong": wrong, "declared": declared, "uncomparable": uncomparable}


def _figures(state: dict[str, Any]) -> str:
    numbers: list[int] = state["figures"]
    if numbers and numbers == list(range(numbers[0], numbers[-1] + 1)) and len(numbers) > 2:
        shown = f"{numbers[0]}-{numbers[-1]}"
    else:
        shown = ", ".join(str(n) for n in numbers)
    return f"figures [{shown}] current {state['active']}"

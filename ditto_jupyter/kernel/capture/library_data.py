"""The library's data: what a capture counts as the libraries', found by one walk.

One rule, in two parts, both found by one walk of `sys.modules` and kept in one cache
(`LibraryData`, keyed on the set of modules and the notebook's namespace):

- *library objects* (`objects`): every changeable global of every module but the
  notebook's own (not types, functions, modules, immutable values, import machinery, nor
  matplotlib's artists, which `figure_watch` follows), and in matplotlib's packages
  (`MATPLOTLIB_PACKAGES`) also what its classes cache as class attributes and what those
  objects keep in their `__dict__`. Code anywhere can change them unnamed: `library_held`
  digests the ones a kept component holds;
- *library containers* (`containers`): the builtin containers that are matplotlib's own
  data (its `rcParams` values, the containers its modules and classes hold, its colour
  tables). Never the notebook's to change in place, so each figure pod may carry its own
  copy (`pods`).

`ids` is their union: a capture's components and pods never tie values together through
them (`planning`).

The object walk is kept: when modules were imported since, only they are walked (and
matplotlib's again, whose classes cache paths lazily); when one was removed or replaced, all
of them. Walking every module costs 10-30 ms in a kernel with scikit-learn loaded (2,000
modules, 80,000 globals). A global that a module walked before binds anew later, without
being imported again, is not found. matplotlib's containers are walked once per module,
the first time it is seen loaded: what a library adds later is not counted (its
containers then make a capture give up pods, as before).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass

from ditto_jupyter.kernel.capture.rules import imported_class

#: matplotlib's packages: the library whose containers and class caches are its data.
MATPLOTLIB_PACKAGES = ("matplotlib", "mpl_toolkits")
#: Their submodules' prefixes: the modules whose classes and globals are looked inside.
_CACHING = tuple(f"{package}." for package in MATPLOTLIB_PACKAGES)
#: Exact types the pickler never asks its reducer about: a pod cannot lend them out.
BUILTIN_CONTAINERS = frozenset({dict, list, set, bytearray})
#: The most containers one walk of matplotlib's modules visits (it stops there).
LIBRARY_DATA_LIMIT = 200_000
#: Exact types the container walk looks inside (builtin containers, tuples of them).
_WALKED = frozenset({dict, list, set, frozenset, tuple})
#: Library classes whose instances the container walk looks inside too: the colormap
#: registry and the colormaps it holds (a colormap fetched by name is a shallow copy: it
#: shares their segment data and colour lists).
_DATA_HOLDERS = (("matplotlib.cm", "ColormapRegistry"), ("matplotlib.colors", "Colormap"))

#: Globals that are never state a cell can change behind the journal's back: types,
#: functions and modules (pickled by reference), immutable values, import machinery.
_UNCHANGING = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
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
    importlib.machinery.ModuleSpec,
    importlib.machinery.SourceFileLoader,
    importlib.machinery.ExtensionFileLoader,
)
#: Exact types of `_UNCHANGING`: a set look-up decides most globals (functions, classes,
#: modules, strings) before the `isinstance` walk of the tuple.
_UNCHANGING_EXACT = frozenset(_UNCHANGING)
#: What the object walk takes from inside a library object besides numpy's arrays.
_INNER_KINDS = frozenset({dict, list, set})
#: The names the notebook's own module goes by in `sys.modules`.
_NOTEBOOK_MODULES = frozenset({"__main__", "__mp_main__"})
#: Modules whose globals are the walks themselves (each holds the last): never walked.
_OWN_MODULES = frozenset({__name__, "ditto_jupyter.kernel.capture.library_held"})


@dataclass
class _Objects:
    """The modules walked so far and the library objects they hold."""

    notebook: int  # id() of the notebook's namespace it was made for
    verdicts: dict[type, bool]  # by exact type: whether its instances can change
    walked: dict[str, object]  # name -> module: every module walked but matplotlib's
    settled: dict[int, object]  # what `walked` holds
    found: dict[int, object]  # `settled` and what matplotlib's modules hold now


class _Containers:
    """The containers of matplotlib's modules, each module walked once. The containers
    themselves are kept, so no id in `ids` can be reused by a notebook's object."""

    def __init__(self) -> None:
        self.walked: set[str] = set()
        self.held: list[object] = []
        self.ids: set[int] = set()


class LibraryData:
    """The library objects and containers of this process (see the module), kept while
    no module came or went and the notebook's namespace is the same."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        """Drop everything found: the next question walks every module from scratch."""
        self._count = -1  # len(sys.modules) when last walked
        self._objects: _Objects | None = None
        self._containers = _Containers()
        #: The last union `ids` made: what it was made of and the union.
        self._union: tuple[dict[int, object], set[int], int, set[int]] | None = None

    def objects(self, notebook: dict[str, object]) -> dict[int, object]:
        """Id -> object of every library object (see the module)."""
        self._refresh(notebook)
        assert self._objects is not None
        return self._objects.found

    def containers(self, notebook: dict[str, object]) -> set[int]:
        """Ids of matplotlib's builtin containers (a new set each call)."""
        self._refresh(notebook)
        return _configuration() | self._containers.ids

    def ids(self, notebook: dict[str, object]) -> set[int]:
        """The ids of the library's objects and containers, made again only when one of
        them changed (it holds 100,000s of ids once matplotlib is loaded: a capture after
        a short cell would spend more on it than on its pickles). Read only: shared."""
        self._refresh(notebook)
        assert self._objects is not None
        objects, configuration, data = self._objects.found, _configuration(), self._containers.ids
        last = self._union
        fresh = last is not None and last[0] is objects and last[1] == configuration
        if last is not None and fresh and last[2] == len(data):
            return last[3]
        union = objects.keys() | configuration | data
        self._union = (objects, configuration, len(data), union)
        return union

    def _refresh(self, notebook: dict[str, object]) -> None:
        """Walk the modules again if the set of modules or the notebook changed."""
        modules = sys.modules
        count = len(modules)
        last = self._objects
        if count == self._count and last is not None and last.notebook == id(notebook):
            return
        names = list(modules)
        if count != self._count:
            _walk_containers(self._containers, names)
        self._objects = _walk_objects(last, notebook, modules)
        self._count = count


#: The one `LibraryData` of this process.
LIBRARY = LibraryData()


def _configuration() -> set[int]:
    """Ids of the builtin containers among matplotlib's `rcParams` values (such as the
    `path.effects` list every artist holds)."""
    matplotlib = sys.modules.get("matplotlib")
    found: set[int] = set()
    for name in ("rcParams", "rcParamsDefault", "rcParamsOrig"):
        params = getattr(matplotlib, name, None)
        if isinstance(params, dict):
            found.update(id(v) for v in dict.values(params) if type(v) in BUILTIN_CONTAINERS)
    return found


def _walk_containers(data: _Containers, names: list[str]) -> None:
    """Add the builtin containers held by the globals of matplotlib's modules not walked
    yet and by the classes they define, and inside its colormaps (`_DATA_HOLDERS`)."""
    new = [
        name
        for name in names
        if name.partition(".")[0] in MATPLOTLIB_PACKAGES and name not in data.walked
    ]
    if not new:
        return
    holders = tuple(
        cls
        for module, attribute in _DATA_HOLDERS
        if isinstance(cls := getattr(sys.modules.get(module), attribute, None), type)
    )
    walked: dict[type, bool] = dict.fromkeys(_WALKED, True)  # by exact type: look inside?

    def inside(value: object) -> bool:
        kind = type(value)
        verdict = walked.get(kind)
        if verdict is None:
            verdict = walked[kind] = issubclass(kind, holders)
        return verdict

    pending: list[object] = []
    for name in new:
        data.walked.add(name)
        namespace = getattr(sys.modules.get(name), "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for value in list(namespace.values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                pending.extend(v for v in list(vars(value).values()) if type(v) in _WALKED)
            elif inside(value):
                pending.append(value)
    seen = {id(obj) for obj in data.held}
    while pending and len(seen) < LIBRARY_DATA_LIMIT:
        value = pending.pop()
        kind = type(value)
        if id(value) in seen:
            continue
        seen.add(id(value))
        data.held.append(value)
        if kind in BUILTIN_CONTAINERS:
            data.ids.add(id(value))
        members: list[object]
        if kind is dict:
            members = [*dict.keys(value), *dict.values(value)]  # type: ignore[arg-type]
        elif kind in _WALKED:
            members = list(value)  # type: ignore[call-overload]
        else:  # a colormap or the registry: its attributes
            members = [getattr(value, "__dict__", None)]
        pending.extend(m for m in members if inside(m))


def _walk_objects(
    last: _Objects | None, notebook: dict[str, object], modules: Mapping[str, object]
) -> _Objects:
    """The library objects of every module but the notebook's own (`__main__`, and
    `__mp_main__`, multiprocessing's other name for it, and any module whose namespace is
    `notebook`): only the modules not walked before (and matplotlib's), unless one was
    removed or replaced or the notebook is another (then all of them)."""
    if (
        last is None
        or last.notebook != id(notebook)
        or any(modules.get(name) is not module for name, module in last.walked.items())
    ):  # from scratch
        verdicts: dict[type, bool] = dict.fromkeys(_UNCHANGING_EXACT, False)
        walked: dict[str, object] = {}
        settled: dict[int, object] = {}
    else:
        verdicts, walked, settled = last.verdicts, dict(last.walked), dict(last.settled)
    # matplotlib imported since the last walk leaves it as it was: no module walked before
    # could hold an artist then, and no class made before Artist can be a subclass of it
    artist = imported_class("matplotlib.artist", "Artist")
    skipped = (*_UNCHANGING, artist) if artist is not None else _UNCHANGING
    main = getattr(modules.get("__main__"), "__dict__", None)
    inner = _INNER_KINDS | _numpy_arrays()
    caching: dict[int, object] = {}
    for name, module in list(modules.items()):
        if name in walked:
            continue
        if name.startswith(_CACHING):
            into = caching
        else:
            into = settled
            walked[name] = module
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict) or name in _NOTEBOOK_MODULES or name in _OWN_MODULES:
            continue
        if namespace is notebook or namespace is main:
            continue
        _walk_module(name, namespace, into, verdicts, skipped, inner)
    return _Objects(id(notebook), verdicts, walked, settled, {**settled, **caching})


def _walk_module(
    name: str,
    namespace: dict[str, object],
    found: dict[int, object],
    verdicts: dict[type, bool],
    skipped: tuple[type, ...],
    inner: frozenset[type],
) -> None:
    """Add the changeable globals of module `name` to `found`; in a module of `_CACHING`,
    also what they keep inside, and its own classes' class attributes with theirs."""
    caching = name.startswith(_CACHING)
    for value in list(namespace.values()):
        kind = type(value)
        verdict = verdicts.get(kind)
        if verdict is None:
            verdict = verdicts[kind] = not issubclass(kind, skipped)
        if verdict:
            found[id(value)] = value
            if caching:
                _take_inside(value, found, inner)
        elif caching and kind is type and value.__module__ == name:
            for attribute in list(vars(value).values()):
                kind = type(attribute)
                verdict = verdicts.get(kind)
                if verdict is None:
                    verdict = verdicts[kind] = not issubclass(kind, skipped)
                if verdict and kind.__module__ != "builtins":
                    found[id(attribute)] = attribute
                    _take_inside(attribute, found, inner)


def _take_inside(value: object, found: dict[int, object], inner: frozenset[type]) -> None:
    """Add what a library object pickles with it: its `__dict__` (its state) and the arrays
    and builtin containers in it."""
    state = getattr(value, "__dict__", None)
    if type(state) is dict:
        found[id(state)] = state
        for member in list(state.values()):
            if type(member) in inner:
                found[id(member)] = member


def _numpy_arrays() -> frozenset[type]:
    ndarray = imported_class("numpy", "ndarray")
    return frozenset({ndarray}) if ndarray is not None else frozenset()

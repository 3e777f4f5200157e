"""Objects a library's module holds as a global, which code anywhere can change unnamed.

numpy's global random generator (`np.random.seed()` and `np.random.rand()` draw from it),
scipy's distribution objects (`scipy.stats.loguniform` is one shared instance, whose random
state is numpy's global one), a library's registry or configuration object: a notebook value
that holds one of them changes whenever any cell calls into the library, though no cell
names the value. So the change journal's word ("nothing named it") is not enough for them:
a capture digests each such object a kept component holds (one small pickle, not the
value's), and a component one of whose library objects digests differently from the last
capture is pickled again.

The objects are every module's globals except the ones that cannot change or that pickles
name by reference (types, functions, modules, immutable values, import machinery), and
matplotlib's artists: a figure a component holds is watched already (`figure_watch`: every
setter marks it changed), and its pickle differs at every pickling anyway. Walking
every module costs 10-30 ms in a kernel with scikit-learn loaded (2,000 modules, 80,000
globals), and a tutorial's cells import a few more modules every other cell, so the walk is
kept: when modules were imported since, only they are walked (and matplotlib's again, whose
classes cache paths lazily); when one was removed or replaced, all of them. A global that
a module walked before binds anew later, without being imported again, is not found (a
library rebinding a global and then changing the new object in place, behind a variable
that holds it and that no cell names, is what that leaves out).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import itertools
import pickle
import sys
import types
from collections.abc import Iterable
from dataclasses import dataclass

import xxhash

from ditto_jupyter.kernel.capture.rules import imported_class

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

#: Exact types of `_UNCHANGING` (and of the artist base): a set look-up decides most
#: globals (functions, classes, modules, strings) before the `isinstance` walk of the tuple.
_UNCHANGING_EXACT = frozenset(_UNCHANGING)


@dataclass
class _Walk:
    """The modules walked so far and what they hold (`library_objects`)."""

    count: int  # len(sys.modules) when last looked at
    notebook: int  # id() of the notebook's namespace it was made for
    verdicts: dict[type, bool]  # by exact type: whether its instances can change
    walked: dict[str, object]  # name -> module: every module walked but matplotlib's
    settled: dict[int, object]  # what `walked` holds
    found: dict[int, object]  # `settled` and what matplotlib's modules hold now


_last_walk: _Walk | None = None


def library_objects(notebook: dict[str, object]) -> dict[int, object]:
    """Id -> object of every changeable global of every module but the notebook's own
    (`__main__`, and `__mp_main__`, multiprocessing's other name for it, and any module
    whose namespace is `notebook`); in matplotlib also of every instance of its own types
    its classes keep as class attributes (its cached unit and marker paths, which every
    figure drawing them shares) and of the arrays and builtin containers such an object or
    global keeps in its `__dict__`. Kept while the set of modules is the same; after
    imports, only the new modules (and matplotlib's) are walked (see the module)."""
    global _last_walk
    modules = sys.modules
    last = _last_walk
    if last is not None and last.count == len(modules) and last.notebook == id(notebook):
        return last.found
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
        if not isinstance(namespace, dict) or name in _NOTEBOOK_MODULES or name == __name__:
            continue  # this module's own globals: the walks themselves (each holds the last)
        if namespace is notebook or namespace is main:
            continue
        _walk_module(name, namespace, into, verdicts, skipped, inner)
    found = {**settled, **caching}
    _last_walk = _Walk(len(modules), id(notebook), verdicts, walked, settled, found)
    return found


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


#: Packages whose classes and globals `library_objects` looks inside (matplotlib caches unit
#: and marker paths on its classes, lazily, and every figure drawing them shares them).
_CACHING = ("matplotlib.", "mpl_toolkits.")
#: What `library_objects` takes from inside a library object besides numpy's arrays.
_INNER_KINDS = frozenset({dict, list, set})


def _numpy_arrays() -> frozenset[type]:
    ndarray = imported_class("numpy", "ndarray")
    return frozenset({ndarray}) if ndarray is not None else frozenset()


#: The names the notebook's own module goes by in `sys.modules`.
_NOTEBOOK_MODULES = frozenset({"__main__", "__mp_main__"})

#: The digest of an object that cannot be pickled alone: never equal to another.
_UNKNOWN = b""


def library_digest(obj: object) -> bytes:
    """A digest of one library object's state (its pickle), or `_UNKNOWN`."""
    try:
        data = pickle.dumps(obj, protocol=5)
    except Exception:  # unpicklable alone: always taken as changed
        return _UNKNOWN
    return hashlib.blake2b(data, digest_size=16).digest()


def shared_digest(obj: object) -> bytes:
    """A digest of an object's state whose big buffers (numpy arrays) are hashed in place
    (XXH3), not copied into the pickle; `_UNKNOWN` when it cannot be pickled alone."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        digest = hashlib.blake2b(data, digest_size=16)
        for buffer in buffers:
            digest.update(xxhash.xxh3_128_digest(buffer.raw()))
    except Exception:  # unpicklable alone, or a buffer that is not contiguous
        return _UNKNOWN
    return digest.digest()


#: The library objects each component's id set holds (id(set) -> (the set, their ids)), for
#: the library map they were looked up in: a kept component's set is the same object
#: capture after capture (never changed), so while no module came or went its look-up is
#: done once, not twice per capture. Only the last capture's sets are kept.
_hits: tuple[dict[int, object] | None, dict[int, tuple[set[int], list[int]]]] = (None, {})


def _library_hits(ids: set[int], library: dict[int, object]) -> list[int]:
    """The ids among `ids` of objects of `library` (`library_objects`)."""
    global _hits
    if _hits[0] is not library:
        _hits = (library, {})
    known = _hits[1]
    entry = known.get(id(ids))
    if entry is not None and entry[0] is ids:
        return entry[1]
    found = list(ids & library.keys())
    known[id(ids)] = (ids, found)
    return found


def library_digests(
    notebook: dict[str, object], id_sets: Iterable[set[int]], memo: dict[int, bytes]
) -> dict[int, tuple[object, bytes]]:
    """The library objects among the ids of `id_sets` (one set per component of a capture),
    each with its digest (from `memo`, the digests this capture took already, else taken
    now); the objects are kept, so the ids stay theirs."""
    global _hits
    library = library_objects(notebook)
    sets = list(id_sets)
    found = [_library_hits(ids, library) for ids in sets]
    known = _hits[1]
    _hits = (library, {id(ids): known[id(ids)] for ids in sets})  # the next capture's base
    digests: dict[int, tuple[object, bytes]] = {}
    for object_id in itertools.chain.from_iterable(found):
        if object_id in digests:
            continue
        digest = memo.get(object_id)
        if digest is None:
            digest = memo[object_id] = library_digest(library[object_id])
        digests[object_id] = (library[object_id], digest)
    return digests


def changed_library_objects(
    notebook: dict[str, object],
    ids: set[int],
    before: dict[int, tuple[object, bytes]],
    memo: dict[int, bytes],
) -> bool:
    """Whether a kept component holding `ids` holds a library object that the last capture
    did not digest, or that digests differently now (`memo`: this capture's digests)."""
    library = library_objects(notebook)
    for object_id in _library_hits(ids, library):
        obj = library[object_id]
        seen = before.get(object_id)
        if seen is None or seen[0] is not obj or seen[1] == _UNKNOWN:
            return True
        now = memo.get(object_id)
        if now is None:
            now = memo[object_id] = library_digest(obj)
        if now != seen[1]:
            return True
    return False

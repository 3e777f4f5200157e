"""Which objects are atomic: sharing one does not tie two variables into one component.

Variables are pickled together only when they share an object whose identity a notebook can
observe: something mutable. Immutable values and singletons are atomic: two variables that
hold the same one are pickled apart and come back equal (singletons come back as
themselves). Atomic are:

- None, Ellipsis, NotImplemented, numbers, strings, bytes, tuples, frozensets, ranges and
  slices (their mutable members are in the pickle's memo on their own), and subclasses of
  them whose instances have no `__dict__` (a namedtuple; matplotlib's `BarContainer`, a
  tuple with attributes of its own, is identity-bearing), dates and times,
  decimals, fractions, UUIDs, paths, compiled patterns, enum members, instances of exactly
  `object` (sentinels), frozen dataclass instances;
- types, modules, code objects, builtin and extension functions and descriptors, and any
  object that pickles by reference to its importable name (a function defined in a module,
  a Cython function, a numpy ufunc);
- numpy dtypes and scalars (a structured dtype pickles its dict of fields as its state:
  that dict rides along with it, so the trees of scikit-learn's forests and boosted models,
  whose node arrays all share one such dtype, are not one component); pandas extension
  dtypes, scalars (Timestamp, Timedelta, Period,
  Interval), NA, NaT and date offsets (only when numpy or pandas is already imported).

Everything else is identity-bearing, notebook functions included (they are mutable: a
second name for a notebook function stays the same function). A frozen dataclass pickles its
own `__dict__` as its state: that dict is atomic with it. A pandas Index is not atomic:
its `name` can be set in place, and frames that share one see the change.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import itertools
import operator
import pathlib
import pickle
import re
import sys
import types
import uuid
from typing import Any

from ditto_jupyter.kernel.capture.rules import imported_class

_ATOMIC_TYPES: tuple[type, ...] = (
    str,
    bytes,
    int,
    float,
    complex,
    type(None),
    type(Ellipsis),
    type(NotImplemented),
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
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    pickle.PickleBuffer,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    datetime.tzinfo,
    decimal.Decimal,
    fractions.Fraction,
    uuid.UUID,
    pathlib.PurePath,
    re.Pattern,
    enum.Enum,
)
#: Immutable builtin values: a subclass whose instances carry a `__dict__` is not atomic.
_VALUE_TYPES = (str, bytes, int, float, complex, tuple, frozenset)
#: Exact types that are never atomic (checked first: most of a pickle's memo is these).
_CONTAINER_TYPES = frozenset({dict, list, set, bytearray})
#: (module, attribute) of the immutable classes of libraries loaded on demand.
_LIBRARY_TYPES = (
    ("numpy", "dtype"),
    ("numpy", "generic"),
    ("numpy", "ufunc"),
    ("pandas.api.extensions", "ExtensionDtype"),
    ("pandas", "Timestamp"),
    ("pandas", "Timedelta"),
    ("pandas", "Period"),
    ("pandas", "Interval"),
    ("pandas.api.typing", "NAType"),
    ("pandas.api.typing", "NaTType"),
    ("pandas.tseries.offsets", "BaseOffset"),
)
_library_cache: dict[tuple[str, ...], tuple[type, ...]] = {}
#: Class verdicts (`Atoms._classify`) by the atomic kinds they were decided with; a class's
#: verdict depends only on the class and those kinds, so captures share them.
_verdict_cache: dict[tuple[type, ...], dict[type, int]] = {}
#: Classes remembered per set of kinds before the cache starts afresh (classes made in a
#: loop must not pile up).
_VERDICT_LIMIT = 10_000


def _library_types() -> tuple[type, ...]:
    """The library classes of `_LIBRARY_TYPES` whose modules are imported already."""
    loaded = tuple(module for module, _ in _LIBRARY_TYPES if module in sys.modules)
    cached = _library_cache.get(loaded)
    if cached is None:
        found = []
        for module, attribute in _LIBRARY_TYPES:
            cls = getattr(sys.modules.get(module), attribute, None)
            if isinstance(cls, type):
                found.append(cls)
        cached = _library_cache[loaded] = tuple(found)
    return cached


def _importable(obj: object, namespace: dict[str, object]) -> bool:
    """Whether `obj` is what its `__module__` and `__qualname__` (or `__name__`) name, in a
    module other than the namespace being captured (whose globals are its own state)."""
    try:
        name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
        module_name = getattr(obj, "__module__", None)
        if not isinstance(name, str) or not isinstance(module_name, str):
            return False
        found: Any = sys.modules.get(module_name)
        if module_name == "__main__" or getattr(found, "__dict__", None) is namespace:
            return False
        for part in name.split("."):
            if found is None:
                return False
            found = getattr(found, part, None)
        return found is obj
    except Exception:  # an odd __getattr__: not provably a global
        return False


_NO_RIDERS: frozenset[int] = frozenset()
#: The object of a pickler memo's entry, `(index, object)`.
MEMO_OBJECT = operator.itemgetter(1)
#: What a class says about its instances (decided once per class and capture).
_MUTABLE, _ATOMIC, _CLASS, _FROZEN, _FUNCTION, _MAYBE_GLOBAL, _DTYPE = range(7)


class Atoms:
    """The grouping rules of one capture: which objects are atomic, and which objects ride
    along with an atomic one (and so tie nothing together either).

    Riding along: a frozen dataclass's own `__dict__` (pickled as its state), and the
    mutable class attributes of importable classes, which some libraries pickle into every
    instance's state (pandas' `_metadata` list): unpickling makes a fresh copy of those
    anyway, so they cannot keep an identity worth grouping for. Verdicts are kept per class,
    so a figure's thousands of objects cost a dictionary look-up each.
    """

    def __init__(self, namespace: dict[str, object]) -> None:
        self.namespace = namespace
        self.kinds = _ATOMIC_TYPES + _library_types()
        self._verdicts = _verdict_cache.setdefault(self.kinds, {})
        if len(self._verdicts) > _VERDICT_LIMIT:
            self._verdicts.clear()
        self._class_attributes: dict[type, frozenset[int]] = {}
        #: The classes found atomic so far: a set look-up skips the call for most objects.
        self.atomic_classes: set[type] = set()

    def riders_if_atomic(self, obj: object) -> frozenset[int] | None:
        """None when sharing `obj` ties variables together; otherwise the ids of the objects
        that ride along with it (usually none)."""
        cls = type(obj)
        verdict = self._verdicts.get(cls)
        if verdict is None:
            verdict = self._verdicts[cls] = self._classify(cls)
        if verdict == _ATOMIC:
            self.atomic_classes.add(cls)
            return _NO_RIDERS
        if verdict == _MUTABLE:
            return None
        if verdict == _CLASS:
            return self._class_attribute_ids(obj)  # type: ignore[arg-type]
        if verdict == _FUNCTION:  # a module function is atomic, a notebook one is not
            return None if obj.__globals__ is self.namespace else _NO_RIDERS  # type: ignore[attr-defined]
        if verdict == _DTYPE:
            return _dtype_riders(obj)
        if verdict == _FROZEN:
            try:
                return frozenset({id(object.__getattribute__(obj, "__dict__"))})
            except AttributeError:  # slots
                return _NO_RIDERS
        return _NO_RIDERS if _importable(obj, self.namespace) else None

    def identity_bearing(self, memo: dict[int, tuple[int, Any]]) -> tuple[list[int], set[int]]:
        """The ids (keys) of a pickler's memo whose objects are identity-bearing, and the
        ids of the objects riding along with atomic ones. Each class is looked at once;
        only the classes whose verdict depends on the object are asked object by object,
        and the rest is sorted at C speed (a figure's memo holds 100,000s of objects)."""
        objects = list(map(MEMO_OBJECT, memo.values()))
        kinds = list(map(type, objects))
        mutable: set[type] = set()
        by_object: set[type] = set()
        for cls in set(kinds):
            verdict = self._verdicts.get(cls)
            if verdict is None:
                verdict = self._verdicts[cls] = self._classify(cls)
            if verdict == _ATOMIC:
                self.atomic_classes.add(cls)
            elif verdict == _MUTABLE:
                mutable.add(cls)
            else:
                by_object.add(cls)
        found = list(itertools.compress(memo.keys(), map(mutable.__contains__, kinds)))
        riders: set[int] = set()
        if by_object:
            asked = itertools.compress(
                zip(memo.keys(), objects, strict=True), map(by_object.__contains__, kinds)
            )
            for object_id, obj in asked:
                riding = self.riders_if_atomic(obj)
                if riding is None:
                    found.append(object_id)
                elif riding:
                    riders.update(riding)
        return found, riders

    def _classify(self, cls: type) -> int:
        if cls in _CONTAINER_TYPES:
            return _MUTABLE
        if issubclass(cls, type):
            return _CLASS
        if _value_with_attributes(cls):
            return _MUTABLE
        dtype = imported_class("numpy", "dtype")
        if dtype is not None and issubclass(cls, dtype):
            return _DTYPE
        if cls is object or issubclass(cls, self.kinds):
            return _ATOMIC
        if cls is types.FunctionType:
            return _FUNCTION
        params = cls.__dict__.get("__dataclass_params__") or getattr(
            cls, "__dataclass_params__", None
        )
        if params is not None and getattr(params, "frozen", False):
            return _FROZEN
        if any("__qualname__" in vars(k) or "__name__" in vars(k) for k in cls.__mro__[:-1]):
            return _MAYBE_GLOBAL  # function-like (a Cython function): importable, perhaps
        return _MUTABLE

    def _class_attribute_ids(self, cls: type) -> frozenset[int]:
        found = self._class_attributes.get(cls)
        if found is None:
            # copyreg's cache of slot names, a list it stores in the class: no state
            slots = cls.__dict__.get("__slotnames__")
            found = frozenset({id(slots)}) if type(slots) is list else _NO_RIDERS
            if _importable(cls, self.namespace):
                found = found | frozenset(
                    id(value)
                    for klass in cls.__mro__
                    for value in vars(klass).values()
                    if type(value) in _CONTAINER_TYPES
                )
            self._class_attributes[cls] = found
        return found


def _dtype_riders(dtype: Any) -> frozenset[int]:
    """The dict of fields a structured numpy dtype pickles as its state (the dtype's own,
    the same object at every pickling; no code can change it in place)."""
    if getattr(dtype, "fields", None) is None:
        return _NO_RIDERS
    try:
        state = dtype.__reduce__()[2]
    except Exception:  # an odd dtype: nothing known to ride along
        return _NO_RIDERS
    fields = state[4] if isinstance(state, tuple) and len(state) > 4 else None
    return frozenset({id(fields)}) if type(fields) is dict else _NO_RIDERS


def _value_with_attributes(cls: type) -> bool:
    """Whether `cls` subclasses an immutable builtin value but its instances have a
    `__dict__` (attributes set in place: two names holding one instance see the change);
    an enum member is a singleton, atomic anyway."""
    return (
        issubclass(cls, _VALUE_TYPES)
        and cls not in _VALUE_TYPES
        and cls.__dictoffset__ != 0
        and not issubclass(cls, enum.Enum)
    )

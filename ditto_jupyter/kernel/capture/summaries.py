"""Each variable's summary and digest, recorded in the namespace manifest at capture time.

The control plane lists and compares a checkpoint's variables from what the kernel wrote
here, never by unpickling them (`core.namespace_manifest`). A summary is short and made
without running the value's own code: shape and dtype for numpy arrays, shape and columns
for pandas data frames, length and dtype for series, length for built-in containers, the
repr of short built-in scalars and strings; other objects get none (their type says what
they are). A variable pickled alone has the digest of its component's chunk names
(`component_digest`). Variables pickled together because they share objects (a value and
the notebook function it refers to) each get a digest of their own pickle as first taken
alone (stopped at objects an earlier pickle holds) and of the component's big buffers: an
edit of one is not an edit of the others, while a change to a shared big array changes
them all. A component kept from the previous capture keeps its summaries and digests, so
unchanged values keep theirs.
"""

from __future__ import annotations

import hashlib
import logging
import sys
import types
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from ditto_jupyter.core.namespace_manifest import component_digest

if TYPE_CHECKING:
    from ditto_jupyter.kernel.capture.pickling import Pickled

_log = logging.getLogger(__name__)

#: The longest repr a summary shows whole; longer strings show their length and a start.
MAX_REPR = 80
#: Characters of a long string or bytes value a summary shows.
PREVIEW = 40
#: Column names a data frame's summary lists before "…".
MAX_COLUMNS = 8

_SCALARS = (bool, int, float, complex, type(None))
_TEXTS = (str, bytes, bytearray)
_CONTAINERS = (list, tuple, dict, set, frozenset)


def describe(value: object) -> str:
    """A short summary of `value` ('' when there is nothing safe to say)."""
    try:
        return _describe(value)
    except Exception as error:  # a library's attribute that raises: no summary, not a failure
        _log.debug("no summary for a %s: %s", type(value).__name__, error)
        return ""


def _describe(value: object) -> str:
    kind = type(value)
    if kind in _SCALARS:
        text = _short_repr(value)
        return text if text is not None else f"{kind.__name__} too long to show"
    if kind in _TEXTS:
        assert isinstance(value, str | bytes | bytearray)
        text = repr(value) if len(value) <= MAX_REPR else None
        if text is not None and len(text) <= MAX_REPR:
            return text
        return f"length {len(value)}: {value[:PREVIEW]!r}…"
    if kind in _CONTAINERS:
        assert isinstance(value, list | tuple | dict | set | frozenset)
        return f"length {len(value)}"
    if kind is types.FunctionType:
        assert isinstance(value, types.FunctionType)
        return f"function {value.__qualname__}"
    if isinstance(value, type):
        return f"class {value.__qualname__}"
    return _library_summary(value)


def _short_repr(value: object) -> str | None:
    try:
        text = repr(value)
    except ValueError:  # an int too long for its decimal repr
        return None
    return text if len(text) <= MAX_REPR else None


def _library_summary(value: object) -> str:
    """numpy and pandas values, when those libraries are loaded (never imported here)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.ndarray):
            return f"shape {tuple(value.shape)} {value.dtype}"
        if isinstance(value, numpy.generic):
            return _short_repr(value) or str(type(value).__name__)
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        if isinstance(value, pandas.DataFrame):
            return f"shape {tuple(value.shape)} columns {_columns(value.columns)}"
        if isinstance(value, pandas.Series):
            name = f" name {value.name!r}" if value.name is not None else ""
            return f"length {len(value)} {value.dtype}{name}"
        if isinstance(value, pandas.Index):
            return f"length {len(value)} {value.dtype}"
    return ""


def _columns(columns: Any) -> str:
    names = [str(c) for c in list(columns[:MAX_COLUMNS])]
    more = "…" if len(columns) > MAX_COLUMNS else ""
    return ", ".join(names) + more if names else "(none)"


def summaries_of(names: list[str], values: dict[str, object]) -> dict[str, str]:
    """The summaries of a component's variables, by name."""
    return {name: describe(values[name]) for name in names if name in values}


def own_digests(pickles: dict[str, Pickled], names: Iterable[str]) -> dict[str, str]:
    """Digests of the streams of `names` as each was first pickled alone (only those
    that are pickled with others need one; a name whose value an earlier pickle holds
    whole has none)."""
    found: dict[str, str] = {}
    for name in names:
        pickled = pickles.get(name)
        if pickled is not None:
            found[name] = hashlib.blake2b(pickled.stream, digest_size=16).hexdigest()
    return found


def with_component_digests(component: dict[str, Any], own: dict[str, str]) -> dict[str, Any]:
    """A component of several variables with a digest for each: its own pickle's and the
    component's big buffers' fingerprints (the component's digest for a name with none)."""
    names = component["names"]
    if len(names) < 2:
        return component
    buffers = [[b.get("kind"), b["size"], b["fps"]] for b in component["buffers"]]
    digests: dict[str, str | None] = {}
    for name in names:
        alone = own.get(name)
        if alone is None:
            digests[name] = None
        else:
            document = orjson.dumps([alone, buffers])
            digests[name] = hashlib.blake2b(document, digest_size=16).hexdigest()
    component["pending_digests"] = digests
    return component


def add_digests(component: dict[str, Any]) -> None:
    """Give a component whose chunks are named its variables' digests (once: a component
    kept from an earlier capture has them already)."""
    if "digests" in component:
        return
    whole = component_digest(component)
    own = component.pop("pending_digests", None) or {}
    component["digests"] = {name: own.get(name) or whole for name in component["names"]}

"""Storing a capture's new components: each component's pickles, their streams and
buffers in the chunk store, and their manifest entries (`CapturePlan.store_components`)."""

from __future__ import annotations

from typing import Any

from ditto_jupyter.core.models import UnrestorableValue
from ditto_jupyter.kernel.capture import figure_watch
from ditto_jupyter.kernel.capture.chunks import ChunkWriter
from ditto_jupyter.kernel.capture.manifest import BUFFER_BYTES, BUFFER_PICKLE
from ditto_jupyter.kernel.capture.pickling import (
    Pickled,
    continue_pickling,
    pickle_values,
    unframed,
)
from ditto_jupyter.kernel.capture.rules import failure_reason, type_name
from ditto_jupyter.kernel.capture.summaries import summaries_of


def figures_of(pickled: Pickled, names: list[str], singles: dict[str, Pickled]) -> list[Any]:
    """The figures a stored component holds in its own stream (watched for changes)."""
    found = {id(f): f for f in pickled.figures}
    for name in names:
        single = singles.get(name)
        if single is not None:
            found.update((id(f), f) for f in single.figures)
    return [figure_watch.root_figure(f) for f in found.values()]


def component_pickles(
    namespace: dict[str, object],
    group: list[str],
    values: dict[str, object],
    singles: dict[str, Pickled],
    unrestorable: list[UnrestorableValue],
) -> list[tuple[list[str], Pickled]]:
    """The pickles that store one alias-connected group: one, continuing the pickle of its
    first member pickled alone with the others (so nothing is pickled twice that the first
    already holds); apart, when together they fail (e.g. recursion depth)."""
    if len(group) == 1:
        return [(group, singles[group[0]])]
    first = next(name for name in group if name in singles)
    rest = [name for name in group if name != first]
    try:
        together = continue_pickling(
            namespace, singles[first], [values[first]], [values[n] for n in rest]
        )
    except Exception:
        return apart(namespace, group, values, singles, unrestorable)
    return [([first, *rest], together)]


def apart(
    namespace: dict[str, object],
    group: list[str],
    values: dict[str, object],
    singles: dict[str, Pickled],
    unrestorable: list[UnrestorableValue],
) -> list[tuple[list[str], Pickled]]:
    """Each name of a group that fails together as its own component (aliasing across them
    is lost; each value is kept)."""
    parts: list[tuple[list[str], Pickled]] = []
    for name in group:
        try:
            pickled = singles.get(name) or pickle_values(namespace, [values[name]])
        except Exception as error:
            reason = failure_reason(error)
            unrestorable.append(
                UnrestorableValue(name=name, type=type_name(values[name]), reason=reason)
            )
            continue
        parts.append(([name], pickled))
    return parts


def store_component(
    writer: ChunkWriter, names: list[str], values: dict[str, object], pickled: Pickled
) -> dict[str, Any]:
    """Store one pickle's stream and buffers; its manifest entry."""
    buffers: list[dict[str, Any]] = []
    for buffer in pickled.buffers:
        raw = buffer.raw()
        stored = writer.store(raw, itemsize=memoryview(buffer).itemsize)
        buffers.append({"kind": BUFFER_PICKLE, "readonly": raw.readonly, **stored})
    for kind, obj in pickled.extracted:
        stored = writer.store(memoryview(obj))
        buffers.append({"kind": kind, "readonly": kind == BUFFER_BYTES, **stored})
    return {
        "names": names,
        "types": {name: type_name(values[name]) for name in names},
        "summaries": summaries_of(names, values),
        "stream": writer.store(memoryview(unframed(pickled.stream)), by_content=True),
        "buffers": buffers,
    }

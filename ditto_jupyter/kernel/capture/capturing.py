"""Capture a namespace into the blob store as one signed kernel-namespace manifest.

Modules are recorded as imports (`np` -> `numpy`, `p` -> `posixpath` for `os.path`) and
re-imported on restore. Values that cannot be pickled (generators, open files, sockets,
locks, threads, database connections, anything whose pickling raises) are listed with name,
type and reason, and never join a component, so they sink nothing else. pyplot's open figures
are recorded too (`pyplot_state`).
"""

from __future__ import annotations

import contextlib
import sys
import types
from typing import Any

from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobError, BlobNotFound, BlobStore
from ditto_jupyter.core.models import ContextCapture, UnrestorableValue
from ditto_jupyter.kernel.capture import pyplot_state
from ditto_jupyter.kernel.capture.atoms import Atoms
from ditto_jupyter.kernel.capture.chunks import (
    ChunkWriter,
    forget_chunks,
    knows_manifest,
    remember_manifest,
    sync_filesystem,
    write_store,
)
from ditto_jupyter.kernel.capture.manifest import (
    BUFFER_BYTES,
    BUFFER_PICKLE,
    MANIFEST_KIND,
    MANIFEST_VERSION,
    load_manifest,
    part_body,
    split_into_parts,
    uses_parts,
)
from ditto_jupyter.kernel.capture.pickling import (
    Pickled,
    components,
    continue_pickling,
    identity_ids,
    pickle_values,
)
from ditto_jupyter.kernel.capture.rules import (
    failure_reason,
    hidden_names,
    ipython_shell,
    is_state_name,
    type_name,
)


def capture_namespace(
    namespace: dict[str, object],
    blobs: BlobStore,
    *,
    previous_manifest_id: str | None = None,
    runtime_id: str | None = None,
) -> ContextCapture:
    """Capture `namespace` into `blobs` as one signed manifest; return its id and cost.

    `previous_manifest_id` (the checkpoint this one follows) teaches the chunk memo what that
    checkpoint stored, so unchanged buffers are not re-hashed even in a new process.
    `runtime_id` is the runtime the capture is for, named in the signed body.
    """
    try:
        return _capture(namespace, blobs, previous_manifest_id, runtime_id)
    except BlobNotFound:  # a chunk the memo knew was collected since: forget, store again
        forget_chunks()
        return _capture(namespace, blobs, None, runtime_id)


def _capture(
    namespace: dict[str, object],
    blobs: BlobStore,
    previous_manifest_id: str | None,
    runtime_id: str | None,
) -> ContextCapture:
    if previous_manifest_id is not None and not knows_manifest(previous_manifest_id):
        # only an optimisation: a missing previous manifest costs re-hashing
        with contextlib.suppress(BlobError):
            remember_manifest(previous_manifest_id, load_manifest(blobs, previous_manifest_id))
    hidden = hidden_names(namespace)
    modules: dict[str, str] = {}
    namespace_refs: list[str] = []
    unrestorable: list[UnrestorableValue] = []
    values: dict[str, object] = {}
    for name, value in list(namespace.items()):
        if not is_state_name(name, value, hidden) or name == pyplot_state.PYPLOT_FIGURES:
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
    records_pyplot = pyplot_state.owns_pyplot(namespace)
    figures = pyplot_state.open_figures() if records_pyplot else []
    if figures:
        values[pyplot_state.PYPLOT_FIGURES] = figures

    singles, partial, ids = _pickle_singles(namespace, values, unrestorable)
    groups = components(list(ids), ids)
    partial.clear()  # kept until grouped: their memos keep the objects whose ids they hold

    store, sync = write_store(blobs)
    writer = ChunkWriter(store)
    stored_components: list[dict[str, Any]] = []
    for group in groups:
        for names, pickled in _group_pickles(namespace, group, values, singles, unrestorable):
            stored_components.append(_store_component(writer, names, values, pickled))
    singles.clear()  # release the pickles' memos (they keep temporaries alive)

    manifest_bytes = 0
    part_ids: list[str] = []
    if uses_parts(stored_components):  # unchanged parts are the parent's, stored once
        for part in split_into_parts(stored_components):
            part_id, part_bytes = store.put_manifest(part_body(part))
            part_ids.append(part_id)
            manifest_bytes += part_bytes
    body: dict[str, Any] = {
        "kind": MANIFEST_KIND,
        "version": MANIFEST_VERSION,
        "chunk_size": CHUNK_SIZE,
        "components": [] if part_ids else stored_components,
        "modules": modules,
        "namespace_refs": sorted(namespace_refs),
        "unrestorable": [u.model_dump() for u in sorted(unrestorable, key=lambda u: u.name)],
        "chunks": [] if part_ids else list(writer.chunks),
    }
    if runtime_id is not None:
        body["runtime_id"] = runtime_id
    if part_ids:
        body["parts"] = body["manifests"] = part_ids
    if records_pyplot:
        body[pyplot_state.MANIFEST_KEY] = True
    manifest_id, top_bytes = store.put_manifest(body)
    manifest_bytes += top_bytes
    if sync and (writer.bytes_written or manifest_bytes):
        sync_filesystem(blobs.root)
    remember_manifest(manifest_id, {**body, "components": stored_components})
    shell = ipython_shell(namespace)
    count = getattr(shell, "execution_count", None) if shell is not None else None
    return ContextCapture(
        manifest_id=manifest_id,
        bytes_written=writer.bytes_written + manifest_bytes,
        unrestorable=sorted(unrestorable, key=lambda u: u.name),
        execution_count=count if isinstance(count, int) else None,
    )


#: The names whose pickle took big bytes objects out of band in this process's last capture:
#: the next one does so in its first pass (pyplot's figures, every checkpoint).
_EXTRACTED_LAST_TIME: set[str] = set()


def _pickle_singles(
    namespace: dict[str, object],
    values: dict[str, object],
    unrestorable: list[UnrestorableValue],
) -> tuple[dict[str, Pickled], list[Pickled], dict[str, set[int]]]:
    """Pickle each value alone, but never an object again that an earlier pickle holds (the
    axes of a figure pyplot holds): a value held by an earlier pickle belongs to its
    component and is not pickled; a value that reaches such objects is pickled up to them
    only, which is enough to group it with them (its component's pickle continues the
    earlier one). pyplot's figures go first, as they hold most of a figure-heavy namespace.
    Returns the complete pickles, the partial ones, and each name's identity-bearing object
    ids (valid while the pickles are alive)."""
    atoms = Atoms(namespace)
    singles: dict[str, Pickled] = {}
    partial: list[Pickled] = []
    ids: dict[str, set[int]] = {}
    reached: set[int] = set()  # the identity-bearing objects the pickles so far hold
    for name in sorted(values, key=lambda n: n != pyplot_state.PYPLOT_FIGURES):
        value = values[name]
        if id(value) in reached:  # identity-bearing, held by an earlier pickle: one component
            ids[name] = {id(value)}
            continue
        try:
            extract = name in _EXTRACTED_LAST_TIME
            pickled = pickle_values(namespace, [value], reached or None, extract=extract)
        except Exception as error:
            reason = failure_reason(error)
            unrestorable.append(UnrestorableValue(name=name, type=type_name(value), reason=reason))
            continue
        ids[name] = identity_ids(pickled, atoms) | pickled.stopped
        reached.update(ids[name])
        if pickled.stopped:
            partial.append(pickled)
        else:
            singles[name] = pickled
    _EXTRACTED_LAST_TIME.clear()
    _EXTRACTED_LAST_TIME.update(n for n, p in singles.items() if p.extracted)
    return singles, partial, ids


def _group_pickles(
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
        return _apart(namespace, group, values, singles, unrestorable)
    return [([first, *rest], together)]


def _apart(
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


def _store_component(
    writer: ChunkWriter, names: list[str], values: dict[str, object], pickled: Pickled
) -> dict[str, Any]:
    buffers: list[dict[str, Any]] = []
    for buffer in pickled.buffers:
        raw = buffer.raw()
        buffers.append({"kind": BUFFER_PICKLE, "readonly": raw.readonly, **writer.store(raw)})
    for kind, obj in pickled.extracted:
        stored = writer.store(memoryview(obj))
        buffers.append({"kind": kind, "readonly": kind == BUFFER_BYTES, **stored})
    return {
        "names": names,
        "types": {name: type_name(values[name]) for name in names},
        "stream": writer.store(memoryview(pickled.stream)),
        "buffers": buffers,
    }

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

    singles: dict[str, Pickled] = {}
    for name, value in values.items():
        try:
            singles[name] = pickle_values(namespace, [value])
        except Exception as error:
            unrestorable.append(
                UnrestorableValue(name=name, type=type_name(value), reason=failure_reason(error))
            )
    atoms = Atoms(namespace)
    ids = {name: identity_ids(pickled, atoms) for name, pickled in singles.items()}
    groups = components(list(singles), ids)

    store, sync = write_store(blobs)
    writer = ChunkWriter(store)
    stored_components: list[dict[str, Any]] = []
    for group in groups:
        parts: list[tuple[list[str], Pickled]]
        if len(group) == 1:
            parts = [(group, singles[group[0]])]
        else:
            try:
                parts = [(group, pickle_values(namespace, [values[n] for n in group]))]
            except Exception:  # together they fail (e.g. recursion depth): keep them apart
                parts = [([n], singles[n]) for n in group]
        for names, pickled in parts:
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

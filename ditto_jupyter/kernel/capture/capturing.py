"""Capture a namespace into the blob store as one signed kernel-namespace manifest.

Modules are recorded as imports (`np` -> `numpy`, `p` -> `posixpath` for `os.path`) and
re-imported on restore. Values that cannot be pickled (generators, open files, sockets,
locks, threads, database connections, anything whose pickling raises) are listed with name,
type and reason, and never join a component, so they sink nothing else. pyplot's open figures
are recorded too (`pyplot_state`).
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import types
from dataclasses import dataclass
from typing import Any

import orjson

from ditto_jupyter.core.blobs import CHUNK_SIZE, BlobError, BlobNotFound, BlobStore
from ditto_jupyter.core.models import ContextCapture, UnrestorableValue
from ditto_jupyter.kernel.capture import pyplot_state
from ditto_jupyter.kernel.capture.atoms import Atoms
from ditto_jupyter.kernel.capture.chunks import (
    ChunkWriter,
    forget_chunks,
    knows_manifest,
    remember_manifest,
)
from ditto_jupyter.kernel.capture.incremental import CaptureBase, plan_reuse, pulled_back
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
from ditto_jupyter.kernel.capture.summaries import (
    add_digests,
    group_digests,
    own_digests,
    summaries_of,
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
    return capture_with_snapshot(
        namespace, blobs, previous_manifest_id=previous_manifest_id, runtime_id=runtime_id
    )[1]


def capture_with_snapshot(
    namespace: dict[str, object],
    blobs: BlobStore,
    *,
    previous_manifest_id: str | None = None,
    runtime_id: str | None = None,
    base: CaptureBase | None = None,
    touched: set[str] | None = None,
) -> tuple[NamespaceSnapshot, ContextCapture]:
    """`snapshot_namespace` then `finish`, here and now; the snapshot (whose `base` the next
    incremental capture follows) and the capture. A chunk the memo knew but that was
    collected since is forgotten, and everything is captured and stored again."""
    try:
        snapshot = snapshot_namespace(
            namespace,
            blobs,
            previous_manifest_id=previous_manifest_id,
            runtime_id=runtime_id,
            base=base,
            touched=touched,
        )
        return snapshot, snapshot.finish()
    except BlobNotFound:
        forget_chunks()
        snapshot = snapshot_namespace(namespace, blobs, runtime_id=runtime_id)
        return snapshot, snapshot.finish()


def snapshot_namespace(
    namespace: dict[str, object],
    blobs: BlobStore,
    *,
    previous_manifest_id: str | None = None,
    runtime_id: str | None = None,
    base: CaptureBase | None = None,
    touched: set[str] | None = None,
    defer: bool = False,
) -> NamespaceSnapshot:
    """The first half of a capture: everything that reads the live namespace.

    With a usable `base` (the capture before this one) and `touched` (the names the cells
    since then can have reached; None: any), only what may have changed is pickled again
    (`incremental`). With `defer`, new chunks are neither copied nor written: the caller
    has `NamespaceSnapshot.detach` (the copy) run before anything can change the namespace
    again, and `finish` then on any thread, while the next cell runs.
    """
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

    kept: list[dict[str, Any]] = []
    kept_ids: list[set[int]] = []
    kept_held: list[list[object]] = []
    failed_before: dict[str, UnrestorableValue] = {}
    recapture = set(values)
    if base is not None and touched is not None and base.usable():
        reuse = plan_reuse(base, values, touched, [pyplot_state.PYPLOT_FIGURES])
        recapture, failed_before = reuse.recapture, reuse.unrestorable
        kept_indexes = reuse.kept
        while True:
            attempt: list[UnrestorableValue] = []
            chosen = {name: values[name] for name in values if name in recapture}
            singles, partial, ids = _pickle_singles(namespace, chosen, attempt)
            held, owners = _identity_objects({**singles, **partial}, ids)
            reach = {name: found | owners.get(name, set()) for name, found in ids.items()}
            back = pulled_back(base, kept_indexes, reach)
            if not back:
                break
            kept_indexes = [i for i in kept_indexes if i not in back]
            for i in back:
                recapture.update(n for n in base.components[i]["names"] if n in values)
        unrestorable.extend(attempt)
        unrestorable.extend(failed_before.values())
        kept = [base.components[i] for i in kept_indexes]
        kept_ids = [base.ids[i] for i in kept_indexes]
        kept_held = [base.held[i] for i in kept_indexes]
    else:
        singles, partial, ids = _pickle_singles(namespace, values, unrestorable)
        held, owners = _identity_objects({**singles, **partial}, ids)
    groups = components(list(ids), ids)
    own = own_digests({**singles, **partial}, [n for g in groups if len(g) > 1 for n in g])
    partial.clear()  # kept until grouped: their memos keep the objects whose ids they hold

    writer = ChunkWriter(blobs, defer=defer)
    new_components: list[dict[str, Any]] = []
    new_ids: list[set[int]] = []
    new_held: list[list[object]] = []
    try:
        for group in groups:
            for names, pickled in _group_pickles(namespace, group, values, singles, unrestorable):
                component = _store_component(writer, names, values, pickled)
                new_components.append(group_digests(component, own))
                reached = (ids.get(name, set()) | owners.get(name, set()) for name in names)
                new_ids.append(set().union(*reached))
                new_held.append([obj for name in names for obj in held.get(name, ())])
    except BaseException:
        writer.abort()  # what it staged goes; the chunks it took will not be written by it
        raise
    singles.clear()  # release the pickles' memos (they keep temporaries alive)

    ordered = sorted(
        zip(
            [*kept, *new_components],
            [*kept_ids, *new_ids],
            [*kept_held, *new_held],
            strict=True,
        ),
        key=lambda triple: triple[0]["names"][0],
    )
    stored_components = [component for component, _, _ in ordered]
    failed = sorted(unrestorable, key=lambda u: u.name)
    shell = ipython_shell(namespace)
    count = getattr(shell, "execution_count", None) if shell is not None else None
    snapshot = NamespaceSnapshot(
        blobs=blobs,
        writer=writer,
        components=stored_components,
        written=new_components,
        modules=modules,
        namespace_refs=sorted(namespace_refs),
        unrestorable=failed,
        runtime_id=runtime_id,
        records_pyplot=records_pyplot,
        execution_count=count if isinstance(count, int) else None,
    )
    snapshot.base = CaptureBase(
        values=values,
        components=stored_components,
        ids=[found for _, found, _ in ordered],
        held=[objects for _, _, objects in ordered],
        unrestorable={u.name: u for u in failed if u.name in values},
        signature=snapshot.signature(),
    )
    return snapshot


@dataclass
class NamespaceSnapshot:
    """A namespace read into pickles and fingerprints; `finish` stores it as a manifest."""

    blobs: BlobStore
    writer: ChunkWriter
    components: list[dict[str, Any]]
    written: list[dict[str, Any]]  # the components this capture pickled (not kept ones)
    modules: dict[str, str]
    namespace_refs: list[str]
    unrestorable: list[UnrestorableValue]
    runtime_id: str | None
    records_pyplot: bool
    execution_count: int | None
    base: CaptureBase | None = None

    def signature(self) -> bytes:
        """A digest of what the manifest will say, by chunk fingerprints: equal signatures,
        equal state."""

        def entry(stored: dict[str, Any]) -> list[Any]:
            return [stored["size"], stored["fps"]]

        summary = [
            [
                c["names"],
                c["types"],
                entry(c["stream"]),
                [[b["kind"], b["readonly"], *entry(b)] for b in c["buffers"]],
            ]
            for c in self.components
        ]
        document = [
            summary,
            self.modules,
            self.namespace_refs,
            [u.model_dump() for u in self.unrestorable],
            self.records_pyplot,
        ]
        return hashlib.blake2b(orjson.dumps(document), digest_size=16).digest()

    def discard(self) -> None:
        """Drop a deferred snapshot unwritten: the chunks it took are no longer in flight,
        so later captures do not wait for it to write them."""
        self.writer.abort()

    def detach(self) -> None:
        """Copy what is still read from live memory (a deferred snapshot); LiveBufferChanged
        when it changed since the snapshot was taken."""
        self.writer.detach()

    def finish(self) -> ContextCapture:
        """Write the new chunks and the signed manifest in one commit; the capture. A
        failure leaves the blob store as it was (what this capture wrote goes at once)."""
        writer = self.writer
        try:
            if writer.defer:
                writer.write_pending()
            listed: dict[str, None] = {}  # in component order: equal state, equal manifest id
            for component in self.components:
                add_digests(component)  # summaries and digests: what the server compares
                for stored in (component["stream"], *component["buffers"]):
                    listed.update(dict.fromkeys(stored["chunks"]))
            part_ids: list[str] = []
            if uses_parts(self.components):  # unchanged parts are the parent's, stored once
                part_ids = [
                    writer.put_manifest(part_body(part))
                    for part in split_into_parts(self.components)
                ]
            body: dict[str, Any] = {
                "kind": MANIFEST_KIND,
                "version": MANIFEST_VERSION,
                "chunk_size": CHUNK_SIZE,
                "components": [] if part_ids else self.components,
                "modules": self.modules,
                "namespace_refs": self.namespace_refs,
                "unrestorable": [u.model_dump() for u in self.unrestorable],
                "chunks": [] if part_ids else list(listed),
            }
            if self.runtime_id is not None:
                body["runtime_id"] = self.runtime_id
            if part_ids:
                body["parts"] = body["manifests"] = part_ids
            if self.records_pyplot:
                body[pyplot_state.MANIFEST_KEY] = True
            manifest_id = writer.put_manifest(body)
            manifest_bytes = writer.commit()
        except BaseException:
            writer.abort()
            raise
        remember_manifest(manifest_id, {**body, "components": self.components})
        return ContextCapture(
            manifest_id=manifest_id,
            bytes_written=writer.bytes_written + manifest_bytes,
            unrestorable=self.unrestorable,
            execution_count=self.execution_count,
        )


def _identity_objects(
    pickles: dict[str, Pickled], ids: dict[str, set[int]]
) -> tuple[dict[str, list[object]], dict[str, set[int]]]:
    """For each name, the identity-bearing objects its pickle holds (an incremental capture
    keeps them alive with the ids it remembers, so no id can be reused by a new object),
    and the ids of the objects owning the memory of the numpy arrays among them: a view
    (`g = f[10:20]`) pickles as a copy, so only this shows that writing through it changes
    `f` (an incremental capture must then take `f` again too)."""
    numpy = sys.modules.get("numpy")
    ndarray = numpy.ndarray if numpy is not None else None
    held: dict[str, list[object]] = {}
    owners: dict[str, set[int]] = {}
    for name, pickled in pickles.items():
        objects = [entry[1] for oid in ids.get(name, ()) if (entry := pickled.memo.get(oid))]
        held[name] = objects
        found: set[int] = set()
        if ndarray is not None:
            for obj in objects:
                if isinstance(obj, ndarray) and obj.base is not None:
                    root = obj
                    while isinstance(root, ndarray) and root.base is not None:
                        root = root.base
                    found.add(id(root))
                    objects.append(root)
        owners[name] = found
    return held, owners


#: The names whose pickle took big bytes objects out of band in this process's last capture:
#: the next one does so in its first pass (pyplot's figures, every checkpoint).
_EXTRACTED_LAST_TIME: set[str] = set()


def _pickle_singles(
    namespace: dict[str, object],
    values: dict[str, object],
    unrestorable: list[UnrestorableValue],
) -> tuple[dict[str, Pickled], dict[str, Pickled], dict[str, set[int]]]:
    """Pickle each value alone, but never an object again that an earlier pickle holds (the
    axes of a figure pyplot holds): a value held by an earlier pickle belongs to its
    component and is not pickled; a value that reaches such objects is pickled up to them
    only, which is enough to group it with them (its component's pickle continues the
    earlier one). pyplot's figures go first, as they hold most of a figure-heavy namespace.
    Returns the complete pickles, the partial ones, and each name's identity-bearing object
    ids (valid while the pickles are alive)."""
    atoms = Atoms(namespace)
    singles: dict[str, Pickled] = {}
    partial: dict[str, Pickled] = {}
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
            partial[name] = pickled
        else:
            singles[name] = pickled
    _EXTRACTED_LAST_TIME.difference_update(values)
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
        stored = writer.store(raw, itemsize=memoryview(buffer).itemsize)
        buffers.append({"kind": BUFFER_PICKLE, "readonly": raw.readonly, **stored})
    for kind, obj in pickled.extracted:
        stored = writer.store(memoryview(obj))
        buffers.append({"kind": kind, "readonly": kind == BUFFER_BYTES, **stored})
    return {
        "names": names,
        "types": {name: type_name(values[name]) for name in names},
        "summaries": summaries_of(names, values),
        "stream": writer.store(memoryview(pickled.stream)),
        "buffers": buffers,
    }

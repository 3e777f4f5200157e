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
from ditto_jupyter.kernel import this_kernel
from ditto_jupyter.kernel.capture import figure_watch, pyplot_state
from ditto_jupyter.kernel.capture.chunks import (
    ChunkWriter,
    forget_chunks,
    knows_manifest,
    remember_manifest,
)
from ditto_jupyter.kernel.capture.incremental import CaptureBase
from ditto_jupyter.kernel.capture.library_held import library_digests
from ditto_jupyter.kernel.capture.manifest import (
    AUTOCHECKPOINT_KEY,
    MANIFEST_KIND,
    MANIFEST_VERSION,
    load_manifest,
    part_body,
    split_into_parts,
    uses_parts,
)
from ditto_jupyter.kernel.capture.planning import PYPLOT, CapturePlan
from ditto_jupyter.kernel.capture.pods import PodConflict, same_figures
from ditto_jupyter.kernel.capture.rules import hidden_names, ipython_shell, is_state_name
from ditto_jupyter.kernel.capture.summaries import add_digests
from ditto_jupyter.kernel.cell_runs import cells_run
from ditto_jupyter.kernel.process_nonce import KERNEL_PROCESS


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
    figures_reached: list[Any] | None = None,
    fresh: set[str] | None = None,
    mark: int = 0,
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
            figures_reached=figures_reached,
            fresh=fresh,
            mark=mark,
        )
        if _unchanged_since(snapshot, base, blobs):  # what it would write is there already
            assert base is not None and snapshot.base is not None and base.manifest_id
            snapshot.discard()
            snapshot.base.manifest_id = base.manifest_id
            return snapshot, snapshot.same_as(base.manifest_id)
        capture = snapshot.finish()
        if snapshot.base is not None:
            snapshot.base.manifest_id = capture.manifest_id
        return snapshot, capture
    except BlobNotFound:
        forget_chunks()
        snapshot = snapshot_namespace(namespace, blobs, runtime_id=runtime_id, mark=mark)
        return snapshot, snapshot.finish()


def _unchanged_since(
    snapshot: NamespaceSnapshot, base: CaptureBase | None, blobs: BlobStore
) -> bool:
    """Whether `snapshot` says what `base`'s stored manifest says (equal signatures, the
    same runtime), and that manifest is still in the store: then nothing is written."""
    return (
        base is not None
        and snapshot.base is not None
        and base.manifest_id is not None
        and snapshot.base.signature == base.signature
        and snapshot.runtime_id == base.runtime_id
        and blobs.has_manifest(base.manifest_id)
    )


def snapshot_namespace(
    namespace: dict[str, object],
    blobs: BlobStore,
    *,
    previous_manifest_id: str | None = None,
    runtime_id: str | None = None,
    base: CaptureBase | None = None,
    touched: set[str] | None = None,
    figures_reached: list[Any] | None = None,
    fresh: set[str] | None = None,
    mark: int = 0,
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
    open_figs = pyplot_state.open_figures() if records_pyplot else []
    incremental = base is not None and touched is not None and base.usable()
    if open_figs:  # the same figures open: the same value, so an unchanged list is kept
        same = incremental and base is not None and same_figures(base.pyplot_figures, open_figs)
        kept_list = base.values.get(PYPLOT) if same and base is not None else None
        values[PYPLOT] = kept_list if kept_list is not None else open_figs
    following = base if incremental else None
    plan = _plan(namespace, values, open_figs, following, touched, figures_reached, fresh)
    unrestorable.extend(plan.unrestorable)

    writer = ChunkWriter(blobs, defer=defer)
    try:
        stored_pods = [
            plan.store_pod(writer, pod) if pod.component is None else pod.component
            for pod in plan.pods
        ]
        new_components, new_ids, new_held, new_deps, new_figures = plan.store_components(
            writer, unrestorable
        )
    except BaseException:
        writer.abort()  # what it staged goes; the chunks it took will not be written by it
        raise
    plan.release()

    ordered = sorted(
        zip(
            [*plan.kept, *new_components],
            [*plan.kept_ids, *new_ids],
            [*plan.kept_held, *new_held],
            [*plan.kept_deps, *new_deps],
            [*plan.kept_figures, *new_figures],
            strict=True,
        ),
        key=lambda entry: entry[0]["names"][0],
    )
    variables = [entry[0] for entry in ordered]
    failed = sorted(unrestorable, key=lambda u: u.name)
    shell = ipython_shell(namespace)
    count = getattr(shell, "execution_count", None) if shell is not None else None
    new_pods = [c for pod, c in zip(plan.pods, stored_pods, strict=True) if pod.pickled]
    snapshot = NamespaceSnapshot(
        blobs=blobs,
        writer=writer,
        components=[*stored_pods, *variables],
        written=[*new_pods, *new_components],
        modules=modules,
        namespace_refs=sorted(namespace_refs),
        unrestorable=failed,
        runtime_id=runtime_id,
        records_pyplot=records_pyplot,
        execution_count=count if isinstance(count, int) else None,
        cells_run=cells_run(shell) if shell is not None else None,
        autocheckpoint_keep=this_kernel.autocheckpoint_keep(),
        unrecorded_cell=this_kernel.unrecorded_cell(),
    )
    for pod, component in zip(plan.pods, stored_pods, strict=True):
        pod.component, pod.pickled = component, None
    component_ids = [entry[1] for entry in ordered]
    snapshot.base = CaptureBase(
        values=values,
        components=variables,
        ids=component_ids,
        held=[entry[2] for entry in ordered],
        unrestorable={u.name: u for u in failed if u.name in values},
        signature=snapshot.signature(),
        deps=[entry[3] for entry in ordered],
        name_deps=plan.name_deps,
        runtime_id=runtime_id,
        unpodded=[figure for _, figure in open_figs if id(figure) in plan.unpodded],
        figures=[entry[4] for entry in ordered],
        pods=plan.pods,
        pod_refs=plan.refs,
        shared=plan.shared,
        pyplot_figures=open_figs,
        mark=mark,
        watch_mark=plan.watch_mark,
        library=library_digests(namespace, component_ids, plan.library_memo),
    )
    return snapshot


def _plan(
    namespace: dict[str, object],
    values: dict[str, object],
    open_figs: list[tuple[int, Any]],
    following: CaptureBase | None,
    touched: set[str] | None,
    figures_reached: list[Any] | None,
    fresh: set[str] | None,
) -> CapturePlan:
    """The capture's pickles. A figure that shares a builtin container with another figure
    or a variable is pickled as a plain value (grouped with what shares it) and every other
    figure stays a pod. The capture before's plain figures stay plain when nothing of their
    group can have changed (so the sharing is still there: equal state, equal manifest)."""
    watch_mark = figure_watch.now()
    unpodded = _still_plain(following, values, touched, figures_reached or [])
    pods = True
    while True:
        plan = CapturePlan(
            namespace, values, open_figs, watch_mark=watch_mark, pods=pods, unpodded=unpodded
        )
        try:
            plan.pickle(following, touched or set(), figures_reached or [], fresh or set())
            return plan
        except PodConflict as conflict:  # a list or dict shared across a pod's edge
            more = {id(figure) for figure in conflict.figures} - unpodded
            if not more:  # no figure named, or none new: no pods this time
                pods = False
            unpodded = unpodded | more


def _still_plain(
    base: CaptureBase | None,
    values: dict[str, object],
    touched: set[str] | None,
    reached: list[Any],
) -> set[int]:
    """Ids of the figures `base` pickled as plain values whose group is as it was: every
    name of it (pyplot's list included: the same figures open) still bound to the same
    value and untouched, the figure unchanged and not made current around a cell."""
    if base is None or touched is None:
        return set()
    reached_ids = {id(figure) for figure in reached}
    found: set[int] = set()
    for figure in base.unpodded:
        names = [
            name
            for component, held in zip(base.components, base.figures, strict=True)
            if any(each is figure for each in held)
            for name in component["names"]
        ]
        if (
            names
            and id(figure) not in reached_ids
            and not figure_watch.changed_since(figure, base.watch_mark)
            and all(
                n not in touched and n in values and values[n] is base.values.get(n) for n in names
            )
        ):
            found.add(id(figure))
    return found


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
    cells_run: int | None
    base: CaptureBase | None = None
    #: The kernel's `%autocheckpoint` setting when captured (how many kept; None: off).
    autocheckpoint_keep: int | None = None
    #: The first cell whose automatic checkpoint was not recorded since the kernel's state
    #: was last a checkpoint's (`ContextCapture.unrecorded_cell`).
    unrecorded_cell: int | None = None

    def signature(self) -> bytes:
        """A digest of what the manifest will say, by chunk fingerprints: equal signatures,
        equal state."""

        def entry(stored: dict[str, Any]) -> list[Any]:
            return [stored["size"], stored["fps"]]

        summary = [
            [
                c["names"],
                c.get("slots"),
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

    def same_as(self, manifest_id: str) -> ContextCapture:
        """The capture of a state stored already as `manifest_id`: nothing written."""
        return ContextCapture(
            manifest_id=manifest_id,
            bytes_written=0,
            database_bytes=0,
            unrestorable=self.unrestorable,
            execution_count=self.execution_count,
            cells_run=self.cells_run,
            kernel_process=KERNEL_PROCESS,
            unrecorded_cell=self.unrecorded_cell,
        )

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
            if self.autocheckpoint_keep is not None:
                body[AUTOCHECKPOINT_KEY] = self.autocheckpoint_keep
            manifest_id = writer.put_manifest(body)
            manifest_bytes = writer.commit()
        except BaseException:
            writer.abort()
            raise
        remember_manifest(manifest_id, {**body, "components": self.components})
        return ContextCapture(
            manifest_id=manifest_id,
            bytes_written=writer.bytes_written + manifest_bytes,
            database_bytes=writer.log_overhead,
            unrestorable=self.unrestorable,
            execution_count=self.execution_count,
            cells_run=self.cells_run,
            kernel_process=KERNEL_PROCESS,
            unrecorded_cell=self.unrecorded_cell,
        )

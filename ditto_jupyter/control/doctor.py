"""`ditto doctor`: check that everything a data directory holds reads back.

First, whether the disk holding the data directory has room left: a full disk is not
damage, and is said as such (`disk`: where, and how much is free), as is a blob store the
disk does not let it open. Then four checks, each naming what it found damaged by id:

- **store**: every row of the checkpoint store reads back as its model;
- **chunks**: every chunk's content matches its BLAKE3 name (and its codec tag is known);
- **manifests**: every manifest's signature checks, and every chunk and child manifest it
  lists is stored;
- **checkpoints**: every manifest a readable checkpoint references (its namespace, its
  local workspace snapshot) is stored and checks.

It also lists the **leftovers** the store recorded: resources a cleanup could not free (a
kernel that would not stop, an E2B sandbox or snapshot that could not be deleted, a
workspace kept in place). They are not damage, so they leave `healthy` alone; they are
there to be freed by hand.

It only reads. It may run beside a server: a chunk or manifest that garbage collection
removes while it runs is skipped, not reported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ditto_jupyter.backends.manager import BackendManager
from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.blobs import BlobError, BlobNotFound, BlobStore
from ditto_jupyter.core.blobs.errors import DISK_FAILURES
from ditto_jupyter.core.models import Leftover

#: A disk with less room than this left is full: no checkpoint of any size fits (a chunk
#: takes up to 1 MiB, and the catalogue's log grows with every commit).
FULL_BELOW_BYTES = 4 << 20


class Finding(BaseModel):
    """One damaged thing: which part of the data directory, its id, what is wrong."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    part: Literal["disk", "store", "chunk", "manifest", "checkpoint", "blobs"]
    id: str
    problem: str


class DoctorReport(BaseModel):
    """What `ditto doctor` checked and what it found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows_checked: int = 0
    chunks_checked: int = 0
    manifests_checked: int = 0
    checkpoints_checked: int = 0
    findings: list[Finding] = []
    #: Resources cleanups could not free, oldest first (not damage: see the module).
    leftovers: list[Leftover] = []

    @property
    def healthy(self) -> bool:
        """Whether nothing was found wrong (no damage, and room on the disk)."""
        return not self.findings


def check_disk(data_dir: Path) -> list[Finding]:
    """A finding when the disk holding `data_dir` is full: where, and how much is free."""
    try:
        found = os.statvfs(data_dir)
    except OSError as error:
        return [
            Finding(part="disk", id=str(data_dir), problem=f"cannot tell its free space: {error}")
        ]
    free, total = found.f_bavail * found.f_frsize, found.f_blocks * found.f_frsize
    if free >= FULL_BELOW_BYTES:
        return []
    problem = (
        f"the disk holding it is full: {_size(free)} free of {_size(total)}; checkpoints "
        "fail with StorageFull until space is freed there (this is not damage)"
    )
    return [Finding(part="disk", id=str(data_dir), problem=problem)]


def unopened_blobs(blob_root: Path, error: BlobError) -> Finding:
    """The finding of a blob store that could not be opened: the disk's fault (full, or
    failing), or damage."""
    part: Literal["disk", "blobs"] = "disk" if isinstance(error, DISK_FAILURES) else "blobs"
    return Finding(part=part, id=str(blob_root), problem=str(error))


def unopened_store(data_dir: Path, error: Exception) -> Finding:
    """The finding of a checkpoint store that could not be opened on a full disk."""
    return Finding(
        part="disk", id=str(data_dir), problem=f"the checkpoint store cannot be opened: {error}"
    )


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def check_store(store: CheckpointStore) -> tuple[int, list[Finding]]:
    """Rows checked, and every row that does not read back."""
    damaged = store.damaged_rows()
    readable = len(store.list_sessions()) + len(store.list_checkpoints())
    readable += len(store.list_bindings())
    findings = [Finding(part="store", id=f"{r.table}/{r.key}", problem=r.reason) for r in damaged]
    return readable + len(damaged), findings


def check_chunks(blobs: BlobStore) -> tuple[int, list[Finding], set[str]]:
    """Chunks checked, the damaged ones, and their ids."""
    checked = 0
    findings: list[Finding] = []
    for digest, _size in blobs.iter_chunks():
        try:
            blobs.get_chunk(digest)
        except BlobNotFound as error:
            if "is not a chunk id" in str(error):  # a stray file among the chunks
                findings.append(Finding(part="chunk", id=digest, problem=str(error)))
            continue  # else collected while we looked
        except BlobError as error:
            findings.append(Finding(part="chunk", id=digest, problem=str(error)))
        checked += 1
    return checked, findings, {f.id for f in findings}


def check_manifests(blobs: BlobStore, bad_chunks: set[str]) -> tuple[int, list[Finding]]:
    """Manifests checked, and every one that fails its signature or misses what it lists."""
    checked = 0
    findings: list[Finding] = []
    for manifest_id in sorted(blobs.iter_manifests()):
        try:
            body = blobs.get_manifest(manifest_id)
        except BlobNotFound:
            continue  # collected while we looked
        except BlobError as error:
            findings.append(Finding(part="manifest", id=manifest_id, problem=str(error)))
            checked += 1
            continue
        checked += 1
        chunks, children = body.get("chunks", []), body.get("manifests", [])
        if not isinstance(chunks, list) or not isinstance(children, list):
            problem = "its 'chunks' or 'manifests' is not a list"
            findings.append(Finding(part="manifest", id=manifest_id, problem=problem))
            continue
        for digest in chunks:
            if digest in bad_chunks:
                problem = f"lists chunk {digest}, which is damaged"
            elif not isinstance(digest, str) or not _has_chunk(blobs, digest):
                problem = f"lists chunk {digest}, which is missing"
            else:
                continue
            findings.append(Finding(part="manifest", id=manifest_id, problem=problem))
        for child in children:
            if not isinstance(child, str) or not _has_manifest(blobs, child):
                problem = f"lists manifest {child}, which is missing"
                findings.append(Finding(part="manifest", id=manifest_id, problem=problem))
    return checked, findings


def check_checkpoints(
    store: CheckpointStore, blobs: BlobStore, backends: BackendManager, bad: set[str]
) -> tuple[int, list[Finding]]:
    """Checkpoints checked, and every one whose namespace, workspace or document manifest is
    gone or damaged (`bad`: manifests the manifest check found a problem with)."""
    checkpoints = store.list_checkpoints()
    findings: list[Finding] = []
    for checkpoint in checkpoints:
        wanted: list[tuple[str, str]] = []
        if checkpoint.context_manifest_id:
            wanted.append(("namespace", checkpoint.context_manifest_id))
        ref = checkpoint.backend_ref
        if ref is not None and ref.provider_snapshot_id:
            wanted += [("workspace", m) for m in backends.referenced_manifests(ref)]
        if checkpoint.document_manifest_id:
            wanted.append(("document", checkpoint.document_manifest_id))
        for what, manifest_id in wanted:
            if manifest_id in bad:
                problem = f"its {what} manifest {manifest_id} is damaged"
            elif not _has_manifest(blobs, manifest_id):
                problem = f"its {what} manifest {manifest_id} is missing"
            else:
                continue
            findings.append(
                Finding(part="checkpoint", id=checkpoint.checkpoint_id, problem=problem)
            )
    return len(checkpoints), findings


def check_health(
    store: CheckpointStore, blobs: BlobStore, backends: BackendManager
) -> DoctorReport:
    """Run every check over one store, its blob store and its backends."""
    disk_findings = check_disk(blobs.root.parent)
    rows, store_findings = check_store(store)
    chunks, chunk_findings, bad_chunks = check_chunks(blobs)
    manifests, manifest_findings = check_manifests(blobs, bad_chunks)
    bad_manifests = {f.id for f in manifest_findings}
    checkpoints, checkpoint_findings = check_checkpoints(store, blobs, backends, bad_manifests)
    return DoctorReport(
        rows_checked=rows,
        chunks_checked=chunks,
        manifests_checked=manifests,
        checkpoints_checked=checkpoints,
        findings=[
            *disk_findings,
            *store_findings,
            *chunk_findings,
            *manifest_findings,
            *checkpoint_findings,
        ],
        leftovers=store.list_leftovers(),
    )


def _has_chunk(blobs: BlobStore, digest: str) -> bool:
    try:
        return blobs.has_chunk(digest)
    except BlobNotFound:  # not a chunk id at all
        return False


def _has_manifest(blobs: BlobStore, manifest_id: str) -> bool:
    try:
        return blobs.has_manifest(manifest_id)
    except BlobNotFound:  # not a manifest id at all
        return False

"""The local provider: creates, re-opens and checks out workspaces under one root.

State kept beside (not inside) the workspaces, under `<workspaces_root>/.state/`: the id
of each workspace's last manifest (so a new process reuses unchanged files too) and the
clock marker file. A workspace is deleted only by `release()`, which the manager calls
when no runtime is bound to it any more (pause snapshots first).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

import orjson

from ditto_jupyter.backends.base import BackendLocator
from ditto_jupyter.backends.local.snapshots import (
    MANIFEST_KIND,
    FileIndex,
    load_index,
    materialise,
)
from ditto_jupyter.backends.local.trees import SnapshotTree
from ditto_jupyter.backends.local.workspace import (
    DEFAULT_EXEC_TIMEOUT,
    DEFAULT_OUTPUT_LIMIT,
    KIND,
    LocalBackend,
)
from ditto_jupyter.core.blobs import BlobError, BlobNotFound, BlobStore
from ditto_jupyter.core.blobs.errors import DISK_FAILURES, FULL_ERRNOS, full_disk, place_of
from ditto_jupyter.core.errors import BackendError, DittoError, InvalidRequest, UnsupportedBackend
from ditto_jupyter.core.models import BackendCheckpointRef
from ditto_jupyter.core.private import PRIVATE_DIR_MODE, private_dir

_STATE_DIR = ".state"
#: Snapshot trees kept in memory for comparisons (a panel compares neighbours in turn).
TREE_CACHE = 4
_ID_PATTERN = re.compile(r"^local-[0-9a-f]{32}$")
_log = logging.getLogger(__name__)


class LocalProvider:
    """Creates local workspaces under `workspaces_root` and manages their snapshots."""

    def __init__(
        self,
        workspaces_root: str | os.PathLike[str],
        blobs: BlobStore,
        *,
        exec_timeout: float = DEFAULT_EXEC_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
    ) -> None:
        if exec_timeout <= 0 or output_limit < 0:
            raise InvalidRequest("exec_timeout must be positive and output_limit non-negative")
        self.root = Path(workspaces_root)
        self.place = place_of(self.root)
        private_dir(self.root)
        self.root = Path(os.path.realpath(self.root))
        # Snapshots run in worker threads, each through a bulk write of this one store.
        self.blobs = blobs
        self.exec_timeout = exec_timeout
        self.output_limit = output_limit
        (self.root / _STATE_DIR).mkdir(exist_ok=True)
        self._trees: dict[str, SnapshotTree] = {}  # snapshots read lately, for comparisons
        self._trees_lock = threading.Lock()

    @property
    def kind(self) -> str:
        """Always "local"."""
        return KIND

    # ---- bookkeeping beside the workspaces ----------------------------------------------

    def workspace_dir(self, backend_id: str) -> Path:
        """Where the workspace of `backend_id` lives."""
        if not _ID_PATTERN.match(backend_id):
            raise InvalidRequest(f"{backend_id!r} is not a local backend id")
        return self.root / backend_id

    def clock_marker(self, backend_id: str) -> Path:
        """The marker file touched to read the filesystem clock at snapshot start."""
        return self.root / _STATE_DIR / f"{backend_id}.clock"

    def _state_file(self, backend_id: str) -> Path:
        return self.root / _STATE_DIR / f"{backend_id}.json"

    def failure(self, error: OSError, doing: str) -> DittoError:
        """An OS error of the data directory's disk: StorageFull when it is full (507),
        else BackendError (the local backend failed)."""
        if error.errno in FULL_ERRNOS:
            return full_disk(self.place)
        return BackendError(f"{doing} failed: {error.strerror or error}")

    def save_state(self, backend_id: str, manifest_id: str) -> None:
        """Remember the workspace's last manifest id (atomically) for a later process;
        only an optimisation, so a failure is logged, not raised."""
        target = self._state_file(backend_id)
        tmp = target.with_suffix(f".{secrets.token_hex(4)}.tmp")
        try:
            tmp.write_bytes(orjson.dumps({"last_manifest_id": manifest_id}))
            os.replace(tmp, target)
        except OSError as exc:
            _log.warning("could not remember the last snapshot of %s: %s", backend_id, exc)
            tmp.unlink(missing_ok=True)

    def _saved_manifest_id(self, backend_id: str) -> str | None:
        try:
            value = orjson.loads(self._state_file(backend_id).read_bytes()).get("last_manifest_id")
        except FileNotFoundError:  # never snapshotted by this data directory
            return None
        except (OSError, orjson.JSONDecodeError, AttributeError) as exc:
            _log.warning("ignored the unreadable snapshot state of %s: %s", backend_id, exc)
            return None
        return value if isinstance(value, str) else None

    def remove_workspace(self, backend_id: str) -> bool:
        """Delete a workspace and its bookkeeping; True when the directory existed."""
        folder = self.workspace_dir(backend_id)
        existed = folder.is_dir()
        if existed:
            shutil.rmtree(folder)
        for extra in (self._state_file(backend_id), self.clock_marker(backend_id)):
            extra.unlink(missing_ok=True)
        return existed

    # ---- BackendProvider ------------------------------------------------------------------

    async def create(self, runtime_id: str) -> LocalBackend:
        """A fresh, empty workspace directory for `runtime_id`."""
        backend_id = f"local-{uuid.uuid4().hex}"
        folder = self.workspace_dir(backend_id)
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except OSError as exc:
            raise self.failure(exc, f"creating workspace {folder}") from None
        return LocalBackend(self, backend_id, folder)

    async def attach(self, locator: BackendLocator) -> LocalBackend:
        """Re-open a workspace recorded before a restart, with its last snapshot's index."""
        if locator.kind != KIND:
            raise UnsupportedBackend(f"a {locator.kind!r} locator cannot be opened as local")
        folder = self.workspace_dir(locator.backend_id)
        if not folder.is_dir():
            raise BackendError(f"workspace {locator.backend_id} is gone from {self.root}")
        index: FileIndex | None = None
        manifest_id: str | None = None
        candidates = [self._saved_manifest_id(locator.backend_id)]
        recorded = locator.details.get("last_manifest_id")
        candidates.append(recorded if isinstance(recorded, str) else None)
        for candidate in candidates:
            index = load_index(self.blobs, candidate)
            if index is not None:
                manifest_id = candidate
                break
        return LocalBackend(
            self, locator.backend_id, folder, index=index, last_manifest_id=manifest_id
        )

    def snapshot_body(self, ref: BackendCheckpointRef) -> dict[str, Any]:
        """The manifest of the local snapshot `ref`, signature checked (UnsupportedBackend
        for another kind or a deleted snapshot, BackendError when it is missing or refused)."""
        if ref.backend_kind != KIND:
            raise UnsupportedBackend(f"a {ref.backend_kind!r} snapshot is not a local snapshot")
        if not ref.provider_snapshot_id:
            raise UnsupportedBackend("the checkpoint's local snapshot has been deleted")
        try:
            body = self.blobs.get_manifest(ref.provider_snapshot_id)
        except BlobNotFound:
            raise BackendError(
                f"local snapshot {ref.provider_snapshot_id} is missing from the blob store"
            ) from None
        except DISK_FAILURES:
            raise
        except BlobError as exc:
            raise BackendError(f"local snapshot refused: {exc}") from None
        if body.get("kind") != MANIFEST_KIND:
            raise BackendError(f"manifest {ref.provider_snapshot_id} is not a workspace snapshot")
        return body

    def snapshot_tree(self, ref: BackendCheckpointRef) -> SnapshotTree:
        """The files of the local snapshot `ref`, read from the blob store (the last few
        read are kept: a snapshot's id is the hash of its content)."""
        key = str(ref.provider_snapshot_id)
        with self._trees_lock:
            tree = self._trees.get(key)
        if tree is None:
            tree = SnapshotTree(self.blobs, self.snapshot_body(ref))
            with self._trees_lock:
                while len(self._trees) >= TREE_CACHE:
                    self._trees.pop(next(iter(self._trees)))
                self._trees[key] = tree
        return tree

    async def checkout(self, ref: BackendCheckpointRef, runtime_id: str) -> LocalBackend:
        """A new workspace holding real copies of every file of the snapshot `ref`."""
        body = self.snapshot_body(ref)
        backend_id = f"local-{uuid.uuid4().hex}"
        folder = self.workspace_dir(backend_id)
        index = await asyncio.to_thread(
            materialise, self.blobs, body, folder, self.clock_marker(backend_id), place=self.place
        )
        return LocalBackend(self, backend_id, folder, index=index)

    async def delete_snapshot(self, ref: BackendCheckpointRef) -> bool:
        """Delete the snapshot's manifest (its chunks go at the next gc); False if gone."""
        if ref.backend_kind != KIND:
            raise UnsupportedBackend(f"a {ref.backend_kind!r} snapshot is not a local snapshot")
        if not ref.provider_snapshot_id:
            return False
        try:
            return self.blobs.delete_manifest(ref.provider_snapshot_id)
        except BlobNotFound:
            return False

    def referenced_manifests(self, ref: BackendCheckpointRef) -> list[str]:
        """The manifest a local snapshot keeps alive."""
        return [ref.provider_snapshot_id] if ref.provider_snapshot_id else []

"""BranchStore: one in-process authority for named JSON state namespaces, with O(1) forks.

A store maps namespace names to JSON state values (validated like portable state). Forks
share the parent's immutable base (an `immutables.Map`, a HAMT, so a fork costs O(1)
whatever the store's size) and record their own write set. `commit()` applies the whole
write set atomically, and only if the parent's revision is still the one the branch forked
from; otherwise it raises BranchConflictError and the parent is unchanged (no implicit
merge). Each `set`/`delete` updates the branch's own persistent map (O(log n)), so a commit
just installs that map in the parent. A branch of a branch commits into its parent branch.
Values are stored as immutable JSON bytes, so reads and writes always copy: no caller can
change stored state through a reference it holds.

Snapshots are plain JSON-able dicts::

    {"format": "ditto.branch-store/v1", "store_id": ..., "revision": ..., "digest": ...,
     "namespaces": {name: value, ...}}

with `digest` = "sha256:" + hex over the RFC 8785 JSON of `{namespaces, revision, store_id}`.
`BranchStore(store_id, snapshot)` refuses a snapshot of another store id
(StateScopeError) or with a wrong digest (StateDigestError). `save(path)` writes a snapshot
atomically (temp file in the same directory, fsync, rename, fsync of the directory).

The store knows its open branches (`open_branches()`, in fork order, each with its
`serial`), so a view can list them; it holds them weakly, so a branch nobody keeps is
forgotten without being committed or discarded.

This store does not snapshot external resources (databases, processes, files): it holds
application-owned state only.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import json
import os
import re
import tempfile
import threading
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple, TypeVar, overload

import immutables
import orjson

from ditto_jupyter.worker.canonical import JSONValue, child_path, encode_json
from ditto_jupyter.worker.errors import (
    BranchClosedError,
    BranchConflictError,
    StateDigestError,
    StateError,
    StateScopeError,
)
from ditto_jupyter.worker.state import check_saved_form

__all__ = ["SNAPSHOT_FORMAT", "Branch", "BranchStore"]

SNAPSHOT_FORMAT = "ditto.branch-store/v1"
"""Format tag of BranchStore snapshots."""

_PRUNE_MIN = 64  # open-branch references kept before the first pruning pass
_SNAPSHOT_KEYS = frozenset({"format", "store_id", "revision", "digest", "namespaces"})
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")


class _Entry(NamedTuple):
    """One stored value: JSON bytes (key order kept) and its RFC 8785 bytes."""

    data: bytes
    canonical: bytes


_T = TypeVar("_T")
_Namespaces = immutables.Map[str, _Entry]


def _check_name(name: object) -> str:
    """A namespace name is a non-empty string that can be a JSON object key."""
    if type(name) is not str:
        raise TypeError(f"namespace name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("namespace name must not be empty")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"namespace name {name!r} is not valid Unicode") from None
    return name


def _encode_entry(name: str, value: object, prefix: str = "$") -> _Entry:
    """Validate and freeze a value; errors name the path below the namespace."""
    encoded = encode_json(value, child_path(prefix, name))
    return _Entry(encoded.data, encoded.canonical)


def _utf16_key(name: str) -> bytes:
    return name.encode("utf-16-be", "surrogatepass")


def _digest(store_id: str, revision: int, namespaces: Mapping[str, _Entry]) -> str:
    """SHA-256 over RFC 8785 JSON of {namespaces, revision, store_id}, built from stored bytes."""
    sha = hashlib.sha256(b'{"namespaces":{')
    for index, name in enumerate(sorted(namespaces.keys(), key=_utf16_key)):
        if index:
            sha.update(b",")
        sha.update(orjson.dumps(name))
        sha.update(b":")
        sha.update(namespaces[name].canonical)
    sha.update(b'},"revision":')
    sha.update(str(revision).encode())
    sha.update(b',"store_id":')
    sha.update(orjson.dumps(store_id))
    sha.update(b"}")
    return "sha256:" + sha.hexdigest()


def _load_snapshot(store_id: str, snapshot: object) -> tuple[int, _Namespaces]:
    """Check a snapshot (format, id, shape, values, digest) and return its revision and map."""
    if not isinstance(snapshot, Mapping):
        raise StateError(f"snapshot must be a dict from BranchStore.snapshot(), got {snapshot!r}")
    check_saved_form(snapshot, SNAPSHOT_FORMAT, _SNAPSHOT_KEYS, "snapshot")
    if snapshot["store_id"] != store_id:
        raise StateScopeError(
            f"snapshot belongs to store {snapshot['store_id']!r}, not {store_id!r}"
        )
    revision = snapshot["revision"]
    if type(revision) is not int or revision < 0:
        raise StateError(f"snapshot revision must be a non-negative integer, got {revision!r}")
    digest = snapshot["digest"]
    if type(digest) is not str or not _DIGEST.match(digest):
        raise StateDigestError(f"snapshot digest {digest!r} is not 'sha256:' + 64 hex digits")
    namespaces = snapshot["namespaces"]
    if type(namespaces) is not dict:
        raise StateError(f"snapshot namespaces must be an object, got {type(namespaces)!r}")
    entries: dict[str, _Entry] = {}
    for name, value in namespaces.items():
        try:
            _check_name(name)
        except (TypeError, ValueError) as error:
            raise StateError(f"snapshot namespace: {error}") from None
        entries[name] = _encode_entry(name, value, "$.namespaces")
    if not hmac.compare_digest(digest, _digest(store_id, revision, entries)):
        raise StateDigestError("snapshot does not match its digest (altered or corrupted)")
    return revision, immutables.Map(entries)


def _write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` by `data` so that a crash leaves either the old or the new file."""
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class _Head:
    """A revision and its namespace map, published together as one tuple so that a reader
    without the lock never sees a map with another revision's number."""

    _head: tuple[int, _Namespaces]

    @property
    def _revision(self) -> int:
        return self._head[0]

    @property
    def _map(self) -> _Namespaces:
        return self._head[1]


class BranchStore(_Head):
    """The authority for a set of JSON namespaces; change it only through committed forks."""

    def __init__(self, store_id: str, snapshot: Mapping[str, object] | None = None) -> None:
        if type(store_id) is not str or not store_id:
            raise ValueError(f"store_id must be a non-empty string, got {store_id!r}")
        self._store_id = store_id
        self._lock = threading.Lock()  # one lock per root store: commits are atomic
        self._head = (0, immutables.Map())
        # Open branches by serial, held weakly: registered at fork, dropped at commit or
        # discard; references to forgotten branches are pruned once the dict doubles.
        # Plain dict operations (atomic under the GIL), so a fork needs no lock.
        self._open: dict[int, weakref.ref[Branch]] = {}
        self._prune_at = _PRUNE_MIN
        self._serials = itertools.count(1)
        if snapshot is not None:
            self._head = _load_snapshot(store_id, snapshot)

    @property
    def store_id(self) -> str:
        """The id this store was created with (snapshots carry it)."""
        return self._store_id

    @property
    def revision(self) -> int:
        """Number of commits that changed this store (restored from a snapshot)."""
        return self._revision

    @overload
    def get(self, name: str) -> JSONValue: ...
    @overload
    def get(self, name: str, default: _T) -> JSONValue | _T: ...
    def get(self, name: str, default: object = None) -> object:
        """A fresh copy of the namespace's value, or `default` when it is absent."""
        entry = self._map.get(_check_name(name))
        return default if entry is None else orjson.loads(entry.data)

    def namespaces(self) -> list[str]:
        """Names of the namespaces that hold a value, sorted."""
        return sorted(self._map.keys())

    def __contains__(self, name: object) -> bool:
        return name in self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[str]:
        return iter(self.namespaces())

    def fork(self) -> Branch:
        """A new branch on the current revision; O(1) whatever the store's size."""
        revision, current = self._head
        branch = Branch(self, self, current, revision)
        self._register(branch)
        return branch

    def _register(self, branch: Branch) -> None:
        """Give a new branch its serial and list it as open."""
        serial = next(self._serials)
        branch._serial = serial
        self._open[serial] = weakref.ref(branch)
        if len(self._open) > self._prune_at:
            for number, ref in list(self._open.items()):
                if ref() is None:
                    self._open.pop(number, None)
            self._prune_at = max(_PRUNE_MIN, 2 * len(self._open))

    def open_branches(self) -> list[Branch]:
        """The branches forked from this store (or from its branches) that are neither
        committed nor discarded and still referenced, oldest first."""
        found = (ref() for _, ref in sorted(list(self._open.items()), key=lambda item: item[0]))
        return [branch for branch in found if branch is not None and not branch.closed]

    def _current(self) -> tuple[int, _Namespaces]:
        return self._head

    def snapshot(self) -> dict[str, object]:
        """A JSON-able snapshot: store id, revision, namespaces (copied) and digest."""
        revision, entries = self._current()
        return {
            "format": SNAPSHOT_FORMAT,
            "store_id": self._store_id,
            "revision": revision,
            "digest": _digest(self._store_id, revision, entries),
            "namespaces": {name: orjson.loads(entries[name].data) for name in sorted(entries)},
        }

    def snapshot_bytes(self) -> bytes:
        """The snapshot as UTF-8 JSON bytes (what `save` writes), built from stored bytes."""
        revision, entries = self._current()
        head = {
            "format": SNAPSHOT_FORMAT,
            "store_id": self._store_id,
            "revision": revision,
            "digest": _digest(self._store_id, revision, entries),
        }
        body = b",".join(orjson.dumps(name) + b":" + entries[name].data for name in sorted(entries))
        return orjson.dumps(head)[:-1] + b',"namespaces":{' + body + b"}}\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the snapshot to `path` atomically (temp file, fsync, rename, fsync dir)."""
        _write_atomically(Path(path), self.snapshot_bytes())

    @classmethod
    def load(cls, path: str | os.PathLike[str], store_id: str | None = None) -> BranchStore:
        """Open a store saved with `save`; with `store_id`, refuse a file of another store."""
        raw = Path(path).read_bytes()
        try:
            # The stdlib parser: values may nest 254 levels below the snapshot's own two.
            snapshot = json.loads(raw)
        except ValueError as error:
            raise StateError(
                f"{path}: not a BranchStore snapshot (invalid JSON: {error})"
            ) from None
        if not isinstance(snapshot, dict):
            raise StateError(f"{path}: not a BranchStore snapshot (not a JSON object)")
        expected = snapshot.get("store_id") if store_id is None else store_id
        if type(expected) is not str or not expected:
            raise StateError(f"{path}: snapshot has no valid store_id")
        return cls(expected, snapshot)

    def __repr__(self) -> str:
        revision, current = self._head
        return f"BranchStore({self._store_id!r}, revision={revision}, namespaces={len(current)})"


class Branch(_Head):
    """An isolated view forked from a store or another branch; commit it or discard it."""

    def __init__(
        self,
        root: BranchStore,
        parent: BranchStore | Branch,
        base: _Namespaces,
        base_revision: int,
    ) -> None:
        self._root = root
        self._parent = parent
        # The base with this branch's writes applied, and a revision bumped by each write
        # here and each commit of a child branch.
        self._head = (0, base)
        self._base_revision = base_revision
        self._written: set[str] = set()
        self._closed: str | None = None  # "committed" or "discarded"
        self._serial = 0  # set when the root registers it

    def _close(self, how: str) -> None:
        """Mark the branch committed or discarded and drop it from the open list (lock held)."""
        self._closed = how
        self._root._open.pop(self._serial, None)

    @property
    def serial(self) -> int:
        """This branch's number in its store, counting forks from 1 (a view's label)."""
        return self._serial

    def _ensure_open(self) -> None:
        if self._closed is not None:
            raise BranchClosedError(f"branch was already {self._closed}; fork a new one")

    @property
    def closed(self) -> bool:
        """True once the branch was committed or discarded."""
        return self._closed is not None

    @property
    def written(self) -> frozenset[str]:
        """Names in this branch's write set (set or deleted here, or by committed children)."""
        return frozenset(self._written)

    @property
    def base_revision(self) -> int:
        """The parent's revision this branch forked from (commit requires it unchanged)."""
        return self._base_revision

    @property
    def revision(self) -> int:
        """Changes made to this branch so far (its children fork and commit against it)."""
        return self._revision

    @property
    def parent(self) -> BranchStore | Branch:
        """The store or branch this branch commits into."""
        return self._parent

    @overload
    def get(self, name: str) -> JSONValue: ...
    @overload
    def get(self, name: str, default: _T) -> JSONValue | _T: ...
    def get(self, name: str, default: object = None) -> object:
        """A fresh copy of the namespace's value in this branch, or `default`."""
        self._ensure_open()
        entry = self._map.get(_check_name(name))
        return default if entry is None else orjson.loads(entry.data)

    def namespaces(self) -> list[str]:
        """Names holding a value in this branch, sorted."""
        self._ensure_open()
        return sorted(self._map.keys())

    def __contains__(self, name: object) -> bool:
        self._ensure_open()
        return name in self._map

    def set(self, name: str, value: object) -> None:
        """Store a validated copy of `value` under `name` in this branch only."""
        self._ensure_open()
        entry = _encode_entry(_check_name(name), value)
        with self._root._lock:
            self._ensure_open()
            revision, current = self._head
            self._head = (revision + 1, current.set(name, entry))
            self._written.add(name)

    def delete(self, name: str) -> bool:
        """Remove `name` in this branch (recorded in the write set); True if it held a value."""
        self._ensure_open()
        _check_name(name)
        with self._root._lock:
            self._ensure_open()
            revision, current = self._head
            existed = name in current
            self._head = (revision + 1, current.delete(name) if existed else current)
            self._written.add(name)
            return existed

    def fork(self) -> Branch:
        """A child branch on this branch's current view; its commit lands in this branch."""
        with self._root._lock:
            self._ensure_open()
            revision, current = self._head
            branch = Branch(self._root, self, current, revision)
            self._root._register(branch)
            return branch

    def commit(self) -> int:
        """Apply the write set to the parent atomically; return the parent's new revision.

        Raises BranchConflictError (parent unchanged, branch still open) when the parent's
        revision moved since the fork, BranchClosedError when this branch or its parent
        branch is closed.
        """
        with self._root._lock:
            self._ensure_open()
            parent = self._parent
            if isinstance(parent, Branch) and parent._closed is not None:
                raise BranchClosedError(
                    f"parent branch was already {parent._closed}; nothing to commit into"
                )
            actual = parent._revision
            if actual != self._base_revision:
                raise BranchConflictError(self._base_revision, actual, self._written)
            if self._written:
                # Every change to a map bumps its owner's revision, so an unmoved parent
                # still holds this branch's base, and this branch's map (base + writes) is
                # the result: O(1), whatever the size of the store or of the write set.
                parent._head = (actual + 1, self._map)
                if isinstance(parent, Branch):
                    parent._written |= self._written
            self._close("committed")
            return parent._revision

    def discard(self) -> None:
        """Close the branch without touching its parent."""
        with self._root._lock:
            self._ensure_open()
            self._close("discarded")

    def __repr__(self) -> str:
        state = self._closed or "open"
        return (
            f"<Branch of {self._root.store_id!r} at revision {self._base_revision}, {state}, "
            f"written={sorted(self._written)}>"
        )

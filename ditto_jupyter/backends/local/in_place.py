"""Bring a workspace snapshot back into the live workspace itself (undo's files).

The workspace ends up exactly as the snapshot: entries it does not hold (or holds as
another kind) are removed, missing folders made, every file whose content or mode differs
written anew, every symlink whose target differs made again; files already as the snapshot
has them are left alone. Each file and symlink is written beside its place and renamed over
it, so no file is ever half written. A failure part way leaves some entries changed: the
caller takes a snapshot first and restores that one to undo the attempt (`InPlaceRestorer`).

A file counts as unchanged when the workspace's file index vouches for it (the same stat
fingerprint, taken before the snapshot's clock) and names the snapshot's chunks. The index
returned vouches for the files as they are now, so the next snapshot reads none of them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat as stat_mod
from pathlib import Path
from typing import Any

from ditto_jupyter.backends.local.copying import copy_chunk
from ditto_jupyter.backends.local.paths import member
from ditto_jupyter.backends.local.snapshots import FileEntry, FileIndex, touch_clock
from ditto_jupyter.backends.local.trees import tree_entries
from ditto_jupyter.core.blobs import BlobStore

_TEMP_PREFIX = ".ditto-restore-"


def _current(root: str) -> dict[str, tuple[str, os.stat_result]]:
    """Every entry under `root`: its kind (file, dir, symlink, other) and lstat."""
    found: dict[str, tuple[str, os.stat_result]] = {}
    prefix = len(root) + 1
    pending = [root]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as listing:
            for item in listing:
                st = item.stat(follow_symlinks=False)
                rel = item.path[prefix:]
                if stat_mod.S_ISDIR(st.st_mode):
                    found[rel] = ("dir", st)
                    pending.append(item.path)
                elif stat_mod.S_ISLNK(st.st_mode):
                    found[rel] = ("symlink", st)
                elif stat_mod.S_ISREG(st.st_mode):
                    found[rel] = ("file", st)
                else:
                    found[rel] = ("other", st)
    return found


def _vouched(index: FileIndex, path: str, st: os.stat_result) -> FileEntry | None:
    """The index's entry for a file when it still vouches for it (as a snapshot trusts it)."""
    old = index.entries.get(path)
    if (
        old is not None
        and old.size == st.st_size
        and old.mtime_ns == st.st_mtime_ns
        and old.ctime_ns == st.st_ctime_ns
        and old.ino == st.st_ino
        and old.ctime_ns < index.clock_ns
    ):
        return old
    return None


def _depth(path: str) -> int:
    return path.count("/")


def _write_file(blobs: BlobStore, root: str, entry: FileEntry) -> FileEntry:
    """Write one file of the snapshot beside its place, then rename it over; its new entry."""
    target = member(root, entry.path)
    temp = os.path.join(os.path.dirname(target), _TEMP_PREFIX + secrets.token_hex(8))
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            position = 0
            for digest in entry.chunks:
                position += copy_chunk(blobs, digest, fd, position)
            os.fchmod(fd, entry.mode & 0o7777)
            os.utime(fd, ns=(entry.mtime_ns, entry.mtime_ns))
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # never made, or renamed already
            os.unlink(temp)
        raise
    st = os.lstat(target)
    return FileEntry(
        entry.path, entry.mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, entry.chunks
    )


def _write_symlink(root: str, path: str, link_target: str) -> None:
    place = member(root, path)
    temp = os.path.join(os.path.dirname(place), _TEMP_PREFIX + secrets.token_hex(8))
    os.symlink(link_target, temp)
    try:
        os.replace(temp, place)
    except BaseException:
        os.unlink(temp)
        raise


def restore_in_place(
    blobs: BlobStore, root: str, body: dict[str, Any], index: FileIndex, clock_marker: Path
) -> FileIndex:
    """Make the workspace `root` exactly the snapshot `body`; the index of its files now."""
    wanted = tree_entries(body)
    files = {str(raw["path"]): FileEntry.from_json(raw) for raw in body.get("files", [])}
    current = _current(root)
    # what the snapshot does not hold, or holds as another kind: deepest first
    for path in sorted(current, key=_depth, reverse=True):
        kind, _ = current[path]
        kept = wanted.get(path)
        if kept is not None and kept.kind == kind:
            continue
        place = member(root, path)
        if kind == "dir":
            shutil.rmtree(place)
        else:
            os.unlink(place)
        del current[path]
    for path in sorted((p for p, e in wanted.items() if e.kind == "dir"), key=_depth):
        if path not in current:
            os.mkdir(member(root, path), 0o700)
    entries: dict[str, FileEntry] = {}
    for path, file in files.items():
        found = current.get(path)
        known = _vouched(index, path, found[1]) if found is not None else None
        if found is not None and known is not None and known.chunks == file.chunks:
            if stat_mod.S_IMODE(found[1].st_mode) != file.mode & 0o7777:
                os.chmod(member(root, path), file.mode & 0o7777)
            entries[path] = known
        else:
            entries[path] = _write_file(blobs, root, file)
    for path, link in wanted.items():
        if link.kind == "symlink":
            found_link = current.get(path)
            link_target = link.content[0]
            if found_link is None or os.readlink(member(root, path)) != link_target:
                _write_symlink(root, path, link_target)
    for path in sorted((p for p, e in wanted.items() if e.kind == "dir"), key=_depth, reverse=True):
        os.chmod(member(root, path), wanted[path].mode & 0o7777)
    return FileIndex(entries=entries, clock_ns=touch_clock(clock_marker))

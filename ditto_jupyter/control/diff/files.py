"""Workspace entries added, removed and changed between two file trees.

A file's content is its chunk names (hashes of its bytes), so files compare without being
read. A changed text file of at most `TEXT_DIFF_LIMIT` bytes on both sides gets a unified
diff (the first `TEXT_DIFFS` changed files: a comparison's answer stays small and quick); a
file that is not UTF-8 text, or holds a NUL byte, gets none.
"""

from __future__ import annotations

import difflib
from typing import Literal

from ditto_jupyter.backends.base import FileTree, TreeEntry
from ditto_jupyter.core.models import FileChange, FileEntry, FilesDiff

#: Files this big or smaller (bytes, both sides) get a text diff.
TEXT_DIFF_LIMIT = 64 * 1024
#: At most this many changed files get a text diff in one comparison.
TEXT_DIFFS = 100


def file_entry(entry: TreeEntry) -> FileEntry:
    """The wire form of one tree entry."""
    return FileEntry(path=entry.path, size=entry.size, kind=_kind(entry))


def _kind(entry: TreeEntry) -> Literal["file", "dir", "symlink"]:
    if entry.kind == "dir" or entry.kind == "symlink":
        return entry.kind
    return "file"


def same_entry(old: TreeEntry, new: TreeEntry) -> bool:
    """Whether two entries hold the same: kind, content and a file's permissions."""
    if old.kind != new.kind or old.content != new.content:
        return False
    return old.kind != "file" or (old.mode & 0o7777) == (new.mode & 0o7777)


def _text(data: bytes | None) -> str | None:
    if data is None or b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def text_diff(path: str, old: FileTree, new: FileTree) -> str | None:
    """A unified diff of a small text file changed between two trees, else None."""
    before = _text(old.read(path, TEXT_DIFF_LIMIT))
    after = _text(new.read(path, TEXT_DIFF_LIMIT))
    if before is None or after is None or before == after:
        return None
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{path}",
        f"b/{path}",
    )
    return "".join(lines)


def compare_files(old: FileTree | None, new: FileTree | None) -> FilesDiff:
    """What changed from `old` to `new` (None: that side's files cannot be read here)."""
    if old is None or new is None:
        return FilesDiff(added=[], removed=[], changed=[], unchanged=0, available=False)
    before, after = old.entries, new.entries
    added = [file_entry(after[path]) for path in sorted(after.keys() - before.keys())]
    removed = [file_entry(before[path]) for path in sorted(before.keys() - after.keys())]
    changed: list[FileChange] = []
    unchanged = 0
    for path in sorted(before.keys() & after.keys()):
        was, now = before[path], after[path]
        if same_entry(was, now):
            unchanged += 1
            continue
        diff = None
        if was.kind == now.kind == "file" and len(changed) < TEXT_DIFFS:
            diff = text_diff(path, old, new)
        changed.append(
            FileChange(path=path, old=file_entry(was), new=file_entry(now), text_diff=diff)
        )
    return FilesDiff(added=added, removed=removed, changed=changed, unchanged=unchanged)

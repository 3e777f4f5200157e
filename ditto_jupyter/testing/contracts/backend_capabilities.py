"""The specs of what only some backends can do (`ditto_jupyter.backends.base`): read a
snapshot's files (`SnapshotReader`, what comparing two checkpoints needs), read the live
files without a snapshot (`LiveTreeReader`, what comparing with `live` needs), and bring a
snapshot's files back into the live backend (`InPlaceRestorer`, what undo and an in-place
restore need).

A file's content is named (`TreeEntry.content`): equal bytes get equal names, other bytes
other names, so two trees compare without reading a file twice. Each spec takes the same
`provider` fixture as `BackendContract`; a backend that has a capability subclasses its
spec beside `BackendContract`.
"""

from __future__ import annotations

import pytest

from ditto_jupyter.backends.base import (
    Backend,
    BackendProvider,
    FileTree,
    InPlaceRestorer,
    LiveTreeReader,
    SnapshotReader,
)
from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.testing.contracts.backend import filled, run


def files_of(tree: FileTree) -> dict[str, tuple[int | None, tuple[str, ...]]]:
    """A tree's regular files: size and content names, by path."""
    return {
        path: (entry.size, entry.content)
        for path, entry in tree.entries.items()
        if entry.kind == "file"
    }


def check_tree_of_the_filled_backend(tree: FileTree, *, also: frozenset[str] = frozenset()) -> None:
    """What `filled` wrote, and the files `also` written since, as a tree shows them."""
    assert tree.entries["data"].kind == "dir" and tree.entries["data/deep"].kind == "dir"
    files = files_of(tree)
    assert set(files) == {"notes/a.txt", "data/deep/b.bin", "empty.txt", *also}
    assert files["notes/a.txt"][0] == 11 and files["data/deep/b.bin"][0] == 256
    assert tree.read("notes/a.txt", 11) == b"alpha\nbeta\n"
    assert tree.read("notes/a.txt", 10) is None  # over the limit: not read
    assert tree.read("data/deep/b.bin", 1 << 20) == bytes(range(256))
    assert tree.read("missing.txt", 1 << 20) is None
    assert tree.read("data", 1 << 20) is None  # a folder has no bytes


class SnapshotReaderContract:
    """`SnapshotReader`: a snapshot read file by file; a subclass provides `provider`."""

    def test_a_snapshot_is_read_file_by_file(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            assert isinstance(provider, SnapshotReader)
            backend = await filled(provider, "rt-tree")
            try:
                await backend.write_bytes("copy.txt", b"alpha\nbeta\n")
                ref = await backend.checkpoint()
                await backend.write_bytes("notes/a.txt", b"changed after the snapshot")
                tree = provider.snapshot_tree(ref)
                check_tree_of_the_filled_backend(tree, also=frozenset({"copy.txt"}))
                assert files_of(tree)["copy.txt"] == files_of(tree)["notes/a.txt"]  # same bytes
            finally:
                await backend.release()

        run(scenario())

    def test_a_deleted_snapshot_cannot_be_read(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            assert isinstance(provider, SnapshotReader)
            backend = await filled(provider, "rt-gone")
            try:
                ref = await backend.checkpoint()
                assert await provider.delete_snapshot(ref) is True
                with pytest.raises(BackendError):
                    provider.snapshot_tree(ref)
            finally:
                await backend.release()

        run(scenario())


class LiveTreeReaderContract:
    """`LiveTreeReader`: the live files read without a snapshot; a subclass provides
    `provider`, whose backends have the capability."""

    def test_the_live_files_are_read_as_they_are_now(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            backend = await filled(provider, "rt-live")
            try:
                assert isinstance(backend, LiveTreeReader)
                check_tree_of_the_filled_backend(await backend.live_tree())
                before = files_of(await backend.live_tree())["notes/a.txt"]
                await backend.write_bytes("notes/a.txt", b"alpha\nBETA\n")  # same size
                await backend.write_bytes("copy.bin", bytes(range(256)))
                now = files_of(await backend.live_tree())
                assert now["notes/a.txt"] != before
                assert now["copy.bin"] == now["data/deep/b.bin"]  # same bytes, same names
            finally:
                await backend.release()

        run(scenario())


class InPlaceRestorerContract:
    """`InPlaceRestorer`: a snapshot's files brought back into the live backend; a subclass
    provides `provider`, whose backends have the capability."""

    def test_restoring_makes_the_files_exactly_the_snapshots(
        self, provider: BackendProvider
    ) -> None:
        async def scenario() -> None:
            backend: Backend = await filled(provider, "rt-restore")
            try:
                assert isinstance(backend, InPlaceRestorer)
                ref = await backend.checkpoint()
                await backend.write_bytes("notes/a.txt", b"changed")
                await backend.write_bytes("added/new.txt", b"new")
                await backend.exec("rm data/deep/b.bin")
                await backend.restore_snapshot(ref)
                assert await backend.read_bytes("notes/a.txt") == b"alpha\nbeta\n"
                assert await backend.read_bytes("data/deep/b.bin") == bytes(range(256))
                assert await backend.read_bytes("empty.txt") == b""
                with pytest.raises(BackendError):
                    await backend.read_bytes("added/new.txt")
                await backend.restore_snapshot(ref)  # already there: nothing changes
                assert await backend.read_bytes("notes/a.txt") == b"alpha\nbeta\n"
            finally:
                await backend.release()

        run(scenario())

"""LocalBackend / LocalProvider: confinement, every operation, snapshots and checkout."""

from __future__ import annotations

import asyncio
import io
import os
import stat
import subprocess
import tarfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ditto_jupyter.backends.base import Backend, BackendProvider
from ditto_jupyter.backends.local import LocalBackend, LocalProvider, snapshots
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import BackendError, InvalidRequest, UnsupportedBackend
from ditto_jupyter.core.models import BackendCheckpointRef
from tests.support.stored_blobs import tamper_manifest

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def provider(tmp_path: Path) -> LocalProvider:
    return LocalProvider(tmp_path / "workspaces", BlobStore(tmp_path / "blobs", durable=False))


@pytest.fixture
def backend(provider: LocalProvider) -> LocalBackend:
    return run(provider.create("rt-1"))


def let_fs_clock_pass(anchor: Path) -> None:
    """Wait until the filesystem clock is past every ctime under `anchor`.

    Files written in the same timestamp tick as a snapshot's start are "racy" and are
    re-read by the next snapshot; tests that count re-reads first let that tick pass.
    """
    newest = max(os.lstat(p).st_ctime_ns for p in [anchor, *anchor.rglob("*")])
    probe = anchor.parent / ".clock-probe"
    while True:
        probe.write_bytes(b"")
        os.utime(probe, None)
        if os.stat(probe).st_ctime_ns > newest:
            return
        time.sleep(0.001)


def tree_of(root: Path) -> dict[str, tuple[str, bytes | str | None, int]]:
    """Everything under `root`: kind, content (or link target) and permission bits."""
    out: dict[str, tuple[str, bytes | str | None, int]] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        st_ = os.lstat(path)
        mode = stat.S_IMODE(st_.st_mode)
        if path.is_symlink():
            out[rel] = ("symlink", os.readlink(path), 0)
        elif path.is_dir():
            out[rel] = ("dir", None, mode)
        else:
            out[rel] = ("file", path.read_bytes(), mode)
    return out


def test_satisfies_the_protocols(provider: LocalProvider, backend: LocalBackend) -> None:
    assert isinstance(provider, BackendProvider)
    assert isinstance(backend, Backend)
    assert backend.kind == "local" and backend.backend_id.startswith("local-")
    assert backend.local_path is not None and backend.local_path.is_dir()
    assert backend.local_path.parent == provider.root


# ---- confinement --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["/etc/passwd", "../outside", "a/../../x", "a/../b", "", "a\x00b"])
def test_bad_paths_are_refused_by_every_operation(backend: LocalBackend, bad: str) -> None:
    calls = [
        backend.stat(bad),
        backend.read_bytes(bad),
        backend.write_bytes(bad, b"x"),
        backend.create_dir_all(bad),
        backend.search("x", bad),
        backend.export(bad),
        backend.exec("true", cwd=bad),
    ]
    for call in calls:
        with pytest.raises(InvalidRequest):
            run(call)
    assert list(backend.local_path.iterdir()) == []


def test_escaping_symlinks_are_refused(backend: LocalBackend, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    ws = backend.local_path
    os.symlink(outside / "secret", ws / "file-link")
    os.symlink(outside, ws / "dir-link")
    os.symlink("../../outside/secret", ws / "relative-link")
    for path in ["file-link", "dir-link/secret", "relative-link", "dir-link"]:
        with pytest.raises(InvalidRequest, match="outside the workspace"):
            run(backend.read_bytes(path))
        with pytest.raises(InvalidRequest, match="outside the workspace"):
            run(backend.write_bytes(path, b"overwrite"))
    with pytest.raises(InvalidRequest):
        run(backend.create_dir_all("dir-link/new"))
    with pytest.raises(InvalidRequest):
        run(backend.exec("true", cwd="dir-link"))
    assert (outside / "secret").read_bytes() == b"secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]


def test_a_path_through_an_outside_directory_is_refused(
    backend: LocalBackend, tmp_path: Path
) -> None:
    """ws/out -> /outside, /outside/back -> ws/target: the path leaves and re-enters."""
    outside = tmp_path / "outside2"
    outside.mkdir()
    run(backend.write_bytes("target", b"t"))
    os.symlink(backend.local_path / "target", outside / "back")
    os.symlink(outside, backend.local_path / "out")
    for call in (backend.stat("out/back"), backend.read_bytes("out/back")):
        with pytest.raises(InvalidRequest, match="outside the workspace"):
            run(call)


def test_symlinks_inside_the_workspace_are_followed(backend: LocalBackend) -> None:
    run(backend.write_bytes("data/real.txt", b"hello"))
    os.symlink("data/real.txt", backend.local_path / "alias")
    os.symlink("data", backend.local_path / "data-alias")
    assert run(backend.read_bytes("alias")) == b"hello"
    assert run(backend.read_bytes("data-alias/real.txt")) == b"hello"
    run(backend.write_bytes("alias", b"through the link"))
    assert (backend.local_path / "data" / "real.txt").read_bytes() == b"through the link"
    assert run(backend.stat("alias")).kind == "symlink"


# ---- file operations ----------------------------------------------------------------------


def test_file_operations(backend: LocalBackend) -> None:
    run(backend.write_bytes("a/b/c.bin", b"\x00\x01\x02"))
    assert run(backend.read_bytes("a/b/c.bin")) == b"\x00\x01\x02"
    info = run(backend.stat("a/b/c.bin"))
    assert (info.kind, info.size, info.path) == ("file", 3, "a/b/c.bin")
    assert run(backend.stat("a")).kind == "dir"
    assert run(backend.stat(".")).kind == "dir"
    run(backend.create_dir_all("x/y/z"))
    run(backend.create_dir_all("x/y/z"))  # idempotent
    assert (backend.local_path / "x/y/z").is_dir()
    tmp = run(backend.temp_path(".csv"))
    assert tmp.endswith(".csv") and tmp.startswith(".ditto-tmp/")
    assert (backend.local_path / tmp).read_bytes() == b""
    assert run(backend.temp_path()) != run(backend.temp_path())
    with pytest.raises(InvalidRequest):
        run(backend.temp_path("a/b"))


def test_write_keeps_the_mode_of_an_existing_file(backend: LocalBackend) -> None:
    run(backend.write_bytes("run.sh", b"#!/bin/sh\necho hi\n"))
    os.chmod(backend.local_path / "run.sh", 0o751)
    run(backend.write_bytes("run.sh", b"#!/bin/sh\necho bye\n"))
    assert stat.S_IMODE(os.stat(backend.local_path / "run.sh").st_mode) == 0o751


def test_io_failures_are_backend_errors_and_change_nothing(backend: LocalBackend) -> None:
    run(backend.write_bytes("file", b"content"))
    before = tree_of(backend.local_path)
    with pytest.raises(BackendError, match="does not exist"):
        run(backend.read_bytes("missing"))
    with pytest.raises(BackendError, match="does not exist"):
        run(backend.stat("missing"))
    with pytest.raises(BackendError, match="directory"):
        run(backend.read_bytes("."))
    with pytest.raises(BackendError):
        run(backend.write_bytes("file/child/x", b"parent is a file"))
    with pytest.raises(BackendError, match="not a directory"):
        run(backend.create_dir_all("file"))
    os.mkdir(backend.local_path / "ro")
    os.chmod(backend.local_path / "ro", 0o500)
    try:
        if os.geteuid() != 0:  # root ignores permission bits
            with pytest.raises(BackendError):
                run(backend.write_bytes("ro/new/deeper", b"x"))
    finally:
        os.chmod(backend.local_path / "ro", 0o700)
    after = tree_of(backend.local_path)
    assert after == {**before, "ro": ("dir", None, 0o700)}


# ---- exec ---------------------------------------------------------------------------------


def test_exec_runs_in_the_workspace(backend: LocalBackend) -> None:
    run(backend.create_dir_all("sub"))
    result = run(backend.exec("pwd; echo $GREETING; echo err >&2; echo out > made.txt"))
    assert result.exit_code == 0 and not result.timed_out and not result.truncated
    lines = result.stdout.splitlines()
    assert os.path.realpath(lines[0]) == str(backend.local_path)
    assert lines[1] == ""
    assert result.stderr == "err\n"
    assert (backend.local_path / "made.txt").read_text() == "out\n"
    sub = run(backend.exec("pwd; echo $GREETING", cwd="sub", env={"GREETING": "hi"}))
    assert sub.stdout.splitlines() == [str(backend.local_path / "sub"), "hi"]


def test_exec_nonzero_exit_is_a_result(backend: LocalBackend) -> None:
    result = run(backend.exec("echo partial; exit 3"))
    assert result.exit_code == 3 and result.stdout == "partial\n" and not result.timed_out


def test_exec_timeout_kills_the_process_group(backend: LocalBackend) -> None:
    marker = f"marker-{os.getpid()}-{time.monotonic_ns()}"
    result = run(backend.exec(f"(sleep 30; echo {marker}) & echo started; sleep 30", timeout=0.5))
    assert result.timed_out
    assert result.exit_code == -9
    assert result.stdout == "started\n"
    # The background subshell was in the same process group, so it is gone too.
    assert (
        marker not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    )


def test_exec_output_is_capped(tmp_path: Path) -> None:
    provider = LocalProvider(
        tmp_path / "ws", BlobStore(tmp_path / "b", durable=False), output_limit=1000
    )
    backend = run(provider.create("rt"))
    result = run(backend.exec("head -c 200000 /dev/zero | tr '\\0' a; echo tail >&2"))
    assert result.exit_code == 0
    assert result.truncated
    assert result.stdout == "a" * 1000
    assert result.stderr == "tail\n"
    small = run(backend.exec("echo small"))
    assert not small.truncated


def test_exec_bad_arguments(backend: LocalBackend) -> None:
    for timeout in (0, -1.0):
        with pytest.raises(InvalidRequest, match="timeout"):
            run(backend.exec("true", timeout=timeout))
    with pytest.raises(InvalidRequest, match="env"):
        run(backend.exec("true", env={"": "x"}))
    with pytest.raises(InvalidRequest, match="cwd"):
        run(backend.exec("true", cwd="missing"))
    with pytest.raises(InvalidRequest):
        run(backend.exec("   "))


# ---- search and export --------------------------------------------------------------------


def test_search(backend: LocalBackend) -> None:
    run(backend.write_bytes("src/a.py", b"import os\nx = 1\n# TODO: fix\n"))
    run(backend.write_bytes("src/b.py", b"y = 2\n# todo lower\n# TODO again\n"))
    run(backend.write_bytes("blob.bin", b"\x00\x01TODO binary"))
    matches = run(backend.search(r"TODO"))
    assert [(m.path, m.line_number, m.line) for m in matches] == [
        ("src/a.py", 3, "# TODO: fix"),
        ("src/b.py", 3, "# TODO again"),
    ]
    assert len(run(backend.search(r"(?i)todo", "src"))) == 3
    assert len(run(backend.search(r"(?i)todo", "src", max_results=2))) == 2
    assert [m.line for m in run(backend.search(r"^\w = \d$", "src/b.py"))] == ["y = 2"]
    with pytest.raises(InvalidRequest, match="not a valid regex"):
        run(backend.search("(unclosed"))
    with pytest.raises(BackendError, match="does not exist"):
        run(backend.search("x", "nowhere"))


def test_export_is_a_tar_archive(backend: LocalBackend) -> None:
    run(backend.write_bytes("pkg/data.bin", bytes(range(256)) * 10))
    run(backend.write_bytes("pkg/readme.txt", b"hi"))
    run(backend.create_dir_all("pkg/empty"))
    os.symlink("readme.txt", backend.local_path / "pkg" / "link")
    with tarfile.open(fileobj=io.BytesIO(run(backend.export("pkg")))) as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert set(members) == {"pkg", "pkg/data.bin", "pkg/readme.txt", "pkg/empty", "pkg/link"}
        data = archive.extractfile("pkg/data.bin")
        assert data is not None and data.read() == bytes(range(256)) * 10
        assert members["pkg/link"].issym() and members["pkg/link"].linkname == "readme.txt"
    with tarfile.open(fileobj=io.BytesIO(run(backend.export()))) as whole:
        assert "./pkg/readme.txt" in whole.getnames()


# ---- snapshots and checkout ---------------------------------------------------------------


def populate(backend: LocalBackend) -> None:
    ws = backend.local_path
    run(backend.write_bytes("bin/all-bytes", bytes(range(256)) * 4))
    run(backend.write_bytes("big/three-chunks", os.urandom(2 * (1 << 20) + 5)))
    run(backend.write_bytes("empty-file", b""))
    run(backend.write_bytes("text/notes.md", b"# notes\n" * 100))
    run(backend.create_dir_all("empty/nested/dir"))
    os.chmod(ws / "bin" / "all-bytes", 0o755)
    os.chmod(ws / "empty" / "nested", 0o750)
    os.symlink("../text/notes.md", ws / "bin" / "notes-link")
    os.symlink("empty/nested", ws / "nested-link")


def test_snapshot_and_checkout_round_trip(provider: LocalProvider, backend: LocalBackend) -> None:
    populate(backend)
    original = tree_of(backend.local_path)
    ref = run(backend.checkpoint())
    assert ref.backend_kind == "local" and ref.backend_id == backend.backend_id
    assert ref.provider_snapshot_id is not None
    body = provider.blobs.get_manifest(ref.provider_snapshot_id)
    assert body["kind"] == snapshots.MANIFEST_KIND
    assert {f["path"] for f in body["files"]} == {
        "bin/all-bytes",
        "big/three-chunks",
        "empty-file",
        "text/notes.md",
    }
    big = next(f for f in body["files"] if f["path"] == "big/three-chunks")
    assert len(big["chunks"]) == 3
    assert {"empty/nested/dir", "empty", "bin"} <= {d["path"] for d in body["dirs"]}
    assert set(body["chunks"]) == {c for f in body["files"] for c in f["chunks"]}
    child = run(provider.checkout(ref, "rt-2"))
    assert child.backend_id != backend.backend_id
    assert tree_of(child.local_path) == original
    mtimes = {
        p.relative_to(backend.local_path): p.stat().st_mtime_ns
        for p in backend.local_path.rglob("*")
        if p.is_file() and not p.is_symlink()
    }
    for rel, mtime in mtimes.items():
        assert (child.local_path / rel).stat().st_mtime_ns == mtime
    # Real copies, no hard links.
    for path in child.local_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert os.lstat(path).st_nlink == 1
            assert (
                os.lstat(path).st_ino
                != os.lstat(backend.local_path / path.relative_to(child.local_path)).st_ino
            )


def test_checkout_is_independent(provider: LocalProvider, backend: LocalBackend) -> None:
    populate(backend)
    original = tree_of(backend.local_path)
    ref = run(backend.checkpoint())
    child = run(provider.checkout(ref, "rt-2"))
    with open(child.local_path / "text" / "notes.md", "r+b") as handle:  # in-place edit
        handle.write(b"CHANGED")
    run(child.write_bytes("bin/all-bytes", b"replaced"))
    run(child.write_bytes("new-in-child", b"new"))
    run(child.exec("rm -r empty"))
    assert tree_of(backend.local_path) == original
    again = run(provider.checkout(ref, "rt-3"))
    assert tree_of(again.local_path) == original
    # and the other way round: changing the parent leaves the child alone
    child_tree = tree_of(child.local_path)
    run(backend.write_bytes("big/three-chunks", b"parent changed"))
    assert tree_of(child.local_path) == child_tree


def test_snapshot_skips_escaping_symlinks_and_special_files(
    provider: LocalProvider, backend: LocalBackend, tmp_path: Path
) -> None:
    os.symlink(tmp_path, backend.local_path / "escape")
    os.symlink("/etc/passwd", backend.local_path / "escape-abs")
    os.mkfifo(backend.local_path / "pipe")
    run(backend.write_bytes("kept", b"k"))
    ref = run(backend.checkpoint())
    assert ref.provider_snapshot_id is not None
    body = provider.blobs.get_manifest(ref.provider_snapshot_id)
    assert body["symlinks"] == []
    assert {s["path"]: s["reason"] for s in body["skipped"]} == {
        "escape": "symlink points outside",
        "escape-abs": "symlink points outside",
        "pipe": "not a regular file",
    }
    child = run(provider.checkout(ref, "rt-2"))
    assert sorted(p.name for p in child.local_path.iterdir()) == ["kept"]


def test_absolute_symlink_inside_becomes_relative(
    provider: LocalProvider, backend: LocalBackend
) -> None:
    run(backend.write_bytes("target.txt", b"t"))
    os.symlink(backend.local_path / "target.txt", backend.local_path / "abs-link")
    ref = run(backend.checkpoint())
    child = run(provider.checkout(ref, "rt-2"))
    assert os.readlink(child.local_path / "abs-link") == "target.txt"
    assert (child.local_path / "abs-link").read_bytes() == b"t"


class CountingReads:
    """Wraps `snapshots.store_file` and records which files a snapshot really read."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        real = snapshots.store_file

        def counting(blobs: BlobStore, fd: int) -> tuple[list[str], int, int]:
            result = real(blobs, fd)
            self.sizes.append(result[1])
            return result

        monkeypatch.setattr(snapshots, "store_file", counting)

    def take(self) -> list[int]:
        taken, self.sizes = self.sizes, []
        return taken


def test_unchanged_files_are_not_re_read(
    provider: LocalProvider, backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = CountingReads(monkeypatch)
    for i in range(20):
        run(backend.write_bytes(f"f{i:02}.txt", f"file {i}\n".encode() * 50))
    let_fs_clock_pass(backend.local_path)
    first = run(backend.checkpoint())
    assert len(reads.take()) == 20
    assert first.details["files_read"] == 20
    second = run(backend.checkpoint())
    assert reads.take() == []
    # the same tree: the same snapshot and ref (not a manifest new by its clock)
    assert second == first
    run(backend.write_bytes("f07.txt", b"changed, other size"))
    run(backend.write_bytes("new.txt", b"new"))
    let_fs_clock_pass(backend.local_path)
    third = run(backend.checkpoint())
    assert sorted(reads.take()) == [3, len(b"changed, other size")]
    assert third.details["files_reused"] == 19
    # The reused entries really describe the current content.
    child = run(provider.checkout(third, "rt-2"))
    assert tree_of(child.local_path) == tree_of(backend.local_path)


def test_racy_files_are_read_again(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose ctime is not older than the snapshot's clock is not trusted next time.

    The filesystem clock is pinned to the file's own ctime, as on a coarse-grained
    filesystem where the write and the snapshot fall in the same timestamp tick.
    """
    reads = CountingReads(monkeypatch)
    run(backend.write_bytes("a.txt", b"a"))
    ctime = os.stat(backend.local_path / "a.txt").st_ctime_ns
    real_clock = snapshots._touch_clock
    monkeypatch.setattr(snapshots, "_touch_clock", lambda marker: ctime)
    run(backend.checkpoint())
    assert reads.take() == [1]
    run(backend.checkpoint())  # same fingerprint, but racy: read again
    assert reads.take() == [1]
    monkeypatch.setattr(snapshots, "_touch_clock", real_clock)
    let_fs_clock_pass(backend.local_path)
    run(backend.checkpoint())  # still racy from the previous snapshot's pinned clock
    assert reads.take() == [1]
    run(backend.checkpoint())  # now older than the snapshot's clock: trusted
    assert reads.take() == []


def test_in_place_change_with_same_size_is_seen(
    backend: LocalBackend, provider: LocalProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(backend.write_bytes("same-size.txt", b"aaaa"))
    let_fs_clock_pass(backend.local_path)
    run(backend.checkpoint())
    path = backend.local_path / "same-size.txt"
    before = os.stat(path)
    with open(path, "r+b") as handle:
        handle.write(b"bbbb")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # even with mtime put back
    ref = run(backend.checkpoint())
    child = run(provider.checkout(ref, "rt-2"))
    assert (child.local_path / "same-size.txt").read_bytes() == b"bbbb"


def test_snapshot_after_restart_reuses_unchanged_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = BlobStore(tmp_path / "blobs", durable=False)
    first_provider = LocalProvider(tmp_path / "ws", blobs)
    backend = run(first_provider.create("rt"))
    for i in range(10):
        run(backend.write_bytes(f"d/{i}.bin", os.urandom(5000)))
    let_fs_clock_pass(backend.local_path)
    ref = run(backend.checkpoint())
    locator = backend.locator()
    assert locator.details["last_manifest_id"] == ref.provider_snapshot_id
    run(backend.write_bytes("d/3.bin", b"changed"))
    let_fs_clock_pass(backend.local_path)

    reads = CountingReads(monkeypatch)
    restarted = LocalProvider(tmp_path / "ws", BlobStore(tmp_path / "blobs", durable=False))
    reopened = run(restarted.attach(locator))
    assert reopened.local_path == backend.local_path
    again = run(reopened.checkpoint())
    assert reads.take() == [len(b"changed")]
    assert again.details["files_reused"] == 9

    # The state file beside the workspaces wins over a stale locator.
    third = LocalProvider(tmp_path / "ws", BlobStore(tmp_path / "blobs", durable=False))
    stale = run(third.attach(locator))
    assert stale.last_manifest_id == again.provider_snapshot_id
    run(stale.checkpoint())
    assert reads.take() == []


def test_restart_with_deleted_previous_snapshot_reads_everything(
    provider: LocalProvider, backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(backend.write_bytes("x", b"x" * 100))
    let_fs_clock_pass(backend.local_path)
    ref = run(backend.checkpoint())
    assert run(provider.delete_snapshot(ref))
    provider.blobs.gc(lambda ids: set(), grace_seconds=0)
    reads = CountingReads(monkeypatch)
    again = run(backend.checkpoint())  # the in-memory index names freed chunks
    assert reads.take() == [100]
    child = run(provider.checkout(again, "rt-2"))
    assert (child.local_path / "x").read_bytes() == b"x" * 100
    reopened = run(LocalProvider(tmp_path / "workspaces", provider.blobs).attach(backend.locator()))
    assert reopened.last_manifest_id == again.provider_snapshot_id


def test_checkout_of_a_restarted_snapshot(tmp_path: Path) -> None:
    blobs_dir = tmp_path / "blobs"
    p1 = LocalProvider(tmp_path / "ws", BlobStore(blobs_dir))
    backend = run(p1.create("rt"))
    populate(backend)
    ref = run(backend.checkpoint())
    p2 = LocalProvider(tmp_path / "ws", BlobStore(blobs_dir))
    child = run(p2.checkout(ref, "rt-2"))
    assert tree_of(child.local_path) == tree_of(backend.local_path)


def test_checkout_child_reuses_its_materialised_files(
    provider: LocalProvider, backend: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checked-out workspace's first snapshot does not re-read the files it was given."""
    for i in range(5):
        run(backend.write_bytes(f"{i}.txt", str(i).encode() * 100))
    ref = run(backend.checkpoint())
    real_clock = snapshots._touch_clock

    def clock_after_materialising(marker: Path) -> int:
        for child_dir in provider.root.glob("local-*"):
            let_fs_clock_pass(child_dir)
        return real_clock(marker)

    monkeypatch.setattr(snapshots, "_touch_clock", clock_after_materialising)
    child = run(provider.checkout(ref, "rt-2"))
    monkeypatch.setattr(snapshots, "_touch_clock", real_clock)
    reads = CountingReads(monkeypatch)
    child_ref = run(child.checkpoint())
    assert reads.take() == []
    assert child_ref.details["files_reused"] == 5
    run(child.write_bytes("3.txt", b"child edit"))
    let_fs_clock_pass(child.local_path)
    edited = run(child.checkpoint())
    assert reads.take() == [len(b"child edit")]
    grandchild = run(provider.checkout(edited, "rt-3"))
    assert tree_of(grandchild.local_path) == tree_of(child.local_path)


def test_concurrent_snapshots_of_several_workspaces(provider: LocalProvider) -> None:
    async def scenario() -> list[tuple[LocalBackend, BackendCheckpointRef]]:
        backends = [await provider.create(f"rt-{i}") for i in range(4)]
        for i, backend in enumerate(backends):
            for j in range(20):
                await backend.write_bytes(f"d{j % 3}/f{j}", os.urandom(3000) + bytes([i]) * 500)
        # Meanwhile the event-loop thread writes through the shared store too.
        refs = await asyncio.gather(
            *(b.checkpoint() for b in backends),
            asyncio.to_thread(provider.blobs.put_bytes, b"text " * 100_000),
        )
        return [(b, r) for b, r in zip(backends, refs[:4], strict=True)]  # type: ignore[misc]

    for backend, ref in run(scenario()):
        child = run(provider.checkout(ref, "child"))
        assert tree_of(child.local_path) == tree_of(backend.local_path)


def test_delete_snapshot_is_idempotent(provider: LocalProvider, backend: LocalBackend) -> None:
    run(backend.write_bytes("a", b"a"))
    ref = run(backend.checkpoint())
    assert provider.referenced_manifests(ref) == [ref.provider_snapshot_id]
    assert run(provider.delete_snapshot(ref)) is True
    assert run(provider.delete_snapshot(ref)) is False
    cleared = ref.model_copy(update={"provider_snapshot_id": None})
    assert run(provider.delete_snapshot(cleared)) is False
    assert provider.referenced_manifests(cleared) == []
    with pytest.raises(BackendError, match="missing"):
        run(provider.checkout(ref, "rt-2"))
    with pytest.raises(UnsupportedBackend):
        run(provider.checkout(cleared, "rt-2"))
    other = BackendCheckpointRef(backend_kind="e2b", backend_id="sb", provider_snapshot_id="s")
    with pytest.raises(UnsupportedBackend):
        run(provider.checkout(other, "rt-2"))
    # A failed checkout leaves no half workspace behind.
    assert sorted(p.name for p in provider.root.iterdir() if p.name.startswith("local-")) == [
        backend.backend_id
    ]


def test_tampered_snapshot_is_refused(provider: LocalProvider, backend: LocalBackend) -> None:
    run(backend.write_bytes("a", b"a"))
    ref = run(backend.checkpoint())
    assert ref.provider_snapshot_id is not None

    def add_escaping_symlink(stored: bytes) -> bytes:
        document = orjson.loads(stored)
        document["body"]["symlinks"] = [{"path": "evil", "target": "/etc/passwd"}]
        return orjson.dumps(document)

    tamper_manifest(provider.blobs.root, ref.provider_snapshot_id, add_escaping_symlink)
    with pytest.raises(BackendError, match="signature"):
        run(provider.checkout(ref, "rt-2"))
    assert [p.name for p in provider.root.iterdir() if p.name.startswith("local-")] == [
        backend.backend_id
    ]


def test_release_and_attach(provider: LocalProvider, backend: LocalBackend) -> None:
    run(backend.write_bytes("a", b"a"))
    locator = backend.locator()
    same = run(provider.attach(locator))
    assert run(same.read_bytes("a")) == b"a"
    assert run(backend.release()) is True
    assert not backend.local_path.exists()
    assert run(backend.release()) is False
    with pytest.raises(BackendError, match="released"):
        run(backend.read_bytes("a"))
    with pytest.raises(BackendError, match="gone"):
        run(provider.attach(locator))
    with pytest.raises(InvalidRequest):
        run(provider.attach(type(locator)(kind="local", backend_id="../../etc")))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.dictionaries(
        st.lists(st.sampled_from(["a", "b", "c", "d.txt", "e.bin"]), min_size=1, max_size=3).map(
            "/".join
        ),
        st.binary(max_size=3000),
        max_size=8,
    )
)
def test_round_trip_of_random_trees(
    tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes]
) -> None:
    root = tmp_path_factory.mktemp("prop")
    provider = LocalProvider(root / "ws", BlobStore(root / "blobs", durable=False))
    backend = run(provider.create("rt"))
    for path, data in files.items():
        try:
            run(backend.write_bytes(path, data))
        except BackendError:
            continue  # a prefix of this path is already a file (or the reverse)
    expected = tree_of(backend.local_path)
    ref = run(backend.checkpoint())
    child = run(provider.checkout(ref, "rt-2"))
    assert tree_of(child.local_path) == expected
    second = run(child.checkpoint())
    grandchild = run(provider.checkout(second, "rt-3"))
    assert tree_of(grandchild.local_path) == expected

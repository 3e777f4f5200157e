"""The spec of a backend (`ditto_jupyter.backends.base`): a `BackendProvider` and the
backends it makes, as the control plane uses them.

What every backend does, whatever its substrate: files written read back, with their kind
and size; a path outside the backend is refused (InvalidRequest) before anything is done;
a missing file is a BackendError; a command's non-zero exit is a result, not an error, in
the folder and with the variables it was given, and one past its timeout is stopped and
says so; search and export see the files; a snapshot is checked out into a new, independent
backend holding exactly its files; a snapshot deleted once is gone (the second delete says
so); a backend found again by its locator holds its files; a released backend refuses
every call, and a second release frees nothing.

A subclass provides a `provider` fixture: a fresh provider whose backends the test creates,
checks out and releases. The capabilities only some backends have (reading a snapshot's
files, reading the live files, restoring a snapshot in place) have specs of their own in
`backend_capabilities`.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from ditto_jupyter.backends.base import Backend, BackendLocator, BackendProvider
from ditto_jupyter.core.errors import BackendError, InvalidRequest, UnsupportedBackend
from ditto_jupyter.core.models import BackendCheckpointRef

T = TypeVar("T")

#: What a provider may raise for a locator of another kind: it is not its to attach.
NOT_MINE = (UnsupportedBackend, InvalidRequest, BackendError)
#: Paths that leave a backend's root: refused by every file operation.
BAD_PATHS = ("/etc/passwd", "../outside", "a/../../b", "bad\x00name", "")


def run(work: Coroutine[Any, Any, T]) -> T:
    """Run one scenario on a fresh event loop (a provider must not depend on one loop)."""
    return asyncio.run(work)


def tar_files(archive: bytes) -> dict[str, bytes]:
    """The regular files of a tar archive by path (without a leading `./`), and their bytes."""
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None:
                files[member.name.removeprefix("./")] = extracted.read()
    return files


async def filled(provider: BackendProvider, runtime_id: str) -> Backend:
    """A new backend holding a small tree: two folders, three files, one empty."""
    backend = await provider.create(runtime_id)
    await backend.write_bytes("notes/a.txt", b"alpha\nbeta\n")
    await backend.create_dir_all("data/deep")
    await backend.write_bytes("data/deep/b.bin", bytes(range(256)))
    await backend.write_bytes("empty.txt", b"")
    return backend


class BackendContract:
    """A `BackendProvider` and its backends; a subclass provides a `provider` fixture."""

    def test_implements_the_protocols(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            assert isinstance(provider, BackendProvider)
            assert isinstance(provider.kind, str) and provider.kind
            backend = await provider.create("rt-proto")
            try:
                assert isinstance(backend, Backend)
                assert backend.kind == provider.kind
                assert isinstance(backend.backend_id, str) and backend.backend_id
                locator = backend.locator()
                assert (locator.kind, locator.backend_id) == (backend.kind, backend.backend_id)
            finally:
                await backend.release()

        run(scenario())

    def test_files_written_read_back_with_their_kind_and_size(
        self, provider: BackendProvider
    ) -> None:
        async def scenario() -> None:
            backend = await filled(provider, "rt-files")
            try:
                assert await backend.read_bytes("notes/a.txt") == b"alpha\nbeta\n"
                assert await backend.read_bytes("data/deep/b.bin") == bytes(range(256))
                assert await backend.read_bytes("empty.txt") == b""
                info = await backend.stat("notes/a.txt")
                assert (info.path, info.kind, info.size) == ("notes/a.txt", "file", 11)
                assert info.mtime_ns > 0
                assert (await backend.stat("data/deep")).kind == "dir"
                await backend.create_dir_all("data/deep")  # again: nothing to do
                await backend.write_bytes("notes/a.txt", b"replaced")
                assert await backend.read_bytes("notes/a.txt") == b"replaced"
            finally:
                await backend.release()

        run(scenario())

    def test_a_missing_file_is_a_backend_error(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            backend = await provider.create("rt-missing")
            try:
                with pytest.raises(BackendError):
                    await backend.read_bytes("missing.txt")
                with pytest.raises(BackendError):
                    await backend.stat("missing.txt")
                with pytest.raises(BackendError):
                    await backend.export("missing")
            finally:
                await backend.release()

        run(scenario())

    @pytest.mark.parametrize("bad", BAD_PATHS)
    def test_a_path_outside_the_backend_is_refused(
        self, provider: BackendProvider, bad: str
    ) -> None:
        async def scenario() -> None:
            backend = await provider.create("rt-bad")
            try:
                for call in (
                    backend.read_bytes(bad),
                    backend.write_bytes(bad, b"x"),
                    backend.exec("true", cwd=bad),
                ):
                    with pytest.raises(InvalidRequest):
                        await call
                assert tar_files(await backend.export()) == {}
            finally:
                await backend.release()

        run(scenario())

    def test_a_command_runs_in_the_backend_and_its_exit_is_a_result(
        self, provider: BackendProvider
    ) -> None:
        async def scenario() -> None:
            backend = await filled(provider, "rt-exec")
            try:
                result = await backend.exec("cat a.txt; echo oops >&2; exit 3", cwd="notes")
                assert (result.exit_code, result.stdout, result.stderr) == (
                    3,
                    "alpha\nbeta\n",
                    "oops\n",
                )
                assert not result.timed_out and not result.truncated
                made = await backend.exec(
                    'printf %s "$GREETING" > greet.txt', env={"GREETING": "hi"}
                )
                assert made.exit_code == 0
                assert await backend.read_bytes("greet.txt") == b"hi"
            finally:
                await backend.release()

        run(scenario())

    def test_a_command_past_its_timeout_is_stopped_and_says_so(
        self, provider: BackendProvider
    ) -> None:
        async def scenario() -> None:
            backend = await provider.create("rt-timeout")
            try:
                result = await backend.exec("echo started; sleep 30; echo never", timeout=0.5)
                assert result.timed_out
                assert result.exit_code != 0
                assert result.stdout == "started\n"
                assert (await backend.exec("echo after")).stdout == "after\n"
            finally:
                await backend.release()

        run(scenario())

    def test_search_and_export_see_the_files(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            backend = await filled(provider, "rt-search")
            try:
                matches = await backend.search(r"^b\w+")
                assert [(m.path, m.line_number, m.line) for m in matches] == [
                    ("notes/a.txt", 2, "beta")
                ]
                assert await backend.search("nothing matches this") == []
                with pytest.raises(InvalidRequest):
                    await backend.search("(unclosed")
                assert tar_files(await backend.export("notes")) == {"notes/a.txt": b"alpha\nbeta\n"}
                whole = tar_files(await backend.export())
                assert whole["data/deep/b.bin"] == bytes(range(256))
            finally:
                await backend.release()

        run(scenario())

    def test_a_temp_path_is_a_new_file_inside_the_backend(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            backend = await provider.create("rt-temp")
            try:
                first, second = await backend.temp_path(".json"), await backend.temp_path(".json")
                assert first != second
                for path in (first, second):
                    assert path.endswith(".json") and not path.startswith("/")
                    assert (await backend.stat(path)).kind == "file"
            finally:
                await backend.release()

        run(scenario())

    def test_a_snapshot_checks_out_into_a_new_backend_with_its_files(
        self, provider: BackendProvider
    ) -> None:
        async def scenario() -> None:
            parent = await filled(provider, "rt-parent")
            child: Backend | None = None
            try:
                ref = await parent.checkpoint()
                assert ref.backend_kind == provider.kind
                assert ref.backend_id == parent.backend_id
                assert ref.provider_snapshot_id
                assert all(isinstance(m, str) for m in provider.referenced_manifests(ref))
                child = await provider.checkout(ref, "rt-child")
                assert child.backend_id != parent.backend_id
                for path in ("notes/a.txt", "data/deep/b.bin", "empty.txt"):
                    assert await child.read_bytes(path) == await parent.read_bytes(path)
            finally:
                for backend in (parent, child):
                    if backend is not None:
                        await backend.release()

        run(scenario())

    def test_a_checkout_is_independent_of_its_source_and_its_snapshot(
        self, provider: BackendProvider
    ) -> None:
        async def scenario() -> None:
            parent = await filled(provider, "rt-parent")
            made: list[Backend] = [parent]
            try:
                ref = await parent.checkpoint()
                child = await provider.checkout(ref, "rt-child")
                made.append(child)
                await child.write_bytes("notes/a.txt", b"child\n")
                await parent.write_bytes("parent-only.txt", b"p")
                assert await parent.read_bytes("notes/a.txt") == b"alpha\nbeta\n"
                with pytest.raises(BackendError):
                    await child.read_bytes("parent-only.txt")
                again = await provider.checkout(ref, "rt-child-2")
                made.append(again)
                assert await again.read_bytes("notes/a.txt") == b"alpha\nbeta\n"
                with pytest.raises(BackendError):
                    await again.read_bytes("parent-only.txt")
            finally:
                for backend in made:
                    await backend.release()

        run(scenario())

    def test_a_deleted_snapshot_is_gone_once(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            parent = await filled(provider, "rt-parent")
            made: list[Backend] = [parent]
            try:
                ref = await parent.checkpoint()
                child = await provider.checkout(ref, "rt-child")
                made.append(child)
                assert await provider.delete_snapshot(ref) is True
                assert await provider.delete_snapshot(ref) is False
                # what was checked out from it lives on
                assert await child.read_bytes("notes/a.txt") == b"alpha\nbeta\n"
                with pytest.raises(BackendError):
                    made.append(await provider.checkout(ref, "rt-late"))
                cleared = ref.model_copy(update={"provider_snapshot_id": None})
                assert await provider.delete_snapshot(cleared) is False
                assert provider.referenced_manifests(cleared) == []
                with pytest.raises(UnsupportedBackend):
                    made.append(await provider.checkout(cleared, "rt-none"))
            finally:
                for backend in made:
                    await backend.release()

        run(scenario())

    def test_a_snapshot_of_another_kind_is_unsupported(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            kind = f"not-{provider.kind}"
            foreign = BackendCheckpointRef(
                backend_kind=kind, backend_id="b", provider_snapshot_id="s"
            )
            with pytest.raises(UnsupportedBackend):
                await provider.checkout(foreign, "rt-foreign")

        run(scenario())

    def test_a_backend_is_found_again_by_its_locator(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            backend = await filled(provider, "rt-attach")
            try:
                found = await provider.attach(backend.locator())
                assert found.backend_id == backend.backend_id
                assert await found.read_bytes("notes/a.txt") == b"alpha\nbeta\n"
                foreign = BackendLocator(kind=f"not-{provider.kind}", backend_id="x")
                with pytest.raises(NOT_MINE):
                    await provider.attach(foreign)
            finally:
                await backend.release()

        run(scenario())

    def test_a_released_backend_refuses_every_call(self, provider: BackendProvider) -> None:
        async def scenario() -> None:
            backend = await filled(provider, "rt-release")
            locator = backend.locator()
            assert await backend.release() is True
            assert await backend.release() is False  # nothing more to free
            with pytest.raises(BackendError):
                await backend.read_bytes("notes/a.txt")
            with pytest.raises(BackendError):
                await provider.attach(locator)

        run(scenario())

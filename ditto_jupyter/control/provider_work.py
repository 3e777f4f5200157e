"""Do the provider work, then commit the store writes, or undo the provider work.

Every operation that changes a runtime follows one discipline: provider work first (a
backend created or checked out, a kernel started, a snapshot taken), each step registering
how to undo it; then the store writes, in one transaction (`commit`). When anything fails
before the commit has returned, the steps done so far are undone, newest first, and the
store is as it was. An undo step that fails is logged and what it left behind recorded
(`leftovers`). After the commit nothing is undone: the store names the work now.

    async with provider_work(store, leftovers, runtime_id) as work:
        backend = await backends.create(runtime_id, kind)
        work.undo_with("release the new backend", lambda: backends.release(runtime_id),
                       backend_resource(runtime_id, kind, backend.backend_id))
        ...
        with work.commit():
            store.insert_session(session)

`record` is `commit` run off the event loop (`off_loop`): what the operations use.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TypeVar

from ditto_jupyter.control.leftovers import LeftoverLog, Resource
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.store import CheckpointStore

_T = TypeVar("_T")


class ProviderWork:
    """The provider work of one operation so far, and how to undo each step of it."""

    def __init__(self, store: CheckpointStore, leftovers: LeftoverLog) -> None:
        self._store = store
        self._leftovers = leftovers
        self._undo: list[tuple[str, Callable[[], Awaitable[object]], Resource | None]] = []
        self.committed = False

    def undo_with(
        self, what: str, step: Callable[[], Awaitable[object]], left: Resource | None = None
    ) -> None:
        """Register how to undo the step just done (`left`: what stays if the undo fails)."""
        if self.committed:
            raise RuntimeError(f"cannot undo {what!r} after the store writes were committed")
        self._undo.append((what, step, left))

    @contextlib.contextmanager
    def commit(self) -> Iterator[None]:
        """The store writes, in one transaction; once it commits, nothing is undone."""
        with self._store.transaction():
            yield
        self.committed = True

    async def record(self, writes: Callable[[], _T]) -> _T:
        """`writes()` inside `commit`, on a store thread: the loop goes on while the store
        waits for its write lock (bounded; then StoreError, and the work is undone)."""

        def committed() -> _T:
            with self.commit():
                return writes()

        return await off_loop(committed)

    async def undo(self) -> None:
        """Undo every registered step, newest first (failures logged and recorded)."""
        while self._undo:
            what, step, left = self._undo.pop()
            await self._leftovers.attempt(what, step, left)


@contextlib.asynccontextmanager
async def provider_work(
    store: CheckpointStore, leftovers: LeftoverLog, runtime_id: str | None
) -> AsyncIterator[ProviderWork]:
    """A block of provider work then store writes: undone when it fails before committing.

    The error that failed the block is raised again, after the undo. A provider error that
    says what it left behind (`ResourceLeftBehind`) is recorded first.
    """
    work = ProviderWork(store, leftovers)
    try:
        yield work
    except BaseException as error:
        leftovers.note_left_behind(error, runtime_id)
        if not work.committed:
            await work.undo()
        raise

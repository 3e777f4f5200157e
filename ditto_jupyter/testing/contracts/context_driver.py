"""The spec of a context driver (`ditto_jupyter.control.context_driver.ContextDriver`): what
runs a runtime's live state (for a notebook, its kernel), as the control plane uses it.

What every driver does: a started context is idle and its handle is JSON; a capture is one
signed manifest in the blob store, the same one again while nothing changed, and a cell in
between moves its run mark (the execution count, or the process); a capture restores in
place (the values as they were, the ones made since gone), into another started context,
and `None` empties a context; a context running a cell is busy; after `fence`, `seal` seals
it when no cell ran since (it then refuses every cell until `unseal`), and does nothing when
one did; `settle` returns once what the context records itself is recorded, and changes
nothing; a stopped context cannot be captured, and stopping it again is fine.

The protocol can start, capture and restore a context but has no way to run a cell in one
or to read what it holds: a `ContextHarness` does that, as a user would. A subclass
provides a `context` fixture: a harness over a fresh driver.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pytest

from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import DittoError
from ditto_jupyter.core.models import SessionRecord

T = TypeVar("T")

#: How long the spec waits for a context to say it is busy, or idle again.
SETTLE_S = 60.0


class ContextHarness(Protocol):
    """A driver under test, and what the spec needs beside it."""

    @property
    def driver(self) -> ContextDriver:
        """The driver under test."""
        ...

    @property
    def blobs(self) -> BlobStore:
        """The blob store its captures go to."""
        ...

    @property
    def workspace(self) -> Path:
        """A folder to give `start` as a runtime's workspace."""
        ...

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of the driver to its end (on the loop the driver lives on)."""
        ...

    def run_cell(self, session: SessionRecord, values: Mapping[str, Any]) -> bool:
        """Run a cell in the context that assigns these JSON values to these names, as a
        user would; False when the context refused it (sealed), True when it ran."""
        ...

    def read(self, session: SessionRecord) -> dict[str, Any]:
        """The context's variables that hold JSON values, by name (a kernel: the user's
        namespace without IPython's own names)."""
        ...

    def running_cell(self, session: SessionRecord) -> AbstractContextManager[None]:
        """A cell runs in the context from the start of the block to its end."""
        ...


@contextmanager
def live(context: ContextHarness, name: str) -> Iterator[SessionRecord]:
    """A runtime whose context is started for the block, and stopped after it."""
    session = SessionRecord(
        session_id=f"{name}-{uuid.uuid4().hex[:8]}", conversation_id="spec.ipynb", sender_id="spec"
    )
    handle = context.run(context.driver.start(session, context.workspace))
    started = session.model_copy(update={"handle_state": handle})
    try:
        yield started
    finally:
        context.run(context.driver.stop(started))


def busy_within(context: ContextHarness, session: SessionRecord, busy: bool) -> bool:
    """Whether the context says it is `busy` (or idle) within `SETTLE_S`."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        if context.run(context.driver.is_busy(session)) is busy:
            return True
        time.sleep(0.01)
    return False


class ContextDriverContract:
    """A `ContextDriver`; a subclass provides a `context` fixture (a `ContextHarness`)."""

    def test_implements_the_protocol(self, context: ContextHarness) -> None:
        assert isinstance(context.driver, ContextDriver)

    def test_a_started_context_is_idle_and_a_stopped_one_is_gone(
        self, context: ContextHarness
    ) -> None:
        with live(context, "life") as session:
            assert json.loads(json.dumps(session.handle_state)) == session.handle_state
            assert context.run(context.driver.is_busy(session)) is False
            assert context.run_cell(session, {"x": 1})
            assert context.read(session) == {"x": 1}
        with pytest.raises(DittoError):
            context.run(context.driver.capture(session))
        context.run(context.driver.stop(session))  # stopped twice: nothing to do

    def test_settle_returns_and_changes_nothing(self, context: ContextHarness) -> None:
        with live(context, "settle") as session:
            context.run_cell(session, {"x": 1})
            first = context.run(context.driver.capture(session))
            context.run(context.driver.settle(session))  # nothing written behind: returns
            assert context.run(context.driver.capture(session)).manifest_id == first.manifest_id
            assert context.read(session) == {"x": 1}

    def test_a_capture_is_a_signed_manifest_the_same_while_nothing_changed(
        self, context: ContextHarness
    ) -> None:
        with live(context, "capture") as session:
            context.run_cell(session, {"x": 1, "d": {"a": [1, 2], "b": None}})
            first = context.run(context.driver.capture(session))
            assert context.blobs.get_manifest(first.manifest_id)  # stored, its signature good
            assert first.bytes_written >= 0
            again = context.run(context.driver.capture(session))
            assert again.manifest_id == first.manifest_id
            context.run_cell(session, {"x": 2})
            changed = context.run(context.driver.capture(session))
            assert changed.manifest_id != first.manifest_id
            mark = (first.execution_count, first.kernel_process)
            assert (changed.execution_count, changed.kernel_process) != mark

    def test_a_capture_restores_in_place_and_into_another_context(
        self, context: ContextHarness
    ) -> None:
        values = {"x": 1, "d": {"a": [1, 2], "b": None}, "s": "text"}
        with live(context, "source") as session:
            context.run_cell(session, values)
            captured = context.run(context.driver.capture(session))
            context.run_cell(session, {"x": 2, "later": True})
            lost = context.run(context.driver.restore(session, captured.manifest_id))
            assert lost == []
            assert context.read(session) == values
            with live(context, "target") as other:
                context.run(context.driver.restore(other, captured.manifest_id))
                assert context.read(other) == values
            context.run(context.driver.restore(session, None))
            assert context.read(session) == {}

    def test_a_context_running_a_cell_is_busy(self, context: ContextHarness) -> None:
        with live(context, "busy") as session:
            with context.running_cell(session):
                assert busy_within(context, session, True)
            assert busy_within(context, session, False)

    def test_a_sealed_context_refuses_cells_until_unsealed(self, context: ContextHarness) -> None:
        with live(context, "sealed") as session:
            context.run(context.driver.fence(session))
            assert context.run(context.driver.seal(session)) is True
            assert context.run_cell(session, {"refused": 1}) is False
            context.run(context.driver.unseal(session))
            assert context.run_cell(session, {"ran": 1}) is True
            assert context.read(session) == {"ran": 1}

    def test_a_cell_after_the_fence_keeps_the_context_unsealed(
        self, context: ContextHarness
    ) -> None:
        with live(context, "fenced") as session:
            context.run(context.driver.fence(session))
            assert context.run_cell(session, {"arrived": 1}) is True
            assert context.run(context.driver.seal(session)) is False
            assert context.run_cell(session, {"still": 1}) is True
            assert context.read(session) == {"arrived": 1, "still": 1}

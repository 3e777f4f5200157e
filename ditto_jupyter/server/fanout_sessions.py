"""The Jupyter side of a checkout of N children at once (`count`, issue 44).

The fan-out itself is RuntimeService's (`control.fanout`); this adds what a single
checkout adds around it, for each child: a notebook copy beside the original (from the
checkpoint's document, `documents`), and a Jupyter session for the child's kernel, so it
opens like any other. A child that failed leaves no notebook copy behind. A fan-out (2 or
more) emits one checkout event per child, each naming the child's fan-out.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from jupyter_server.utils import ensure_async

from ditto_jupyter.control.fanout import ChildOutcome, fan_out_answer
from ditto_jupyter.core.models import FanOutMember, RuntimeCheckoutResult
from ditto_jupyter.server.documents import NotebookSource, sibling_notebook_path
from ditto_jupyter.server.events import OperationEvent

if TYPE_CHECKING:
    from ditto_jupyter.server.sessions import RuntimeSessions


class SessionFanOut:
    """Checkouts of N children for the REST routes, keeping Jupyter sessions in step."""

    def __init__(self, sessions: RuntimeSessions) -> None:
        self.sessions = sessions

    async def checkout(
        self,
        checkpoint_id: str,
        count: int,
        sender_id: str | None,
        metadata: dict[str, Any] | None,
        user: str,
        *,
        caller_runtime_id: str | None = None,
    ) -> RuntimeCheckoutResult:
        """`count` children of the user's checkpoint, each with its notebook copy and its
        Jupyter session; the answer lists every child with its own outcome."""
        sessions = self.sessions
        service = sessions.service
        checkpoint = sessions.scope.checkpoint(checkpoint_id, user)
        started = time.perf_counter()
        with sessions.events.operation("checkout", checkpoint.runtime_id) as event:
            event.checkpoint_id = checkpoint_id
            event.source_runtime_id = checkpoint.runtime_id
            source_path = checkpoint.session.conversation_id
            await service.make_local(checkpoint)  # its document may be in the bucket only
            targets = [
                sibling_notebook_path(source_path, uuid.uuid4().hex[:8]) for _ in range(count)
            ]
            written: list[tuple[bool, NotebookSource | None, str | None]] = []
            try:
                for target in targets:
                    written.append(
                        await sessions.documents.write_child_notebook(checkpoint, target)
                    )
                outcomes = await service.checkout_many(
                    checkpoint_id,
                    count,
                    conversation_ids=targets,
                    sender_id=sender_id,
                    metadata=metadata,
                    caller_runtime_id=caller_runtime_id,
                )
            except BaseException:
                await self._delete_copies(targets, written, range(len(written)))
                raise
            finally:
                sessions._refill_pool()
            failed = [o.index for o in outcomes if o.result is None]
            await self._delete_copies(targets, written, failed)
            finished = [await self._finish(o, targets, written) for o in outcomes]
            if count >= 2:  # one event per child, each naming its fan-out
                event.replaced = True
                duration_ms = (time.perf_counter() - started) * 1000.0
                group = next((o.result.runtime.fanout for o in finished if o.result), None)
                for outcome in finished:
                    child = self._child_event(event, outcome, group)
                    sessions.events.emit(child, duration_ms)
            answer = fan_out_answer(finished)
            event.runtime_id = answer.runtime.runtime_id
            event.status = answer.runtime.status.value
            event.unrestorable = answer.unrestorable
            return answer

    @staticmethod
    def _child_event(
        event: OperationEvent, outcome: ChildOutcome, group: FanOutMember | None
    ) -> OperationEvent:
        """The checkout event of one child of a fan-out: its runtime, or its error (with
        its place in the fan-out `group` a sibling made, when one was made)."""
        child = OperationEvent(
            action="checkout",
            runtime_id=event.runtime_id,
            checkpoint_id=event.checkpoint_id,
            source_runtime_id=event.source_runtime_id,
        )
        if outcome.result is None:
            assert outcome.error is not None
            child.error = outcome.error.code
            if group is not None:
                child.fanout = group.model_copy(update={"index": outcome.index})
            return child
        runtime = outcome.result.runtime
        child.runtime_id = runtime.runtime_id
        child.status = runtime.status.value
        child.unrestorable = outcome.result.unrestorable
        child.fanout = runtime.fanout
        child.ok = True
        return child

    async def _finish(
        self,
        outcome: ChildOutcome,
        targets: list[str],
        written: list[tuple[bool, NotebookSource | None, str | None]],
    ) -> ChildOutcome:
        """A child that succeeded gets its Jupyter session and its notebook in the answer."""
        result = outcome.result
        if result is None:
            return outcome
        target = targets[outcome.index]
        if result.kernel_id is not None:
            await self.sessions._save_jupyter_session(
                result.runtime.runtime_id, target, result.kernel_id
            )
        _, written_from, note = written[outcome.index]
        notebook = target if await self.sessions._is_file(target) else None
        update = {"notebook_path": notebook, "notebook_source": written_from, "notebook_note": note}
        return ChildOutcome(outcome.index, result.model_copy(update=update), None)

    async def _delete_copies(
        self,
        targets: list[str],
        written: list[tuple[bool, NotebookSource | None, str | None]],
        indexes: Any,
    ) -> None:
        """Delete the notebook copies of these children (they failed, or all did)."""
        for index in indexes:
            if index < len(written) and written[index][0]:
                await ensure_async(self.sessions.contents_manager.delete(targets[index]))

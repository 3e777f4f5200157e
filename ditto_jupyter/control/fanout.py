"""Checkout of N children from one checkpoint at once (issue 44): a fan-out.

The source's slot is held once for the whole fan-out (its checkpoint is only read), its
idle check made once, and the checkpoint's blobs fetched once; then the children are
checked out side by side, each with its own id, backend, context and store records
(`Lifecycle.checkout_child`). Each child succeeds or fails on its own: a child that fails
undoes its own work only, and the answer lists every child with its outcome. A local
runtime's children each take a kernel (the server's warm pool hands them out) and a
workspace checked out from the deduplicated snapshot; an E2B runtime's children are
sandboxes created side by side from the one provider snapshot.

At most `MAX_CHECKOUT_COUNT` (20) children at once, as E2B's fork makes at most 20.
Each child of a checkout of 2 or more records its fan-out (`FanOutMember`: an id new to this
call, its index, the count), so the children are seen, compared and kept as one group.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ditto_jupyter.control.autocheckpoint_pruning import refuse_pruned
from ditto_jupyter.control.lifecycle import Lifecycle
from ditto_jupyter.control.runtime_parts import RuntimeParts
from ditto_jupyter.core.errors import BackendError, DittoError, InvalidRequest
from ditto_jupyter.core.limits import MAX_CHECKOUT_COUNT
from ditto_jupyter.core.models import CheckoutChild, FanOutMember, RuntimeCheckoutResult
from ditto_jupyter.core.models.fields import checkout_count_problem

_log = logging.getLogger(__name__)

#: Children started at once: more would only queue on the kernel starts.
PARALLEL_CHILDREN = 8


def check_count(count: object) -> int:
    """`count` as a number of children, or InvalidRequest saying the cap."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise InvalidRequest(f"count must be a whole number 1 to {MAX_CHECKOUT_COUNT}")
    problem = checkout_count_problem(count)
    if problem is not None:
        raise InvalidRequest(problem)
    return count


@dataclass(frozen=True)
class ChildOutcome:
    """One child of a fan-out: its checkout, or the error that failed it."""

    index: int
    result: RuntimeCheckoutResult | None
    error: DittoError | None

    def answer(self) -> CheckoutChild:
        """The child as the answer lists it."""
        if self.result is not None:
            return CheckoutChild(index=self.index, checkout=self.result.one())
        assert self.error is not None
        return CheckoutChild(index=self.index, error=self.error.code, message=str(self.error))


def fan_out_answer(outcomes: Sequence[ChildOutcome]) -> RuntimeCheckoutResult:
    """The answer of a checkout: the first child that succeeded, with every child listed.

    When no child succeeded, the first child's error is raised (nothing was made), its
    message saying how many failed.
    """
    children = [outcome.answer() for outcome in outcomes]
    for outcome in outcomes:
        if outcome.result is not None:
            return outcome.result.model_copy(update={"children": children})
    first = outcomes[0].error
    assert first is not None
    if len(outcomes) == 1:
        raise first
    raise _with_message(first, f"all {len(outcomes)} children failed; the first: {first}")


def _with_message(error: DittoError, message: str) -> DittoError:
    try:
        return type(error)(message)
    except TypeError:  # an error type that needs more than a message
        return BackendError(message)


def new_fanout_id() -> str:
    """The id of a new fan-out, one per checkout call of 2 or more."""
    return "fo-" + secrets.token_hex(8)


class FanOut:
    """Check out N children of one checkpoint at once, each on its own."""

    def __init__(self, parts: RuntimeParts, lifecycle: Lifecycle) -> None:
        self.parts = parts
        self.lifecycle = lifecycle

    async def checkout(
        self,
        checkpoint_id: str,
        count: int,
        *,
        conversation_ids: Sequence[str | None] | None = None,
        sender_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        caller_runtime_id: str | None = None,
    ) -> list[ChildOutcome]:
        """`count` children of the checkpoint, each its outcome, in order.

        `conversation_ids` gives each child its notebook (None: the checkpoint's). The
        checks that concern them all (the count, the checkpoint, an idle source) refuse the
        whole fan-out before any child is made.
        """
        count = check_count(count)
        names = list(conversation_ids) if conversation_ids is not None else [None] * count
        if len(names) != count:
            raise InvalidRequest(f"{len(names)} notebooks given for {count} children")
        parts = self.parts
        checkpoint = parts.checkpoint(checkpoint_id)
        refuse_pruned(checkpoint)
        source = parts.guard.session(checkpoint.runtime_id)
        gate = asyncio.Semaphore(PARALLEL_CHILDREN)
        fanout_id = new_fanout_id() if count >= 2 else None

        async def one(index: int) -> ChildOutcome:
            async with gate:
                member = None
                if fanout_id is not None:
                    member = FanOutMember(id=fanout_id, index=index, size=count)
                try:
                    result = await self.lifecycle.checkout_child(
                        checkpoint, source, names[index], sender_id, metadata, None, member
                    )
                except DittoError as error:
                    _log.warning(
                        "ditto: child %d of %d of checkpoint %s failed: %s",
                        index,
                        count,
                        checkpoint_id,
                        error,
                    )
                    return ChildOutcome(index, None, error)
                except Exception as error:  # its own work is undone; the others go on
                    _log.exception("ditto: child %d of checkpoint %s failed", index, checkpoint_id)
                    return ChildOutcome(index, None, BackendError(f"checkout failed: {error}"))
                return ChildOutcome(index, result, None)

        # The source is only read (its checkpoint): it may be live on another server.
        async with parts.guard.operation(source.session_id, claim=False):
            await self.lifecycle.require_source_idle(source, caller_runtime_id)
            await parts.make_local(checkpoint)  # fetched once, for every child
            return list(await asyncio.gather(*(one(index) for index in range(count))))

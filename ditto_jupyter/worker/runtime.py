"""`Runtime`: the entry point that runs graphs (`run`) and explicit-state loops (`loop`)."""

from __future__ import annotations

from typing import Any

from ditto_jupyter.worker.graph import (
    Graph,
    GraphCheckpointOptions,
    GraphResult,
    ReplayRecorder,
    run_graph,
)
from ditto_jupyter.worker.loop import LoopCheckpointOptions, LoopPlan, run_loop


class Runtime:
    """Runs graphs and loops. Holds no state between runs; `max_concurrency` is a default."""

    def __init__(self, *, max_concurrency: int | None = None) -> None:
        if max_concurrency is not None and (
            isinstance(max_concurrency, bool)
            or not isinstance(max_concurrency, int)
            or max_concurrency < 1
        ):
            raise ValueError(
                f"max_concurrency must be a positive int or None, got {max_concurrency!r}"
            )
        self.max_concurrency = max_concurrency

    async def run(
        self,
        graph: Graph,
        input: Any = None,
        *,
        checkpoint: GraphCheckpointOptions | None = None,
        max_concurrency: int | None = None,
        budget: ReplayRecorder | None = None,
        run_id: str | None = None,
    ) -> GraphResult:
        """Run every node of `graph` once and return their outputs by name.

        Without `checkpoint`, a node starts as soon as its deps finish (at most
        `max_concurrency` at once). With it, nodes run in waves and `checkpoint.save` gets a
        JSON checkpoint before each wave and at the end; `checkpoint.resume` restores the
        completed outputs of an earlier run instead of running those nodes again. `budget`
        (a TokenBudget) records the token cost that restored nodes had recorded with
        `ctx.record_tokens` as replayed, not charged.
        """
        return await run_graph(
            graph,
            input,
            checkpoint=checkpoint,
            max_concurrency=max_concurrency
            if max_concurrency is not None
            else self.max_concurrency,
            budget=budget,
            run_id=run_id,
        )

    async def loop(
        self,
        step: LoopPlan,
        initial_state: Any,
        *,
        max_iterations: int,
        state_checkpoint: LoopCheckpointOptions | None = None,
    ) -> Any:
        """Run `step(state, ctx)` up to `max_iterations` times and return the final state.

        With `state_checkpoint`, the state after each iteration and the next index are saved;
        `state_checkpoint.resume` continues from there. Generator plans are refused then.
        """
        return await run_loop(
            step, initial_state, max_iterations=max_iterations, state_checkpoint=state_checkpoint
        )

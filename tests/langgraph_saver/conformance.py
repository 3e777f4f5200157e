"""Running LangGraph's conformance suite (`langgraph-checkpoint-conformance`) on a saver,
as its README says: every base capability (put, put_writes, get_tuple, list,
delete_thread) and every extended one (copy_thread, prune, delete_for_runs), each suite on
a fresh saver the factory makes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate

#: Every capability the suite knows: the five base ones and the three extended ones.
EVERY_CAPABILITY = frozenset(
    {
        "put",
        "put_writes",
        "get_tuple",
        "list",
        "delete_thread",
        "copy_thread",
        "prune",
        "delete_for_runs",
    }
)


def conformance(name: str, make: Callable[[], BaseCheckpointSaver[Any]]) -> dict[str, Any]:
    """Run the whole suite on savers `make` returns; per capability, whether it was
    detected, passed, and what failed."""

    @checkpointer_test(name=name)
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        yield make()

    report = asyncio.run(validate(factory))
    return {
        capability: {
            "detected": result.detected,
            "passed": result.passed,
            "tests": result.tests_passed,
            "failures": result.failures,
        }
        for capability, result in report.results.items()
    }


def failures_of(results: dict[str, Any]) -> dict[str, Any]:
    """What did not pass: capabilities not detected, or with a failing test."""
    return {
        capability: result
        for capability, result in results.items()
        if not (result["detected"] and result["passed"] and result["tests"] > 0)
    }

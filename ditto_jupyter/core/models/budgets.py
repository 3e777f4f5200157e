"""The answer about a runtime's token budget."""

from __future__ import annotations

from pydantic import Field

from ditto_jupyter.core.models.fields import StrictModel


class BudgetFigures(StrictModel):
    """A token budget's figures: the same numbers `%budget` and its view show."""

    owner_runtime_id: str = Field(
        description="The runtime whose budget this is: the runtime itself, or the runtime "
        "it was checked out from when it has none of its own."
    )
    inherited: bool
    limit: int
    reserved: int
    charged: int
    remaining: int
    replayed: int
    closed: bool
    closed_reason: str | None
    records: int
    by_status: dict[str, int]


class RuntimeBudgetResult(StrictModel):
    """GET /api/v1/runtimes/{runtime_id}/budget: the budget the runtime counts against."""

    runtime_id: str
    budget: BudgetFigures | None = Field(
        description="None when the runtime has no budget (set one with `%budget LIMIT`)."
    )

"""The answer about a runtime's token budget."""

from __future__ import annotations

from pydantic import Field

from ditto_jupyter.core.models.fields import StrictModel


class BranchBudgetFigures(StrictModel):
    """One branch's part of a shared budget: the runtime whose kernels reserved, what it
    holds reserved and has charged, and how many of its reservations were refused."""

    branch: str | None = Field(
        description="The runtime the reservations were made for (None: made before branches "
        "were recorded)."
    )
    reserved: int
    charged: int
    refused: int


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
    each: int | None = Field(
        default=None,
        description="The cap of each branch inside the limit (`--each N`), read at every "
        "reservation; None: none.",
    )
    refusals: int = Field(default=0, description="Reservations the budget refused, in all.")
    branches: list[BranchBudgetFigures] = Field(
        default_factory=list,
        description="Each branch (runtime) drawing on the budget, beside the total above.",
    )


class RuntimeBudgetResult(StrictModel):
    """GET /api/v1/runtimes/{runtime_id}/budget: the budget the runtime counts against."""

    runtime_id: str
    budget: BudgetFigures | None = Field(
        description="None when the runtime has no budget (set one with `%budget LIMIT`)."
    )

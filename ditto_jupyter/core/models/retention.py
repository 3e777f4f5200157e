"""Retention: its settings, and what a thinning of automatic checkpoints did.

`RetentionTiers` is the server's `retention_tiers` setting (`control.retention_policy`
says what it keeps). `RetentionReport` is one thinning (a retention round, or a
`%autocheckpoint --keep N` prune): how many checkpoints, of which runtimes and cells, and
the bytes the data directory took before and after; `RetentionStatus` is what
`GET /api/v1/retention` answers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ditto_jupyter.core.models.fields import StrictModel

HOUR = 3600
DAY = 24 * HOUR


class RetentionTier(StrictModel):
    """One automatic checkpoint per `every_seconds` is kept while younger than
    `until_seconds`."""

    every_seconds: int = Field(gt=0)
    until_seconds: int = Field(gt=0)


def default_tiers() -> list[RetentionTier]:
    """One an hour for a day, then one a day for 30 days."""
    return [
        RetentionTier(every_seconds=HOUR, until_seconds=DAY),
        RetentionTier(every_seconds=DAY, until_seconds=30 * DAY),
    ]


class RetentionTiers(StrictModel):
    """Every automatic checkpoint of the last `keep_all_seconds`, then the tiers in turn;
    beyond the last one, none (checkpoints taken on request are never thinned)."""

    keep_all_seconds: int = Field(default=HOUR, ge=0)
    tiers: list[RetentionTier] = Field(default_factory=default_tiers)

    @model_validator(mode="after")
    def _ordered(self) -> RetentionTiers:
        reach = self.keep_all_seconds
        for tier in self.tiers:
            if tier.until_seconds <= reach:
                raise ValueError(
                    f"each tier must reach further than the one before it: until_seconds "
                    f"{tier.until_seconds} is not beyond {reach}"
                )
            reach = tier.until_seconds
        return self


class CellSpan(StrictModel):
    """A run of cells (execution counts, both ends included) whose checkpoints were thinned."""

    first: int
    last: int


class ThinnedRuntime(StrictModel):
    """What a thinning took from one runtime: its checkpoints' variables and files."""

    runtime_id: str
    conversation_id: str | None = None
    checkpoints: int
    cells: list[CellSpan]
    checkpoint_ids: list[str]


RetentionRule = Literal["tiers", "budget", "keep"]


class RetentionReport(StrictModel):
    """One thinning: the rules that chose, what went, and the data directory's bytes.

    `bytes_before` / `bytes_after` are what the data directory took on disk (blocks, the
    databases and their logs included) before and after, once garbage collection freed
    what the thinned checkpoints alone held (None for a `keep` prune, which measures
    nothing). `busy`: runtimes left for the next round (an operation was in flight, or
    another server runs them). `error`: why the thinning failed (the store is as it was
    for the runtime it failed on)."""

    rules: list[RetentionRule]
    started_at_ms: int
    finished_at_ms: int
    thinned: int
    runtimes: list[ThinnedRuntime]
    bytes_before: int | None = None
    bytes_after: int | None = None
    bytes_freed: int | None = None
    budget_bytes: int | None = None
    over_budget: bool = False
    busy: list[str] = Field(default_factory=list)
    error: str | None = None


class RetentionStatus(StrictModel):
    """GET /api/v1/retention: the settings, and the last thinning of this server."""

    tiers: RetentionTiers
    budget_bytes: int | None
    interval_seconds: float
    last_round_at_ms: int | None
    last: RetentionReport | None

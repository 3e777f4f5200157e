"""The server's retention settings: which automatic checkpoints stay whole, and the budget.

A mixin of `DittoJupyterApp` (`c.DittoJupyterApp.retention_tiers = ...`). What they mean
is `control.retention` and `control.retention_policy`; docs/configuration.md says it for
users. A value that does not fit (tiers out of order, a negative number) is a setting that
is wrong: ditto is off with one line naming it, as for every setting (`setting_values`).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from traitlets import Float, HasTraits, Integer, List, TraitError, validate

from ditto_jupyter.core.errors import ConfigurationError
from ditto_jupyter.core.models import RetentionTier, RetentionTiers

#: The default byte budget of a data directory: 10 GiB (the default local blob cache too).
DEFAULT_BUDGET_BYTES = 10 * 1024**3


def _tiers(keep_all: int, pairs: list[Any]) -> RetentionTiers:
    """The tiers of these settings; ValueError saying what does not fit."""
    tiers = []
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise ValueError(f"each tier is [every_seconds, until_seconds], not {pair!r}")
        tiers.append(RetentionTier(every_seconds=pair[0], until_seconds=pair[1]))
    return RetentionTiers(keep_all_seconds=keep_all, tiers=tiers)


def _reason(error: Exception) -> str:
    """What does not fit, in one line (a pydantic error's messages, without its links)."""
    if isinstance(error, ValidationError):
        return "; ".join(
            str(found["msg"]).removeprefix("Value error, ") for found in error.errors()
        )
    return str(error)


class RetentionTraits(HasTraits):
    """Retention's tiers, the data directory's byte budget, and how often a round runs."""

    retention_keep_all = Integer(
        3600,
        min=0,
        config=True,
        help="Seconds during which every automatic checkpoint (%autocheckpoint) stays whole; "
        "older ones are thinned to the retention_tiers.",
    )
    retention_tiers = List(
        [[3600, 86400], [86400, 30 * 86400]],
        config=True,
        help="After retention_keep_all, keep one automatic checkpoint per EVERY seconds "
        "while younger than UNTIL seconds, one [EVERY, UNTIL] pair per tier, each reaching "
        "further than the one before (default: one an hour for a day, one a day for 30 "
        "days); older automatic checkpoints are thinned. Named checkpoints, heads, checkout "
        "sources, before-*, lost and idle-pause checkpoints are never thinned.",
    )
    retention_budget_bytes = Integer(
        DEFAULT_BUDGET_BYTES,
        min=0,
        config=True,
        help="Bytes the data directory may take on disk (its databases and their logs, "
        "blobs, workspaces); over it, a retention round thins automatic checkpoints oldest "
        "first until it is under (0: no budget). Default 10 GiB.",
    )
    retention_interval = Float(
        600.0,
        min=0.0,
        config=True,
        help="Seconds between retention rounds (tiers, then the budget), run in the "
        "background off the server's event loop (0: no rounds; %autocheckpoint --keep still "
        "prunes).",
    )

    @validate("retention_tiers")
    def _valid_tiers(self, proposal: dict[str, Any]) -> list[Any]:
        value: list[Any] = proposal["value"]
        try:
            _tiers(0, value)
        except ValueError as error:  # ValidationError is one
            raise TraitError(_reason(error)) from error
        return value

    def retention_settings(self) -> tuple[RetentionTiers, int | None]:
        """The tiers and the budget (None: no budget); ConfigurationError when keep_all and
        the tiers do not fit together (a tier that ends within the time kept whole)."""
        try:
            tiers = _tiers(self.retention_keep_all, list(self.retention_tiers))
        except ValueError as error:
            raise ConfigurationError(
                f"retention_keep_all and retention_tiers do not fit together: {_reason(error)}"
            ) from error
        return tiers, (self.retention_budget_bytes or None)

"""Field types and the strict base every model of the API shares: ids, names, metadata
and shell commands within the limits of `core.limits`, so whatever a request carries
can be stored and read back.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from ditto_jupyter.core.limits import (
    MAX_CHECKOUT_COUNT,
    MAX_ID_LENGTH,
    MAX_METADATA_DEPTH,
    MAX_METADATA_KEYS,
    MAX_NAME_LENGTH,
    metadata_problem,
)


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch, the unit of every `*_at_ms` field."""
    return time.time_ns() // 1_000_000


def _within_metadata_limits(value: dict[str, Any]) -> dict[str, Any]:
    problem = metadata_problem(value)
    if problem is not None:
        raise PydanticCustomError("metadata_limit", "{problem}", {"problem": problem})
    return value


#: A runtime or checkpoint id (or reference) in a request: not empty, at most 4096 characters.
RequestId = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]


#: A conversation (notebook path) or sender in a request: at most 4096 characters.
RequestText = Annotated[str, Field(max_length=MAX_ID_LENGTH)]


#: A checkpoint name in a request: at most 256 characters.
CheckpointName = Annotated[str, Field(max_length=MAX_NAME_LENGTH)]


#: Metadata in a request: JSON within every metadata limit of `core.limits`.
RequestMetadata = Annotated[
    dict[str, Any],
    AfterValidator(_within_metadata_limits),
    Field(
        description=f"At most {MAX_METADATA_KEYS} keys, nested at most {MAX_METADATA_DEPTH} "
        "deep; see Limits.",
        json_schema_extra={"maxProperties": MAX_METADATA_KEYS},
    ),
]


def checkout_count_problem(count: int) -> str | None:
    """Why `count` children cannot be checked out at once, or None when they can."""
    if 1 <= count <= MAX_CHECKOUT_COUNT:
        return None
    return (
        f"count must be 1 to {MAX_CHECKOUT_COUNT}, not {count}: one checkout makes at most "
        f"{MAX_CHECKOUT_COUNT} children (E2B's fork cap); check out more in several calls"
    )


def _checkout_count(count: int) -> int:
    problem = checkout_count_problem(count)
    if problem is not None:
        raise PydanticCustomError("checkout_count", "{problem}", {"problem": problem})
    return count


#: How many children a checkout makes: 1 to 20.
CheckoutCount = Annotated[
    int,
    AfterValidator(_checkout_count),
    Field(
        description=f"How many children to check out at once, 1 to {MAX_CHECKOUT_COUNT} "
        "(each its own runtime, kernel, workspace and notebook copy).",
        json_schema_extra={"minimum": 1, "maximum": MAX_CHECKOUT_COUNT},
    ),
]


def _without_nul(command: str) -> str:
    if "\x00" in command:
        raise PydanticCustomError("nul_byte", "a shell command cannot hold a NUL byte")
    return command


#: A shell command: any text but a NUL byte, which no command line can hold.
ShellCommand = Annotated[
    str, AfterValidator(_without_nul), Field(json_schema_extra={"pattern": "^[^\\u0000]*$"})
]


#: The most characters of a cell's source an automatic checkpoint records.
MAX_CELL_SOURCE_LENGTH = 64 * 1024


#: The largest page GET .../checkpoints answers.
MAX_PAGE = 1000


class StrictModel(BaseModel):
    """Unknown fields refused, no silent type coercion, values immutable once built."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ErrorBody(StrictModel):
    """The body of every error answer."""

    error: str
    message: str

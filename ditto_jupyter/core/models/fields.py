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

"""Stored records as the migration steps read them (frozen: steps 3 and 11 depend on it)."""

from __future__ import annotations

from typing import Any

import orjson

#: Rows a backfilling step reads and writes at a time.
BACKFILL_BATCH = 1000


def json_object(data: str) -> dict[str, Any] | None:
    """A stored record as a dict, or None when it is not a JSON object any more."""
    try:
        record = orjson.loads(data.encode("utf-8", "surrogatepass"))
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None

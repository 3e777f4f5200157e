"""The limits every request is held to, and the check of a metadata object against them.

They are chosen so that whatever a request may carry can be stored and read back: pydantic
reads a stored record's JSON up to about 200 levels deep, and a record nests a request's
metadata at most three levels down (a checkpoint's session's metadata), so metadata may be
32 deep. Metadata and a notebook `document` are the only free-form JSON a request holds
(every other field has a fixed shape); a document is held to the same 32 levels, counted
from the document object (a checkpoint stores it apart, in the blob store). Sizes are UTF-8
bytes of the compact JSON text; lengths are characters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import orjson

#: Bytes of one request body.
MAX_BODY_BYTES = 4 * 1024 * 1024
#: Bytes of a request body that may carry a notebook document (images and all).
MAX_DOCUMENT_BODY_BYTES = 64 * 1024 * 1024
#: Characters of an id in a request: runtime, checkpoint, conversation (a notebook path), sender.
MAX_ID_LENGTH = 4096
#: Characters of a checkpoint name.
MAX_NAME_LENGTH = 256
#: Levels of nesting of a metadata object (`{"a": 1}` is 1 deep, `{"a": {"b": 1}}` is 2).
MAX_METADATA_DEPTH = 32
#: Levels of nesting of a notebook document (`document`: the document object is 1 deep).
MAX_DOCUMENT_DEPTH = MAX_METADATA_DEPTH
#: Keys of a metadata object (its top level).
MAX_METADATA_KEYS = 128
#: Characters of one metadata key.
MAX_METADATA_KEY_LENGTH = 256
#: Bytes of one metadata value, as JSON.
MAX_METADATA_VALUE_BYTES = 16 * 1024
#: Bytes of a whole metadata object, as JSON.
MAX_METADATA_BYTES = 64 * 1024

#: Children of one checkout (`count`): at most 20, as E2B's fork makes at most 20 at once.
MAX_CHECKOUT_COUNT = 20

#: Sides of one comparison (`POST /api/v1/runtimes/compare`): 2 to 8 side by side.
MAX_COMPARE_SIDES = 8

#: Each limit with what it bounds, for the documentation (docs/rest.md).
LIMITS: tuple[tuple[str, int, str], ...] = (
    ("request body", MAX_BODY_BYTES, "bytes"),
    ("request body carrying a notebook document", MAX_DOCUMENT_BODY_BYTES, "bytes"),
    ("an id (runtime, checkpoint, conversation, sender)", MAX_ID_LENGTH, "characters"),
    ("a checkpoint name", MAX_NAME_LENGTH, "characters"),
    ("metadata nesting (every request's JSON nesting)", MAX_METADATA_DEPTH, "levels"),
    ("notebook document nesting (from the document object)", MAX_DOCUMENT_DEPTH, "levels"),
    ("metadata keys", MAX_METADATA_KEYS, "keys"),
    ("one metadata key", MAX_METADATA_KEY_LENGTH, "characters"),
    ("one metadata value, as JSON", MAX_METADATA_VALUE_BYTES, "bytes"),
    ("all metadata, as JSON", MAX_METADATA_BYTES, "bytes"),
    ("children of one checkout (`count`)", MAX_CHECKOUT_COUNT, "runtimes"),
    ("sides of one comparison (`compare`)", MAX_COMPARE_SIDES, "sides"),
)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _json_bytes(value: Any) -> int:
    """Bytes of `value` as compact UTF-8 JSON (UnicodeEncodeError for a lone surrogate,
    TypeError or ValueError for what JSON cannot hold)."""
    try:
        return len(orjson.dumps(value))
    except TypeError:  # an integer beyond 64 bits, or worse: let json say which
        return len(_ENCODER.encode(value).encode("utf-8"))


def _shape(value: Any) -> tuple[int, str | None]:
    """How deep `value` nests (a scalar is 0, `[]` and `{}` are 1), and the first thing in
    it that JSON cannot hold exactly (a non-finite number, a key that is not a string)."""
    deepest = 0
    odd: str | None = None
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, float) and not math.isfinite(item) and odd is None:
            odd = f"the number {item!r}, which JSON cannot hold"
        if isinstance(item, dict):
            if odd is None:
                odd = next(
                    (
                        f"the key {k!r}, which is not a string"
                        for k in item
                        if not isinstance(k, str)
                    ),
                    None,
                )
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        pending.extend((child, depth + 1) for child in children)
    return deepest, odd


def document_problem(document: Mapping[str, Any]) -> str | None:
    """How a notebook document breaks the nesting limit, as one sentence; None when it fits."""
    depth, _ = _shape(dict(document))
    if depth > MAX_DOCUMENT_DEPTH:
        return f"document is nested {depth} deep; the limit is {MAX_DOCUMENT_DEPTH}"
    return None


def metadata_problem(metadata: Mapping[str, Any]) -> str | None:
    """The first limit `metadata` breaks, as one sentence naming it; None when it fits."""
    depth, odd = _shape(dict(metadata))
    if depth > MAX_METADATA_DEPTH:
        return f"metadata is nested {depth} deep; the limit is {MAX_METADATA_DEPTH}"
    if len(metadata) > MAX_METADATA_KEYS:
        return f"metadata has {len(metadata)} keys; the limit is {MAX_METADATA_KEYS}"
    for key in metadata:
        if len(key) > MAX_METADATA_KEY_LENGTH:
            return (
                f"metadata key {key[:40]!r}... is {len(key)} characters long; "
                f"the limit is {MAX_METADATA_KEY_LENGTH}"
            )
    if odd is not None:
        return f"metadata holds {odd}"
    try:
        total = _json_bytes(dict(metadata))
        for key, value in metadata.items() if total > MAX_METADATA_VALUE_BYTES else ():
            size = _json_bytes(value)
            if size > MAX_METADATA_VALUE_BYTES:
                return (
                    f"metadata value {key!r} is {size} bytes as JSON; "
                    f"the limit is {MAX_METADATA_VALUE_BYTES}"
                )
    except UnicodeEncodeError:
        return "metadata holds a string that is not valid Unicode"
    except (TypeError, ValueError) as error:
        return f"metadata is not JSON: {error}"
    if total > MAX_METADATA_BYTES:
        return f"metadata is {total} bytes as JSON; the limit is {MAX_METADATA_BYTES}"
    return None

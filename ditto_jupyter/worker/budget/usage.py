"""Usage normalisation: the tokens a provider's usage report charges, and a plain copy of it.

Reads OpenAI chat, OpenAI Responses and Anthropic usage, from attributes or dict keys.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

from ditto_jupyter.worker.budget.errors import InvalidUsageError, describe_error

UsageSource: TypeAlias = Any  # a provider's usage object or mapping, as it gave it

_CHAT_FIELDS: Final = ("prompt_tokens", "completion_tokens")
_INPUT_OUTPUT_FIELDS: Final = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)


def _field_reader(usage: UsageSource) -> Callable[[str], object]:
    """A reader of `usage[name]` for mappings, `usage.name` for objects (None if absent)."""
    if type(usage) is dict or isinstance(usage, Mapping):
        getter: Callable[[str], object] = usage.get
        return getter
    return lambda name: getattr(usage, name, None)


def _token_field(read: Callable[[str], object], name: str) -> int | None:
    """A counter of the usage as an int, None when absent; InvalidUsageError if malformed."""
    value = read(name)
    if value is None:
        return None
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, bool):
        raise InvalidUsageError(f"usage {name} is a bool, not a token count")
    if isinstance(value, int):
        tokens = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        tokens = int(value)
    else:
        raise InvalidUsageError(f"usage {name}={value!r} is not a whole number of tokens")
    if tokens < 0:
        raise InvalidUsageError(f"usage {name}={tokens} is negative")
    return tokens


def usage_tokens(usage: UsageSource) -> int:
    """Total tokens to charge for a provider's usage, read from attributes or dict keys.

    OpenAI chat: `prompt_tokens + completion_tokens` (cached and reasoning tokens are
    already inside them; `*_tokens_details` are subsets and not added). OpenAI Responses:
    `input_tokens + output_tokens`. Anthropic: uncached `input_tokens` +
    `cache_creation_input_tokens` + `cache_read_input_tokens` + `output_tokens` (None
    cache fields count 0). When `total_tokens` is also given the larger of it and the sum
    is charged, so an inconsistent report never lowers the charge. Raises
    InvalidUsageError naming what is missing or wrong."""
    try:
        return _usage_tokens(usage)
    except InvalidUsageError:
        raise
    except Exception as exc:  # a usage object whose attributes fail to read
        raise InvalidUsageError(f"usage could not be read: {describe_error(exc)}") from exc


def _usage_tokens(usage: UsageSource) -> int:
    if usage is None:
        raise InvalidUsageError("usage is missing")
    if isinstance(usage, (str, bytes, int, float, bool)):
        raise InvalidUsageError(f"usage is a {type(usage).__name__}, not a usage object")
    read = _field_reader(usage)
    total = _token_field(read, "total_tokens")
    chat: int | None = None
    for name in _CHAT_FIELDS:
        value = _token_field(read, name)
        if value is not None:
            chat = (chat or 0) + value
    io: int | None = None
    for name in _INPUT_OUTPUT_FIELDS:  # always validated; counted only without chat fields
        value = _token_field(read, name)
        if value is not None:
            io = (io or 0) + value
    summed = chat if chat is not None else io
    if summed is None and total is None:
        raise InvalidUsageError(
            "usage has no token counts (expected prompt_tokens/completion_tokens, "
            "input_tokens/output_tokens or total_tokens)"
        )
    return max(summed or 0, total or 0)


def response_usage(response: object) -> UsageSource:
    """The usage of a provider response: `response.usage` or `response["usage"]`; None if
    it has none."""
    if type(response) is dict or isinstance(response, Mapping):
        return response.get("usage")
    return getattr(response, "usage", None)


_SCALARS: Final = (str, bool, int, type(None))


def plain_usage(value: object, depth: int = 0) -> Any:
    """A JSON-able plain-data copy of a usage value (mappings, objects, sequences)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict and depth <= 8:
        items: dict[Any, Any] = value  # type: ignore[assignment]
        return {
            str(key): item if type(item) in _SCALARS else plain_usage(item, depth + 1)
            for key, item in items.items()
        }
    if isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > 8:
        return repr(value)
    if isinstance(value, Mapping):
        return {str(key): plain_usage(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_usage(item, depth + 1) for item in value]
    dump = getattr(value, "model_dump", None)  # pydantic models (OpenAI, Anthropic SDKs)
    if callable(dump):
        try:
            dumped = dump()
        except Exception:  # a model_dump that fails is not usage we can copy
            dumped = None
        if isinstance(dumped, Mapping):
            return plain_usage(dumped, depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: plain_usage(getattr(value, field.name), depth + 1)
            for field in dataclasses.fields(value)
        }
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return {
            key: plain_usage(item, depth + 1)
            for key, item in attributes.items()
            if not key.startswith("_")
        }
    return repr(value)


def usage_snapshot(usage: UsageSource) -> dict[str, Any] | None:
    """The supplied usage as a plain dict, every field kept as given; None if no usage.
    A value that is not a mapping or object is kept under the key `value`."""
    if usage is None:
        return None
    try:
        plain = plain_usage(usage)
    except Exception:  # an object that fails to read: keep what it was, not its fields
        return {"value": f"<unreadable {type(usage).__name__}>"}
    if isinstance(plain, dict):
        return plain
    return {"value": plain}

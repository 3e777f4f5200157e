"""JSON state rules and RFC 8785 (JCS) canonical JSON, fast.

`check_json` is the reference validator: a plain walk that names the JSON path of the first
offending value. `encode_json` does the same job at C speed for the common case: orjson
serialises (rejecting unknown types, cycles, deep nesting, big integers and bad strings),
marshal rejects subclasses such as `IntEnum` members that orjson would accept, and comparing
the parsed copy with the input catches tuples, NaN and infinities (which orjson turns into
arrays and `null`). Whenever the fast path refuses a value, the reference walk runs to name
the path, so both always agree.

Canonical bytes come from orjson's sorted output where it is byte-identical to RFC 8785:
strings and integers always are; floats differ only in a few recognisable shapes (`1.0`,
`-0.0`, `1e+16`..`1e+20`, `1e-6`), which are rewritten token by token with `rfc8785`'s own
float formatting; object keys differ only when a key holds a non-BMP character and another
key a character in U+E000..U+FFFF (UTF-16 code units sort surrogates lower), in which case
the whole value goes through `rfc8785.dumps`.
"""

from __future__ import annotations

import functools
import hashlib
import marshal
import math
import re
import types
from typing import NamedTuple, TypeAlias, cast

import orjson
import rfc8785

from ditto_jupyter.worker.errors import StateValidationError

JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"

MAX_INTEGER = 2**53
"""Integers outside +-2**53 are refused: beyond it a JavaScript number cannot hold them."""

MAX_DEPTH = 254
"""Deepest nesting of arrays and objects allowed: orjson's own limit, which the fast path uses."""

_ORJSON_OPTIONS = (
    orjson.OPT_STRICT_INTEGER
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)

# orjson's float text differs from ECMAScript's only in these shapes: a zero fraction
# (`1.0`, `-0.0`; in a container a number is always followed by one of `,]}`), and the
# exponents `e+16`..`e+20` and `e-6`. The regex has a literal prefix, so sre scans fast.
_ZERO_FRACTION = re.compile(rb"\.0[,\]}]")
_NEGATIVE_ZERO = re.compile(rb"-0[,\]}]")
_NEGATIVE_ZERO_FLOAT = re.compile(rb"-0\.0[,\]}]")
_FLOAT_TOKEN = re.compile(rb"-?\d+(?:\.\d+(?:e[-+]?\d+)?|e[-+]?\d+)")
# UTF-8 lead bytes of non-BMP characters, and of U+E000..U+FFFF (searched with memchr).
_ASTRAL_LEADS = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")
_HIGH_BMP_LEADS = (b"\xee", b"\xef")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class EncodedJSON(NamedTuple):
    """A validated value: its JSON bytes (key order kept), a fresh copy, its JCS bytes."""

    data: bytes
    copy: JSONValue
    canonical: bytes


def _refuse(value: object) -> object:
    raise TypeError(type(value).__name__)


def child_path(path: str, key: str | int) -> str:
    """JSON path of an array index or object key below `path` (`$.a[3]`, `$["a b"]`)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENTIFIER.match(key):
        return f"{path}.{key}"
    return f"{path}[{orjson.dumps(key, option=orjson.OPT_NON_STR_KEYS).decode()}]"


def _describe(value: object) -> str:
    """Why a value of an unsupported type is not JSON state, in a few words."""
    import datetime
    import enum

    kind = type(value)
    if isinstance(value, enum.Enum):
        return f"enum member {kind.__name__}.{value.name} is not JSON state (store its value)"
    if kind is tuple:
        return "tuple is not JSON state (use a list)"
    if isinstance(value, (set, frozenset)):
        return f"{kind.__name__} is not JSON state (use a list)"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{kind.__name__} is not JSON state (decode or base64-encode it)"
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta)):
        return f"{kind.__name__} is not JSON state (store an ISO 8601 string)"
    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType)):
        return f"{kind.__name__} is not JSON state"
    if callable(value) and isinstance(
        value,
        (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial),
    ):
        return f"function {getattr(value, '__qualname__', kind.__name__)} is not JSON state"
    if isinstance(value, type):
        return f"class {value.__qualname__} is not JSON state"
    if isinstance(value, (dict, list, str, int, float)):
        base = next(t for t in (dict, list, str, int, float) if isinstance(value, t))
        return f"{kind.__qualname__} (a {base.__name__} subclass) is not JSON state"
    return f"{kind.__qualname__} instance is not JSON state"


def _check_str(text: str, path: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise StateValidationError(
            path, f"{what} contains a lone surrogate (not valid Unicode)"
        ) from None


def check_json(value: object, path: str = "$") -> None:
    """Raise StateValidationError naming the first value below `path` that is not JSON state."""
    _check(value, path, {}, 0)


def _check(value: object, path: str, active: dict[int, str], depth: int) -> None:
    kind = type(value)
    if value is None or kind is bool:
        return
    if kind is str:
        _check_str(value, path, "string")  # type: ignore[arg-type]
        return
    if kind is int:
        if not -MAX_INTEGER <= value <= MAX_INTEGER:  # type: ignore[operator]
            raise StateValidationError(path, f"integer {value} is outside +-2**53")
        return
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise StateValidationError(path, f"{value} is not JSON state (only finite numbers)")
        return
    if kind is dict or kind is list:
        ident = id(value)
        if ident in active:
            raise StateValidationError(
                path, f"cycle: this {kind.__name__} already appears at {active[ident]}"
            )
        if depth >= MAX_DEPTH:
            raise StateValidationError(path, f"nesting is deeper than {MAX_DEPTH} levels")
        active[ident] = path
        if kind is dict:
            for key, item in cast("dict[object, object]", value).items():
                if type(key) is not str:
                    raise StateValidationError(
                        path, f"object key {key!r} is a {type(key).__name__}, not a string"
                    )
                _check_str(key, path, f"object key {key!r}")
                _check(item, child_path(path, key), active, depth + 1)
        else:
            for index, item in enumerate(cast("list[object]", value)):
                _check(item, child_path(path, index), active, depth + 1)
        del active[ident]
        return
    raise StateValidationError(path, _describe(value))


def _plain_copy(value: JSONValue) -> JSONValue:
    """Deep copy of a value already checked by `check_json`."""
    if type(value) is dict:
        return {key: _plain_copy(item) for key, item in value.items()}
    if type(value) is list:
        return [_plain_copy(item) for item in value]
    return value


def _rfc8785(value: JSONValue) -> bytes:
    """`rfc8785.dumps`, which refuses +-2**53 (beyond its +-(2**53 - 1)): those two integers
    are exact doubles and print the same as floats, so they are passed as floats."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError:
        return rfc8785.dumps(_edge_integers_as_floats(value))


def _edge_integers_as_floats(value: JSONValue) -> JSONValue:
    if type(value) is dict:
        return {key: _edge_integers_as_floats(item) for key, item in value.items()}
    if type(value) is list:
        return [_edge_integers_as_floats(item) for item in value]
    if type(value) is int and abs(value) == MAX_INTEGER:
        return float(value)
    return value


def _slow_encode(value: object, path: str, canonical: bool) -> EncodedJSON:
    """Reference path: walk, copy and rfc8785. Raises StateValidationError on bad input."""
    check_json(value, path)
    copy = _plain_copy(value)  # type: ignore[arg-type]
    jcs = _rfc8785(copy) if canonical else b""
    return EncodedJSON(orjson.dumps(copy), copy, jcs)


def encode_json(value: object, path: str = "$", *, canonical: bool = True) -> EncodedJSON:
    """Validate `value` and return its JSON bytes, a fresh deep copy and its JCS bytes.

    Raises StateValidationError naming the offending path. The bytes and the copy keep each
    object's key order. With `canonical=False` the `canonical` field is empty (callers that
    only need the validated copy skip that work).
    """
    try:
        data = orjson.dumps(value, default=_refuse, option=_ORJSON_OPTIONS)
        raw = marshal.dumps(value)  # type: ignore[arg-type]  # exact built-in types only (no IntEnum)
    except (TypeError, ValueError):
        return _slow_encode(value, path, canonical)
    copy = orjson.loads(data)
    if copy != value:  # tuples, NaN and infinities survive orjson but not this comparison
        return _slow_encode(value, path, canonical)
    if not canonical:
        return EncodedJSON(data, copy, b"")
    ordered = orjson.dumps(copy, option=orjson.OPT_SORT_KEYS)
    return EncodedJSON(data, copy, _jcs_from_sorted(ordered, copy, raw))


def _jcs_from_sorted(data: bytes, value: JSONValue, raw: bytes | None = None) -> bytes:
    """RFC 8785 bytes of a valid value, given its orjson bytes with sorted keys.

    `raw` is `marshal.dumps(value)` when the caller has it: every string of the value
    appears in it verbatim, which tells cheaply whether any string holds a float shape.
    """
    kind = type(value)
    if kind is not dict and kind is not list:
        return _rfc8785(value)
    if not data.isascii() and _has_key_order_hazard(data):
        return _rfc8785(value)
    if _may_need_float_rewrite(data):
        return _rewrite_floats(data, value, raw)
    return data


def _may_need_float_rewrite(data: bytes) -> bool:
    """False when no float token of `data` can differ from its ECMAScript form."""
    if _ZERO_FRACTION.search(data) is not None:
        return True
    if b"+" in data and b"e+" in data:  # memchr first: "+" is rare in JSON text
        return True
    return b"e-6" in data


def _split_strings(data: bytes) -> list[bytes]:
    """Split compact JSON at its string quotes: odd items are string bodies (escapes masked)."""
    # orjson escapes every control character, so NUL and SOH never occur in its output and
    # can stand in for the escaped backslash and escaped quote while splitting at quotes.
    if b"\\" in data:
        data = data.replace(b"\\\\", b"\x00").replace(b'\\"', b"\x01")
    return data.split(b'"')


def _join_strings(parts: list[bytes]) -> bytes:
    """Inverse of _split_strings."""
    data = b'"'.join(parts)
    if b"\x00" in data or b"\x01" in data:
        data = data.replace(b"\x01", b'\\"').replace(b"\x00", b"\\\\")
    return data


def _has_key_order_hazard(data: bytes) -> bool:
    """True when code point order and UTF-16 order could differ for some object's keys."""
    if not _contains_any(data, _ASTRAL_LEADS) or not _contains_any(data, _HIGH_BMP_LEADS):
        return False
    parts = _split_strings(data)
    keys = [parts[i] for i in range(1, len(parts) - 1, 2) if parts[i + 1].startswith(b":")]
    astral = any(_contains_any(key, _ASTRAL_LEADS) for key in keys)
    return astral and any(_contains_any(key, _HIGH_BMP_LEADS) for key in keys)


def _contains_any(data: bytes, needles: tuple[bytes, ...]) -> bool:
    return any(needle in data for needle in needles)


@functools.lru_cache(maxsize=4096)
def _ecmascript_float(token: bytes) -> bytes:
    return rfc8785.dumps(float(token))


def _fix_zero_fractions(text: bytes) -> bytes:
    """Drop the ".0" of integral floats and the sign of -0.0, as ECMAScript prints them."""
    # An integral float below 1e16 is the only token orjson ends in ".0", and no integer
    # token is ever "-0", so outside strings these shapes are float tokens only.
    negative_zero = _NEGATIVE_ZERO_FLOAT.search(text) is not None
    for end in (b",", b"]", b"}"):
        text = text.replace(b".0" + end, end)
    if negative_zero:
        for end in (b",", b"]", b"}"):
            text = text.replace(b"-0" + end, b"0" + end)
    return text


def _rewrite_floats(data: bytes, value: JSONValue, raw: bytes | None) -> bytes:
    """Replace each float token outside strings by its ECMAScript form (RFC 8785 3.2.2.3)."""
    if b"e+" not in data and b"e-6" not in data:
        # Only zero fractions to fix. marshal writes every string (and key) of the value
        # verbatim, and the shapes hold no character JSON escapes: if marshal's bytes hold
        # no shape, no string does, and every match in `data` is a float token.
        if raw is None:
            raw = marshal.dumps(value)
        if _ZERO_FRACTION.search(raw) is None and _NEGATIVE_ZERO.search(raw) is None:
            return _fix_zero_fractions(data)
    parts = _split_strings(data)
    outside = b'"'.join(parts[0::2])
    fixed = _fix_zero_fractions(outside) if b".0" in outside else outside
    if b"e+" in outside or b"e-6" in outside:
        fixed = _FLOAT_TOKEN.sub(lambda match: _ecmascript_float(match.group()), fixed)
    if fixed == outside:
        return data
    parts[0::2] = fixed.split(b'"')
    return _join_strings(parts)


def canonical_json(value: object) -> bytes:
    """RFC 8785 canonical JSON bytes of a JSON state value (validated first)."""
    return encode_json(value).canonical


def sha256_digest(value: object) -> str:
    """`"sha256:" + hex` over the RFC 8785 canonical JSON of a JSON state value."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()

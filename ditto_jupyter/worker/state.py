"""Portable state: checkpoint a JSON value with scope, version and digest; restore it checked.

The saved form is a plain JSON-able dict::

    {"format": "ditto.state/v1", "scope": ..., "version": ..., "digest": "sha256:<hex>",
     "state": ...}

where the digest is SHA-256 over the RFC 8785 canonical JSON of
`{"scope": scope, "state": state, "version": version}`. The digest detects accidental
corruption, not malicious modification: authenticate untrusted stored state separately.

JSON state is `None`, `bool`, `int` within +-2**53 (what a JavaScript number holds exactly),
finite `float`, `str`, `list` and `dict` with `str` keys, nested at most 254 levels, without
cycles. Everything else
(tuples, sets, bytes, dates, NaN, functions, class instances, generators, subclasses of the
built-in types such as `IntEnum` members) is refused with a StateValidationError naming the
JSON path of the offending value.

Copies (the saved `state`, restored values, `copy_state`) are fresh containers that keep
each object's key order and each value's Python type (`1.0` stays a float).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping

from ditto_jupyter.worker.canonical import JSONValue, encode_json
from ditto_jupyter.worker.errors import (
    StateDigestError,
    StateError,
    StateScopeError,
    StateValidationError,
    StateVersionError,
)

__all__ = [
    "STATE_FORMAT",
    "JSONValue",
    "StateDigestError",
    "StateError",
    "StateScopeError",
    "StateValidationError",
    "StateVersionError",
    "checkpoint_state",
    "copy_state",
    "restore_state",
    "state_digest",
    "validate_state",
]

STATE_FORMAT = "ditto.state/v1"
"""Format tag of the saved form written by checkpoint_state."""

_SAVED_KEYS = frozenset({"format", "scope", "version", "digest", "state"})
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")


def validate_state(value: object, path: str = "$") -> None:
    """Raise StateValidationError (naming the JSON path) unless `value` is JSON state."""
    encode_json(value, path, canonical=False)


def copy_state(value: JSONValue) -> JSONValue:
    """A validated deep copy of `value` that shares no container with it."""
    return encode_json(value, canonical=False).copy


def _check_label(what: str, label: object, error: type[StateError]) -> str:
    if type(label) is not str or not label:
        raise error(f"{what} must be a non-empty string, got {label!r}")
    return label


def _digest(scope: str, version: str, canonical_state: bytes) -> str:
    """SHA-256 over the JCS bytes of {scope, state, version}, assembled without a copy."""
    # Keys in RFC 8785 order; JCS strings are orjson strings (same escapes), via encode_json.
    sha = hashlib.sha256(b'{"scope":')
    sha.update(encode_json(scope).canonical)
    sha.update(b',"state":')
    sha.update(canonical_state)
    sha.update(b',"version":')
    sha.update(encode_json(version).canonical)
    sha.update(b"}")
    return "sha256:" + sha.hexdigest()


def state_digest(scope: str, version: str, value: object) -> str:
    """The digest checkpoint_state records for `value` under `scope` and `version`."""
    _check_label("scope", scope, StateScopeError)
    _check_label("version", version, StateVersionError)
    return _digest(scope, version, encode_json(value).canonical)


def check_saved_form(
    document: Mapping[str, object], expected_format: str, keys: frozenset[str], what: str
) -> None:
    """Refuse (StateError) a saved form of another format, or with missing or unknown fields."""
    if document.get("format") != expected_format:
        raise StateError(
            f"{what} has format {document.get('format')!r}, expected {expected_format!r}"
        )
    missing = keys - document.keys()
    if missing:
        raise StateError(f"{what} lacks {', '.join(sorted(missing))}")
    unknown = document.keys() - keys
    if unknown:
        raise StateError(f"{what} has unknown fields {sorted(map(repr, unknown))}")


def checkpoint_state(scope: str, version: str, value: object) -> dict[str, object]:
    """Validate `value` and return its saved form (a copy: later changes to `value` don't leak)."""
    _check_label("scope", scope, StateScopeError)
    _check_label("version", version, StateVersionError)
    encoded = encode_json(value)
    return {
        "format": STATE_FORMAT,
        "scope": scope,
        "version": version,
        "digest": _digest(scope, version, encoded.canonical),
        "state": encoded.copy,
    }


def restore_state(saved: object, scope: str, version: str) -> JSONValue:
    """Check the saved form's format, scope, version and digest; return a fresh copy of its state.

    Raises StateError (format), StateScopeError, StateVersionError, StateValidationError or
    StateDigestError, in that order of checking. The result shares nothing with `saved`.
    """
    _check_label("scope", scope, StateScopeError)
    _check_label("version", version, StateVersionError)
    if type(saved) is not dict:
        raise StateError(f"saved state must be a dict from checkpoint_state, got {type(saved)!r}")
    check_saved_form(saved, STATE_FORMAT, _SAVED_KEYS, "saved state")
    if saved["scope"] != scope:
        raise StateScopeError(f"saved state belongs to scope {saved['scope']!r}, not {scope!r}")
    if saved["version"] != version:
        raise StateVersionError(
            f"saved state has version {saved['version']!r}, expected {version!r}"
        )
    digest = saved["digest"]
    if type(digest) is not str or not _DIGEST.match(digest):
        raise StateDigestError(f"saved digest {digest!r} is not 'sha256:' + 64 hex digits")
    encoded = encode_json(saved["state"])
    if not hmac.compare_digest(digest, _digest(scope, version, encoded.canonical)):
        raise StateDigestError("saved state does not match its digest (altered or corrupted)")
    return encoded.copy

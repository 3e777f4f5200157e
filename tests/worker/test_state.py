"""Portable state: checkpoint_state / restore_state, validation and copying rules."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_jupyter.worker.state import (
    STATE_FORMAT,
    StateDigestError,
    StateError,
    StateScopeError,
    StateValidationError,
    StateVersionError,
    checkpoint_state,
    copy_state,
    restore_state,
    validate_state,
)

keys = st.text(
    alphabet=st.sampled_from(["a", "b", "\u00e9", "\uff61", "\U0001f600", '"']), max_size=3
)
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([1.0, -0.0, 1e21, 1e-7, 5e-324, 2.0**53]),
        keys,
    ),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=25,
)


def wire(saved: object) -> Any:
    """What a caller gets back after persisting the saved form as JSON text."""
    return json.loads(json.dumps(saved))


def test_saved_form_is_plain_json_with_a_jcs_digest() -> None:
    saved = checkpoint_state("session-1", "app-config-v1", {"step": 3, "messages": []})
    assert saved == wire(saved)
    assert set(saved) == {"format", "scope", "version", "digest", "state"}
    assert saved["format"] == STATE_FORMAT
    assert saved["scope"] == "session-1"
    assert saved["version"] == "app-config-v1"
    assert saved["state"] == {"step": 3, "messages": []}
    body = {"scope": "session-1", "version": "app-config-v1", "state": saved["state"]}
    assert saved["digest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def test_round_trip_through_json_text() -> None:
    state = {"step": 3, "messages": [{"role": "user", "text": "héllo 😀"}], "w": 1.0, "z": None}
    saved = checkpoint_state("session-1", "v1", state)
    restored = restore_state(wire(saved), "session-1", "v1")
    assert restored == state
    assert list(restored) == list(state)  # key order is kept  # type: ignore[arg-type]
    assert type(restored["w"]) is float  # type: ignore[index]


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_round_trip_property(state: Any) -> None:
    saved = checkpoint_state("scope", "v", state)
    assert (
        saved["digest"]
        == "sha256:"
        + hashlib.sha256(
            rfc8785.dumps({"scope": "scope", "version": "v", "state": state})
        ).hexdigest()
    )
    assert restore_state(wire(saved), "scope", "v") == state
    assert restore_state(saved, "scope", "v") == state


def test_checkpoint_copies_so_later_mutation_does_not_leak() -> None:
    state: dict[str, Any] = {"messages": [{"n": 1}]}
    saved = checkpoint_state("s", "v", state)
    state["messages"][0]["n"] = 2
    state["messages"].append("late")
    assert saved["state"] == {"messages": [{"n": 1}]}
    assert restore_state(saved, "s", "v") == {"messages": [{"n": 1}]}


def test_restored_value_shares_nothing_with_saved() -> None:
    saved = checkpoint_state("s", "v", {"a": {"b": [1, {"c": 2}]}})
    before = copy.deepcopy(saved)
    restored = restore_state(saved, "s", "v")
    restored["a"]["b"][1]["c"] = 99  # type: ignore[index]
    restored["a"]["b"].append(3)  # type: ignore[index]
    assert saved == before
    saved["state"]["a"]["b"][0] = 42  # type: ignore[index]
    assert restored["a"]["b"][0] == 1  # type: ignore[index]


def test_scope_mismatch() -> None:
    saved = checkpoint_state("session-1", "v1", {"x": 1})
    with pytest.raises(StateScopeError, match="session-1"):
        restore_state(saved, "session-2", "v1")


def test_version_mismatch() -> None:
    saved = checkpoint_state("session-1", "v1", {"x": 1})
    with pytest.raises(StateVersionError, match="v1"):
        restore_state(saved, "session-1", "v2")


@pytest.mark.parametrize(
    "tamper",
    [
        lambda saved: saved["state"].__setitem__("x", 2),
        lambda saved: saved["state"].__setitem__("extra", None),
        lambda saved: saved.__setitem__("digest", "sha256:" + "0" * 64),
    ],
)
def test_digest_mismatch(tamper: Any) -> None:
    saved = wire(checkpoint_state("session-1", "v1", {"x": 1}))
    tamper(saved)
    with pytest.raises(StateDigestError):
        restore_state(saved, "session-1", "v1")


@pytest.mark.parametrize("digest", [None, 5, "md5:abc", "sha256:XYZ", "sha256:" + "a" * 63])
def test_malformed_digest(digest: object) -> None:
    saved = wire(checkpoint_state("s", "v", [1]))
    saved["digest"] = digest
    with pytest.raises(StateDigestError, match="sha256"):
        restore_state(saved, "s", "v")


def test_check_order_is_format_scope_version_digest() -> None:
    saved = wire(checkpoint_state("s", "v", [1]))
    saved["digest"] = "sha256:" + "0" * 64
    with pytest.raises(StateVersionError):
        restore_state(saved, "s", "other")
    with pytest.raises(StateScopeError):
        restore_state(saved, "other", "other")
    saved["format"] = "something/v9"
    with pytest.raises(StateError, match="format") as caught:
        restore_state(saved, "other", "other")
    assert type(caught.value) is StateError


@pytest.mark.parametrize(
    ("saved", "message"),
    [
        (None, "must be a dict"),
        ([1], "must be a dict"),
        ({"format": "x"}, "format"),
        ({"format": STATE_FORMAT, "scope": "s"}, "lacks"),
    ],
)
def test_malformed_saved_forms(saved: object, message: str) -> None:
    with pytest.raises(StateError, match=message):
        restore_state(saved, "s", "v")


def test_unknown_fields_are_refused() -> None:
    saved = wire(checkpoint_state("s", "v", [1]))
    saved["note"] = "hi"
    with pytest.raises(StateError, match="unknown fields"):
        restore_state(saved, "s", "v")


def test_restore_validates_the_state_it_returns() -> None:
    saved = checkpoint_state("s", "v", {"items": [1, 2]})
    saved["state"] = {"items": (1, 2)}  # same canonical bytes, but not JSON state
    with pytest.raises(StateValidationError) as caught:
        restore_state(saved, "s", "v")
    assert caught.value.path == "$.items"


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"messages": [0, 1, 2, {"fn": lambda: 1}]}, "$.messages[3].fn"),
        ({"n": float("nan")}, "$.n"),
        ({"n": float("-inf")}, "$.n"),
        ({"big": 2**53 + 1}, "$.big"),
        ({"t": (1,)}, "$.t"),
        ({"s": {1}}, "$.s"),
        ({"b": b"x"}, "$.b"),
        ({3: "x"}, "$"),
    ],
)
def test_checkpoint_rejects_invalid_state_with_its_path(value: object, path: str) -> None:
    with pytest.raises(StateValidationError) as caught:
        checkpoint_state("s", "v", value)
    assert caught.value.path == path


def test_integers_up_to_two_to_the_53_are_state() -> None:
    value = {"max": 2**53, "min": -(2**53), "safe": 2**53 - 1}
    saved = checkpoint_state("s", "v", value)
    restored = restore_state(wire(saved), "s", "v")
    assert restored == value and type(restored["max"]) is int  # type: ignore[index]


def test_none_and_bools_are_state() -> None:
    value = {"none": None, "yes": True, "no": False, "list": [None, True]}
    assert restore_state(checkpoint_state("s", "v", value), "s", "v") == value


def test_a_cycle_is_reported() -> None:
    value: dict[str, Any] = {"a": {}}
    value["a"]["self"] = value
    with pytest.raises(StateValidationError, match="cycle") as caught:
        checkpoint_state("s", "v", value)
    assert caught.value.path == "$.a.self"


@pytest.mark.parametrize("label", ["", None, 3, b"s"])
def test_scope_and_version_must_be_strings(label: object) -> None:
    with pytest.raises(StateScopeError, match="scope"):
        checkpoint_state(label, "v", 1)  # type: ignore[arg-type]
    with pytest.raises(StateVersionError, match="version"):
        checkpoint_state("s", label, 1)  # type: ignore[arg-type]


def test_validate_state_and_copy_state() -> None:
    validate_state({"ok": [1, 2.5, "x"]})
    with pytest.raises(StateValidationError) as caught:
        validate_state({"bad": object()}, path="$.context")
    assert caught.value.path == "$.context.bad"
    original = {"a": [1, {"b": 2}]}
    duplicate = copy_state(original)
    assert duplicate == original
    duplicate["a"][1]["b"] = 3  # type: ignore[index]
    assert original["a"][1] == {"b": 2}  # type: ignore[index]

"""A JSON record kept as a delta against a base gives back the very record: values, their
JSON types and key order; a delta that does not fit its base is refused, never guessed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ditto_jupyter.control.store.record_delta import DeltaError, apply_delta, delta, same_json

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    base=st.dictionaries(st.sampled_from("abcd"), _JSON, min_size=1),
    changes=st.dictionaries(st.sampled_from("abcd"), _JSON),
)
def test_a_delta_applied_gives_back_the_record(
    base: dict[str, Any], changes: dict[str, Any]
) -> None:
    record = {key: changes.get(key, value) for key, value in base.items()}
    found = delta(base, record)
    assert found is not None
    stored = orjson.loads(orjson.dumps(found))  # as the store keeps it
    rebuilt = apply_delta(base, stored)
    assert same_json(rebuilt, record)
    assert orjson.dumps(rebuilt) == orjson.dumps(record)  # key order too


def test_a_run_that_moved_on_is_a_short_delta() -> None:
    session = {
        "session_id": "r" * 32,
        "handle_state": {"kernel_id": "k", "run": {"count": 6, "process": "p"}},
        "updated_at_ms": 1_000,
    }
    later = {**session, "handle_state": {"kernel_id": "k", "run": {"count": 7, "process": "p"}}}
    later["updated_at_ms"] = 2_000
    found = delta({"session": session, "ref": None}, {"session": later, "ref": None})
    assert found == {"session": {"handle_state": {"run": {"count": [7]}}, "updated_at_ms": [2_000]}}
    assert apply_delta({"session": session, "ref": None}, found)["session"] == later


def test_json_types_and_key_order_count() -> None:
    assert delta({"a": 1}, {"a": True}) == {"a": [True]}
    assert delta({"a": 1}, {"a": 1.0}) == {"a": [1.0]}
    assert orjson.dumps(delta({"a": 0.0}, {"a": -0.0})) == b'{"a":[-0.0]}'
    assert delta({"a": {"x": 1, "y": 2}}, {"a": {"y": 2, "x": 1}}) == {"a": [{"y": 2, "x": 1}]}
    assert delta({"a": {"x": 1}}, {"a": {"x": 1, "z": None}}) == {"a": [{"x": 1, "z": None}]}
    assert delta({"a": {"x": 1}}, {"a": {}}) == {"a": [{}]}  # a key gone: replaced whole
    assert delta({"a": 1, "b": 2}, {"b": 2, "a": 1}) is None  # the record itself: no delta
    assert delta({"a": 1}, {"a": 1}) == {}


def test_a_delta_that_does_not_fit_is_refused() -> None:
    base = {"a": {"x": 1}, "b": 2}
    base_before = orjson.dumps(base)
    for changes, message in (
        ([1], "a JSON object, not list"),
        ({"c": [1]}, "'c', which its base does not hold"),
        ({"b": {"x": [1]}}, "'b' is neither"),
        ({"a": 1}, "'a' is neither"),
        ({"a": [1, 2]}, "'a' is neither"),
    ):
        with pytest.raises(DeltaError, match=message):
            apply_delta(base, changes)
    assert orjson.dumps(base) == base_before  # the base is never changed

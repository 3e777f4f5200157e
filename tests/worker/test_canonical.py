"""Canonical JSON: byte equality with `rfc8785.dumps`; the fast validator agrees with the walk."""

from __future__ import annotations

import datetime
import enum
import hashlib
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ditto_jupyter.worker import canonical
from ditto_jupyter.worker.canonical import (
    MAX_DEPTH,
    MAX_INTEGER,
    canonical_json,
    check_json,
    encode_json,
    sha256_digest,
)
from ditto_jupyter.worker.errors import StateValidationError

EDGE_FLOATS = [
    5e-324,
    -5e-324,
    1e21,
    1e-7,
    1e-6,
    1.5e-6,
    1e-5,
    -0.0,
    0.0,
    1.0,
    -1.0,
    2.0**53,
    float(2**53 - 1),
    1e15,
    1e16,
    1.5e16,
    1e20,
    1.2345678901234567e19,
    123456789012345680000.0,
    1e22,
    1.7976931348623157e308,
    2.2250738585072014e-308,
    0.1,
    1 / 3,
    100.0,
]
ODD_CHARS = [
    "a",
    "B",
    "\x00",
    "\x1f",
    "\x7f",
    '"',
    "\\",
    "/",
    "\u2028",
    "\u00e9",
    "\ue000",
    "\uff61",
    "\ufeff",
    "\uffff",
    "\U00010000",
    "\U0001f600",
    "\U0010ffff",
]

RFC8785_MAX = 2**53 - 1  # the rfc8785 package refuses +-2**53, which we accept (tested below)
# Strings that look like the float shapes the fast path rewrites (they must stay as they are).
TRICKY_STRINGS = [".0,", "1.0]", "-0}", "-0,", '":1.0,"', "1e+16", "2e-6,", "\\", '\\"1.0,']
keys = st.one_of(
    st.text(max_size=6),
    st.text(alphabet=st.sampled_from(ODD_CHARS), max_size=4),
    st.sampled_from(TRICKY_STRINGS),
)
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(EDGE_FLOATS),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-RFC8785_MAX, max_value=RFC8785_MAX),
    floats,
    keys,
    st.sampled_from(TRICKY_STRINGS),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
@example({"\U0001f600": 1, "\uff61": 2, "a": [1.0, -0.0, 1e21]})
@example({"k": '":1.0,"\\', "\ue000": {"\U00010000": 1e-6}})
def test_canonical_bytes_equal_rfc8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(floats, min_size=1, max_size=8))
def test_float_arrays_equal_rfc8785(values: list[float]) -> None:
    assert canonical_json(values) == rfc8785.dumps(values)
    assert canonical_json({"x": values[0]}) == rfc8785.dumps({"x": values[0]})


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_every_decimal_exponent_formats_like_ecmascript(sign: float) -> None:
    samples = []
    for exponent in range(-323, 309):
        for mantissa in ("1", "1.5", "9.999999999999999", "4.35", "2"):
            number = sign * float(f"{mantissa}e{exponent}")
            if math.isfinite(number):
                samples.append(number)
    samples += [sign * 2.0**power for power in range(-1074, 1024)]
    assert canonical_json(samples) == rfc8785.dumps(samples)


def test_non_bmp_keys_sort_by_utf16_code_units() -> None:
    value = {"\U0001f600": 1, "\uff61": 2, "z": 3}
    expected = '{"z":3,"\U0001f600":1,"\uff61":2}'.encode()
    assert canonical_json(value) == expected == rfc8785.dumps(value)


def test_strings_that_look_like_floats_are_left_alone() -> None:
    value = {"text": 'a":1.0,"b', "n": 1.0, "esc": '\\"1.0]\\', "list": ["1e+16", 1e16]}
    assert canonical_json(value) == rfc8785.dumps(value)
    assert b'"a\\":1.0,\\"b"' in canonical_json(value)


@pytest.mark.parametrize(
    "value",
    [
        {"s": "-0,", "x": -0.0},
        {"s": "x.0]", "x": [2.0]},
        {"-0}": [1.0, -0.0], "k.0,": 3.0},
        ["a\\", 1.0, 'q"\\-0,', -0.0],
    ],
)
def test_float_shapes_inside_strings_survive_the_rewrite(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_common_documents_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(value: object) -> bytes:
        raise AssertionError("rfc8785.dumps used for a document the fast path handles")

    value = {"scores": [1.0, 0.5, -0.0, 1e16], "emoji": "\U0001f600\ufe0f", "n": [1, 2]}
    expected = rfc8785.dumps(value)
    canonical._ecmascript_float.cache_clear()
    original = canonical.rfc8785.dumps
    monkeypatch.setattr(canonical.rfc8785, "dumps", refuse)
    with pytest.raises(AssertionError):
        canonical_json(1.5)  # a bare scalar goes to rfc8785 (cheap), proving the patch bites
    monkeypatch.setattr(canonical, "_ecmascript_float", lambda token: original(float(token)))
    assert canonical_json(value) == expected


def test_sha256_digest_is_over_canonical_bytes() -> None:
    value = {"b": 1.0, "a": [None, True, "x"]}
    assert sha256_digest(value) == "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


class Colour(enum.IntEnum):
    RED = 1


class Name(str, enum.Enum):
    ADA = "ada"


class Text(str):
    pass


def _generator() -> Any:
    yield 1


INVALID = [
    ((1, 2), "$", "tuple"),
    ({1, 2}, "$", "set"),
    (b"x", "$", "bytes"),
    (datetime.date(2024, 1, 1), "$", "date"),
    (datetime.datetime(2024, 1, 1), "$", "datetime"),
    (float("nan"), "$", "nan"),
    (float("inf"), "$", "inf"),
    (-float("inf"), "$", "inf"),
    (MAX_INTEGER + 1, "$", "outside"),
    (-MAX_INTEGER - 1, "$", "outside"),
    (2**64, "$", "outside"),
    (print, "$", "function"),
    (lambda: 1, "$", "function"),
    (object(), "$", "object instance"),
    (_generator(), "$", "generator"),
    (Colour.RED, "$", "enum"),
    (Name.ADA, "$", "enum"),
    (Text("x"), "$", "str subclass"),
    ("\ud800", "$", "surrogate"),
    ({"messages": [{}, {}, {}, {"fn": len}]}, "$.messages[3].fn", "function"),
    ({"a b": [0, (1,)]}, '$["a b"][1]', "tuple"),
    ({1: "x"}, "$", "not a string"),
    ({Text("k"): 1}, "$", "not a string"),
    ({"\ud800": 1}, "$", "surrogate"),
    ({"x": [1.0, float("nan")]}, "$.x[1]", "nan"),
    ({"x": {"y": Colour.RED}}, "$.x.y", "enum"),
]


@pytest.mark.parametrize(("value", "path", "word"), INVALID)
def test_invalid_values_name_their_path(value: object, path: str, word: str) -> None:
    with pytest.raises(StateValidationError) as caught:
        canonical_json(value)
    assert caught.value.path == path
    assert word in str(caught.value)
    assert str(caught.value).startswith(path + ": ")


def test_cycles_are_reported_not_recursed() -> None:
    loop: list[object] = [1]
    loop.append({"back": loop})
    with pytest.raises(StateValidationError, match="cycle") as caught:
        canonical_json({"root": loop})
    assert caught.value.path == "$.root[1].back"


def test_shared_but_acyclic_values_are_fine() -> None:
    shared = {"x": 1}
    value = {"a": shared, "b": [shared, shared]}
    encoded = encode_json(value)
    assert encoded.copy == value
    assert encoded.copy["a"] is not encoded.copy["b"][0]  # type: ignore[index]


def test_depth_limit() -> None:
    ok: object = 0
    for _ in range(MAX_DEPTH):
        ok = [ok]
    assert canonical_json(ok) == rfc8785.dumps(ok)
    with pytest.raises(StateValidationError, match="deeper"):
        canonical_json([ok])


def test_boundaries_that_are_valid() -> None:
    value = [RFC8785_MAX, -RFC8785_MAX, True, False, None, "", {}, []]
    assert canonical_json(value) == rfc8785.dumps(value)


def test_plus_minus_two_to_the_53_are_accepted() -> None:
    value = {"max": MAX_INTEGER, "min": -MAX_INTEGER, "f": 1.0, "s": "\U0001f600\uff61"}
    encoded = encode_json(value)
    assert encoded.copy == value and type(encoded.copy["max"]) is int  # type: ignore[index]
    expected = (
        b'{"f":1,"max":9007199254740992,"min":-9007199254740992,"s":"\xf0\x9f\x98\x80\xef\xbd\xa1"}'
    )
    assert encoded.canonical == expected
    assert encoded.canonical == rfc8785.dumps({**value, "max": 2.0**53, "min": -(2.0**53)})
    check_json(value)


invalid_leaves = st.sampled_from(
    [(1,), float("nan"), float("inf"), Colour.RED, Name.ADA, b"x", 2**53 + 1, {1, 2}, Text("t")]
)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.one_of(scalars, invalid_leaves),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(keys, children, max_size=4),
        ),
        max_leaves=20,
    )
)
def test_fast_validation_agrees_with_the_reference_walk(value: Any) -> None:
    try:
        check_json(value)
    except StateValidationError as reference:
        with pytest.raises(StateValidationError) as fast:
            encode_json(value)
        assert fast.value.path == reference.path
    else:
        encoded = encode_json(value)
        assert encoded.copy == value
        assert encoded.canonical == rfc8785.dumps(value)

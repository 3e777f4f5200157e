"""Each variable's summary and digest, recorded in the namespace manifest at capture time.

The control plane describes and compares variables from these alone (it never unpickles):
the summary says what a value is in a few words, and the digest changes exactly when the
value's pickle does. Variables pickled together because they share an object each keep a
digest of their own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.namespace_manifest import (
    RecordedVariable,
    load_namespace,
    recorded_variables,
)
from ditto_jupyter.kernel.capture import capture_namespace
from ditto_jupyter.kernel.capture.summaries import describe


def captured(blobs: BlobStore, namespace: dict[str, object]) -> dict[str, RecordedVariable]:
    capture = capture_namespace(namespace, blobs, runtime_id="rt")
    return recorded_variables(load_namespace(blobs, capture.manifest_id))


def test_summaries_say_what_a_value_is() -> None:
    assert describe(np.zeros((3, 4), dtype=np.int32)) == "shape (3, 4) int32"
    frame = pd.DataFrame({"a": [1, 2], "b": [3.0, 4.0]})
    assert describe(frame) == "shape (2, 2) columns a, b"
    assert describe(frame["b"]) == "length 2 float64 name 'b'"
    assert describe({"k": 1, "j": 2}) == "length 2"
    assert describe(42) == "42" and describe(None) == "None"
    assert describe("short") == "'short'"
    assert describe("x" * 500) == f"length 500: {'x' * 40!r}…"
    assert describe(10**5000) == "int too long to show"

    class Opaque:
        def __repr__(self) -> str:
            raise AssertionError("a summary never runs the value's own code")

    assert describe(Opaque()) == ""


def test_digests_change_with_the_value_and_only_then(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    namespace: dict[str, object] = {"grid": np.zeros(100_000), "names": ["a"], "n": 1}
    first = captured(blobs, namespace)
    assert first["grid"].summary == "shape (100000,) float64"
    assert captured(blobs, namespace) == first  # the same state, the same record
    np.asarray(namespace["grid"])[7] = 1.0
    second = captured(blobs, namespace)
    assert second["grid"].digest != first["grid"].digest
    assert (second["names"], second["n"]) == (first["names"], first["n"])


def test_variables_pickled_together_keep_digests_of_their_own(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    shared = [1, 2]
    namespace: dict[str, object] = {"a": {"list": shared}, "b": {"same": shared, "n": 1}}
    first = captured(blobs, namespace)
    assert first["a"].size == first["b"].size  # one component: one pickle for both
    namespace["b"]["n"] = 2  # type: ignore[index]
    second = captured(blobs, namespace)
    assert second["b"].digest != first["b"].digest
    assert second["a"].digest == first["a"].digest  # a's own pickle did not change

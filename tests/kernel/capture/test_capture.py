"""Namespace capture and restore in plain Python (no kernel): the rules of kernel/capture/.

Namespaces here are dicts with `__name__ = "__main__"`, and code is run in them with `exec`,
the way a kernel runs cells, so notebook-defined functions and classes are real ones.
"""

from __future__ import annotations

import math
import socket
import sqlite3
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ditto_jupyter.core.blobs import (
    CHUNK_SIZE,
    CODEC_RAW,
    BlobIntegrityError,
    BlobNotFound,
    BlobStore,
    ManifestSignatureError,
)
from ditto_jupyter.kernel.capture import (
    BUFFER_BYTEARRAY,
    BUFFER_BYTES,
    capture_namespace,
    restore_namespace,
)
from tests.support.stored_blobs import tamper_manifest


def run(namespace: dict[str, object], code: str) -> None:
    exec(textwrap.dedent(code), namespace)


def new_namespace() -> dict[str, object]:
    return {"__name__": "__main__"}


def state(namespace: dict[str, object]) -> set[str]:
    return {name for name in namespace if not name.startswith("__")}


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs", durable=False)


def test_aliasing_survives_restore_fresh_and_in_place(blobs: BlobStore) -> None:
    ns = new_namespace()
    run(
        ns,
        """
        import numpy as np
        a = b = []
        arr = np.arange(200_000, dtype=np.float64)
        d = {"ref": arr, "self": None}
        d["self"] = d
        pair = (a, [a])
        other = [1, 2]
        """,
    )
    captured = capture_namespace(ns, blobs)
    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    for target in (fresh, ns):
        if target is ns:
            run(ns, "a = [9]; arr = arr.copy(); d = {}")
            restore_namespace(ns, blobs, captured.manifest_id)
        assert target["a"] is target["b"]
        d = target["d"]
        assert isinstance(d, dict) and d["ref"] is target["arr"] and d["self"] is d
        pair = target["pair"]
        assert isinstance(pair, tuple) and pair[0] is target["a"] and pair[1][0] is target["a"]
        assert target["other"] == [1, 2] and target["other"] is not target["a"]
        np.testing.assert_array_equal(target["arr"], np.arange(200_000, dtype=np.float64))


def test_notebook_functions_lambdas_and_classes_by_value_with_live_globals(
    blobs: BlobStore,
) -> None:
    ns = new_namespace()
    run(
        ns,
        """
        offset = 10
        def add(x):
            return x + offset
        twice = lambda y: add(y) * 2
        def counter():
            count = 0
            def bump():
                nonlocal count
                count += 1
                return count
            return bump
        bump = counter()
        bump()
        def fact(n):
            return 1 if n <= 1 else n * fact(n - 1)
        class Point:
            scale = 3
            def __init__(self, x):
                self.x = x
            def scaled(self):
                return self.x * self.scale + offset
        p = Point(2)
        q = Point(5)
        add.note = "kept"
        """,
    )
    captured = capture_namespace(ns, blobs)
    assert captured.unrestorable == []
    fresh = new_namespace()
    restore_namespace(fresh, blobs, captured.manifest_id)
    run(
        fresh,
        """
        assert twice(1) == 22
        assert bump() == 2
        assert fact(5) == 120
        assert isinstance(p, Point) and isinstance(q, Point) and type(p) is type(q)
        assert p.scaled() == 16
        assert add.note == "kept" and add.__name__ == "add"
        offset = 0  # the functions see the live namespace, not a copy of their globals
        assert twice(1) == 2 and p.scaled() == 6
        """,
    )
    # the restored functions are bound to the namespace they were restored into
    assert fresh["add"].__globals__ is fresh  # type: ignore[attr-defined]


def test_modules_are_recorded_as_imports(blobs: BlobStore) -> None:
    ns = new_namespace()
    run(ns, "import numpy as np\nfrom os import path as p\nimport json")
    captured = capture_namespace(ns, blobs)
    body = blobs.get_manifest(captured.manifest_id)
    assert body["modules"] == {"np": "numpy", "p": p_name(), "json": "json"}
    assert body["components"] == []
    fresh = new_namespace()
    restore_namespace(fresh, blobs, captured.manifest_id)
    import json
    import os

    assert fresh["np"] is np and fresh["p"] is os.path and fresh["json"] is json


def p_name() -> str:
    import os

    return os.path.__name__


def test_every_unpicklable_kind_is_reported_and_the_rest_restored(
    blobs: BlobStore, tmp_path: Path
) -> None:
    ns = new_namespace()
    path = tmp_path / "data.txt"
    path.write_text("hello")
    thread = threading.Thread(target=lambda: None)
    ns.update(
        keep=[1, 2, 3],
        gen=(i for i in range(3)),
        fh=open(path),  # noqa: SIM115 - the open file is the point
        sock=socket.socket(),
        lock=threading.Lock(),
        thread=thread,
        conn=sqlite3.connect(":memory:"),
    )
    try:
        captured = capture_namespace(ns, blobs)
        lost = {u.name: u for u in captured.unrestorable}
        assert set(lost) == {"gen", "fh", "sock", "lock", "thread", "conn"}
        assert lost["gen"].type == "generator"
        assert lost["fh"].type == "_io.TextIOWrapper" and "open file" in lost["fh"].reason
        assert lost["sock"].type == "socket.socket"
        assert lost["lock"].type == "_thread.lock"
        assert lost["thread"].type == "threading.Thread"
        assert lost["conn"].type == "sqlite3.Connection"
        assert all(u.reason and "\n" not in u.reason for u in lost.values())
        body = blobs.get_manifest(captured.manifest_id)
        assert [u["name"] for u in body["unrestorable"]] == sorted(lost)

        fresh = new_namespace()
        again = restore_namespace(fresh, blobs, captured.manifest_id)
        assert {u.name for u in again} == set(lost)  # shown again at restore
        assert state(fresh) == {"keep"} and fresh["keep"] == [1, 2, 3]

        # in place: a live value of the recorded type stays (a connection keeps working)
        conn = ns["conn"]
        ns["gen"] = 5  # no longer the recorded type: removed
        restore_namespace(ns, blobs, captured.manifest_id)
        assert ns["conn"] is conn and "gen" not in ns and ns["keep"] == [1, 2, 3]
    finally:
        for name in ("fh", "sock", "conn"):
            value = ns.get(name)
            if value is not None:
                value.close()  # type: ignore[attr-defined]


def test_a_bad_variable_does_not_sink_the_variables_it_shares_objects_with(
    blobs: BlobStore,
) -> None:
    ns = new_namespace()
    run(ns, "shared = [1]\nbad = [shared, (i for i in range(2))]\nalso = {'s': shared}")
    captured = capture_namespace(ns, blobs)
    assert [u.name for u in captured.unrestorable] == ["bad"]
    fresh = new_namespace()
    restore_namespace(fresh, blobs, captured.manifest_id)
    assert state(fresh) == {"shared", "also"}
    also = fresh["also"]
    assert isinstance(also, dict) and also["s"] is fresh["shared"]


def test_in_place_restore_removes_later_names_and_keeps_ipython_names(blobs: BlobStore) -> None:
    ns = new_namespace()
    run(ns, "x = 1\ny = [2]")
    first = capture_namespace(ns, blobs)
    ns.update({"z": 3, "_i7": "z = 3", "_7": 3, "_": 3, "In": ["", "x = 1"], "_private": 4})
    ns["x"] = 100
    restore_namespace(ns, blobs, first.manifest_id)
    assert ns["x"] == 1 and ns["y"] == [2]
    assert "z" not in ns and "_private" not in ns  # a user's own underscore name is state
    assert ns["_i7"] == "z = 3" and ns["_7"] == 3 and ns["_"] == 3 and ns["In"] == ["", "x = 1"]
    assert ns["__name__"] == "__main__"
    restore_namespace(ns, blobs, None)
    assert state(ns) == {"_i7", "_7", "_", "In"}


def test_ipython_names_are_not_state(blobs: BlobStore) -> None:
    ns = new_namespace()
    ns.update({"In": [""], "Out": {}, "_": 1, "__": 2, "___": 3, "_i": "", "_ii": "", "_iii": ""})
    ns.update({"_i3": "x", "_3": 4, "_oh": {}, "_ih": [], "_dh": [], "exit": 1, "quit": 2})
    ns.update({"get_ipython": print, "__builtins__": __builtins__, "x": 1})
    body = blobs.get_manifest(capture_namespace(ns, blobs).manifest_id)
    assert [c["names"] for c in body["components"]] == [["x"]]


def test_incremental_checkpoints_write_about_one_chunk(blobs: BlobStore) -> None:
    ns = new_namespace()
    ns["arr"] = np.random.default_rng(1).random(16 * CHUNK_SIZE // 8)
    ns["d3"] = {"ref": ns["arr"]}
    first = capture_namespace(ns, blobs)
    assert first.bytes_written > 12 * CHUNK_SIZE  # random floats: byte-shuffled, ~0.84
    size_before = blobs.stored_bytes()
    ns["x"] = 1
    second = capture_namespace(ns, blobs, previous_manifest_id=first.manifest_id)
    assert second.bytes_written < 64 * 1024  # a small stream and the manifest
    arr = ns["arr"]
    assert isinstance(arr, np.ndarray)
    arr[0] = 42
    third = capture_namespace(ns, blobs, previous_manifest_id=second.manifest_id)
    assert CHUNK_SIZE // 2 <= third.bytes_written < 2 * CHUNK_SIZE  # the one chunk
    assert blobs.stored_bytes() - size_before < 2 * CHUNK_SIZE

    fresh = new_namespace()
    restore_namespace(fresh, blobs, first.manifest_id)
    assert fresh["arr"][0] != 42  # type: ignore[index]
    restore_namespace(ns, blobs, first.manifest_id)  # in place: the live array is patched
    assert ns["arr"][0] != 42 and ns["d3"]["ref"] is ns["arr"]  # type: ignore[index]
    restore_namespace(ns, blobs, third.manifest_id)
    assert ns["arr"][0] == 42 and "x" in ns  # type: ignore[index]


def test_big_bytes_go_out_of_band_and_are_not_written_twice(blobs: BlobStore) -> None:
    payload = bytes(range(256)) * (3 * CHUNK_SIZE // 256)
    ns = new_namespace()
    ns.update(raw=payload, nested={"data": bytearray(payload), "n": 1}, same=payload)
    first = capture_namespace(ns, blobs)
    assert first.bytes_written < len(payload)  # zstd-compressible, and stored once
    body = blobs.get_manifest(first.manifest_id)
    kinds = {c["names"][0]: [b["kind"] for b in c["buffers"]] for c in body["components"]}
    assert kinds == {"nested": [BUFFER_BYTEARRAY], "raw": [BUFFER_BYTES], "same": [BUFFER_BYTES]}
    assert all(c["stream"]["size"] < 1024 for c in body["components"])  # all out of band
    second = capture_namespace(ns, blobs)
    assert second.bytes_written == 0  # same manifest, nothing new
    fresh = new_namespace()
    restore_namespace(fresh, blobs, first.manifest_id)
    assert fresh["raw"] == payload and type(fresh["raw"]) is bytes
    assert fresh["same"] == payload  # immutable: equal, identity is not promised
    nested = fresh["nested"]
    assert isinstance(nested, dict)
    assert type(nested["data"]) is bytearray and nested["data"] == payload


def test_a_tampered_manifest_is_refused_and_changes_nothing(blobs: BlobStore) -> None:
    ns = new_namespace()
    ns["x"] = [1, 2, 3]
    captured = capture_namespace(ns, blobs)
    tamper_manifest(blobs.root, captured.manifest_id, lambda doc: doc.replace(b'"x"', b'"y"'))
    live = new_namespace()
    live["keep"] = "me"
    with pytest.raises(ManifestSignatureError):
        restore_namespace(live, blobs, captured.manifest_id)
    assert live == {"__name__": "__main__", "keep": "me"}


def test_a_damaged_chunk_fails_the_restore_before_anything_changes(blobs: BlobStore) -> None:
    ns = new_namespace()
    ns["arr"] = np.random.default_rng(2).random(4 * CHUNK_SIZE // 8)
    first = capture_namespace(ns, blobs)
    arr = ns["arr"]
    assert isinstance(arr, np.ndarray)
    arr[-1] = 7.0  # the last chunk differs from the checkpoint
    capture_namespace(ns, blobs)
    body = blobs.get_manifest(first.manifest_id)
    last = body["components"][0]["buffers"][0]["chunks"][-1]
    chunk = Path(blobs.chunk_file(last))
    chunk.write_bytes(CODEC_RAW + b"\x01" * (CHUNK_SIZE))  # same length, wrong content
    with pytest.raises(BlobIntegrityError):
        restore_namespace(ns, blobs, first.manifest_id)
    assert ns["arr"] is arr and arr[-1] == 7.0  # the live array was not patched
    chunk.unlink()
    with pytest.raises(BlobNotFound):
        restore_namespace(new_namespace(), blobs, first.manifest_id)


def test_a_component_that_cannot_load_is_reported_and_the_rest_restored(
    blobs: BlobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "gone_module.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(package))
    import gone_module  # type: ignore[import-not-found]

    ns = new_namespace()
    ns.update(thing=gone_module.Thing(), fine=[1])
    captured = capture_namespace(ns, blobs)
    (package / "gone_module.py").unlink()
    monkeypatch.delitem(sys.modules, "gone_module")
    fresh = new_namespace()
    lost = restore_namespace(fresh, blobs, captured.manifest_id)
    assert [(u.name, u.type) for u in lost] == [("thing", "gone_module.Thing")]
    assert lost[0].reason.startswith("could not be loaded: ModuleNotFoundError")
    assert state(fresh) == {"fine"}


def test_the_namespace_itself_and_numpy_flags_round_trip(blobs: BlobStore) -> None:
    ns = new_namespace()
    frozen = np.arange(300_000, dtype=np.int64)
    frozen.flags.writeable = False
    ns.update(g=ns, frozen=frozen, fortran=np.asfortranarray(np.ones((600, 300))))
    captured = capture_namespace(ns, blobs)
    fresh = new_namespace()
    restore_namespace(fresh, blobs, captured.manifest_id)
    assert fresh["g"] is fresh
    assert not fresh["frozen"].flags.writeable  # type: ignore[attr-defined]
    assert fresh["fortran"].flags.f_contiguous  # type: ignore[attr-defined]
    np.testing.assert_array_equal(fresh["frozen"], frozen)  # type: ignore[arg-type]


# ---- property: random nested namespaces round-trip equal ----------------------------------

names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)
leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=40)
    | st.builds(
        lambda n, seed: np.random.default_rng(seed).random(n),
        st.integers(0, 20_000),
        st.integers(0, 2**32),
    )
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=5)
        | st.frozensets(st.integers(), max_size=5)
    ),
    max_leaves=20,
)


def equal(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, float):
        return isinstance(b, float) and (a == b or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):  # type: ignore[arg-type]
            return False
        return all(equal(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[call-overload]
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(namespace=st.dictionaries(names, values, max_size=6), later=st.dictionaries(names, values))
def test_random_namespaces_round_trip(
    blobs: BlobStore, namespace: dict[str, object], later: dict[str, object]
) -> None:
    ns = new_namespace()
    ns.update(namespace)
    captured = capture_namespace(ns, blobs)
    assert captured.unrestorable == []
    fresh = new_namespace()
    restore_namespace(fresh, blobs, captured.manifest_id)
    assert state(fresh) == set(namespace)
    assert all(equal(namespace[name], fresh[name]) for name in namespace)
    ns.update(later)  # then restore in place over a changed namespace
    restore_namespace(ns, blobs, captured.manifest_id)
    assert state(ns) == set(namespace)
    assert all(equal(namespace[name], ns[name]) for name in namespace)


def test_in_place_restore_patches_only_exclusive_live_buffers(blobs: BlobStore) -> None:
    """Overlapping live buffers (a view and its base) are never patched in place."""
    rng = np.random.default_rng(3)
    ns = new_namespace()
    frozen = np.zeros(100_000)
    frozen.flags.writeable = False  # read-only live buffers never block the others
    ns.update(base=rng.random(4 * CHUNK_SIZE // 8), solo=rng.random(4 * CHUNK_SIZE // 8))
    ns["frozen"] = frozen
    base_then = ns["base"].copy()  # type: ignore[attr-defined]
    solo_then = ns["solo"].copy()  # type: ignore[attr-defined]
    captured = capture_namespace(ns, blobs)

    base, solo = ns["base"], ns["solo"]
    assert isinstance(base, np.ndarray) and isinstance(solo, np.ndarray)
    ns["base"] = base = np.ones_like(base)  # a new array of the same size
    ns["view"] = view = base[: base.size // 2]  # overlaps base: neither may be reused
    ns["tail"] = base[-base.size // 4 :]  # overlaps base, not view
    solo[-1] = -1.0  # one chunk off: patched in place
    outside = solo  # a reference the namespace does not own
    restore_namespace(ns, blobs, captured.manifest_id)

    np.testing.assert_array_equal(ns["base"], base_then)  # type: ignore[arg-type]
    np.testing.assert_array_equal(ns["solo"], solo_then)  # type: ignore[arg-type]
    assert "view" not in ns and "tail" not in ns and ns["frozen"] is not frozen
    assert float(view[0]) == 1.0 and float(base[0]) == 1.0  # the overlapping ones untouched
    assert float(outside[-1]) == solo_then[-1]  # documented: a patched buffer is shared


def test_pandas_frames_round_trip_with_their_columns_out_of_band(blobs: BlobStore) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {"a": np.arange(100_000, dtype=np.int64), "b": np.linspace(0, 1, 100_000), "c": "x"}
    )
    ns = new_namespace()
    ns.update(frame=frame, column=frame["a"])
    captured = capture_namespace(ns, blobs)
    body = blobs.get_manifest(captured.manifest_id)
    assert sum(len(c["buffers"]) for c in body["components"]) >= 2
    fresh = new_namespace()
    restore_namespace(fresh, blobs, captured.manifest_id)
    pd.testing.assert_frame_equal(fresh["frame"], frame)
    pd.testing.assert_series_equal(fresh["column"], frame["a"])


def test_hidden_names_are_skipped_only_while_they_hold_ipython_values() -> None:
    from ditto_jupyter.kernel.capture import is_state_name

    marker = object()
    hidden = {"display": marker}
    assert not is_state_name("display", marker, hidden)
    assert is_state_name("display", 5, hidden)  # the user rebound it: now it is state
    assert not is_state_name("_i12", "x = 1", {}) and not is_state_name("_12", 1, {})
    assert not is_state_name("__doc__", None, {}) and not is_state_name(3, 1, {})
    assert is_state_name("_tmp", 1, {}) and is_state_name("i", 1, {})


def test_pickled_functions_name_the_helpers_at_the_package_path(blobs: BlobStore) -> None:
    """Streams name the helpers that rebuild a notebook function: those names are part of
    the checkpoint format, so they stay `ditto_jupyter.kernel.capture.<helper>` whatever
    module defines them (checkpoints written before the package was split still load)."""
    ns = new_namespace()
    run(ns, "def f(x):\n    return x + 1\n")
    manifest_id = capture_namespace(ns, blobs).manifest_id
    (component,) = blobs.get_manifest(manifest_id)["components"]
    stream = blobs.get_bytes(component["stream"]["chunks"])
    assert b"ditto_jupyter.kernel.capture" in stream and b"_make_function" in stream
    assert b"ditto_jupyter.kernel.capture." not in stream  # no submodule path
    fresh = new_namespace()
    restore_namespace(fresh, blobs, manifest_id)
    assert fresh["f"](1) == 2  # type: ignore[operator]

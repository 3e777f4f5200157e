"""Alias grouping on real notebook values (issue 14 section 1): a component is exactly the set
of names that share a mutable object, so one value that cannot load loses only its aliases.

Plain Python, like tests/kernel/capture/test_capture.py: namespaces are dicts run with `exec`.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.kernel.capture import capture_namespace, load_manifest, restore_namespace


def run(namespace: dict[str, object], code: str) -> None:
    exec(textwrap.dedent(code), namespace)


def new_namespace() -> dict[str, object]:
    return {"__name__": "__main__"}


def groups(blobs: BlobStore, manifest_id: str) -> list[list[str]]:
    body: dict[str, Any] = load_manifest(blobs, manifest_id)  # with its parts' components
    return [component["names"] for component in body["components"]]


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs", durable=False)


@pytest.fixture
def notebook_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module beside the notebook (`mymod`), importable until the test deletes it."""
    folder = tmp_path / "notebook_dir"
    folder.mkdir()
    source = folder / "mymod.py"
    source.write_text(
        textwrap.dedent(
            """
            import dataclasses
            import enum

            class Point:
                pass

            class Mode(enum.Enum):
                FAST = 1
                SLOW = 2

            @dataclasses.dataclass(frozen=True)
            class Settings:
                depth: int
                tags: tuple = ()

            def helper(x):
                return x + 1
            """
        )
    )
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "mymod", raising=False)
    return source


def test_a_load_failure_loses_only_the_names_aliased_to_the_failing_value(
    blobs: BlobStore, notebook_module: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = new_namespace()
    run(
        ns,
        """
        import numpy as np
        import mymod
        a = np.zeros(5)
        b = np.ones((2, 2))
        p = mymod.Point()
        p.scale = np.float64(2)
        tied = [p]
        """,
    )
    captured = capture_namespace(ns, blobs)
    assert captured.unrestorable == []

    notebook_module.unlink()  # the restoring kernel cannot import mymod
    monkeypatch.delitem(sys.modules, "mymod")
    fresh = new_namespace()
    lost = restore_namespace(fresh, blobs, captured.manifest_id)
    assert sorted(u.name for u in lost) == ["mymod", "p", "tied"]
    assert all(u.reason.startswith(("could not be loaded", "import failed")) for u in lost)
    np.testing.assert_array_equal(fresh["a"], np.zeros(5))  # type: ignore[arg-type]
    np.testing.assert_array_equal(fresh["b"], np.ones((2, 2)))  # type: ignore[arg-type]
    assert groups(blobs, captured.manifest_id) == [["a"], ["b"], ["p", "tied"]]


def test_immutable_values_and_singletons_tie_no_variables_together(
    blobs: BlobStore, notebook_module: Path
) -> None:
    ns = new_namespace()
    run(
        ns,
        """
        import datetime, decimal, enum, fractions, pathlib, re, uuid
        import numpy as np
        import pandas as pd
        import mymod
        for i in range(100):  # each holds float64's dtype, one shared singleton
            globals()[f"arr{i}"] = np.full(3, float(i))
        scalar = np.float64(2.5)
        ints = np.arange(4)
        frame_a = pd.DataFrame({"x": [1.0, 2.0]})  # both pickle pandas' class-level _metadata
        frame_b = pd.DataFrame({"y": [3, 4]})
        series = pd.Series([1, 2], dtype="Int64")
        stamp = pd.Timestamp("2024-01-02")
        when = datetime.datetime(2024, 1, 2)
        money = decimal.Decimal("1.5")
        half = fractions.Fraction(1, 2)
        where = pathlib.PurePosixPath("/tmp/x")
        pattern = re.compile("a+")
        ident = uuid.UUID(int=7)
        mode_a = mymod.Mode.FAST
        mode_b = mymod.Mode.FAST
        settings_a = mymod.Settings(3)
        settings_b = settings_a
        func_a = mymod.helper
        func_b = mymod.helper
        ufunc = np.add
        holder_a = [np.float64, np.dtype("float64"), None, Ellipsis, mymod.Mode.SLOW, "text"]
        holder_b = [np.float64, np.dtype("float64"), None, Ellipsis, mymod.Mode.SLOW, "text"]
        # one structured dtype (as every tree of a scikit-learn forest holds for its nodes):
        # its pickled state is its dict of fields, the dtype's own, which nothing can change
        node = np.dtype([("left", np.int64), ("threshold", np.float64)])
        nodes_a = np.zeros(3, dtype=node)
        nodes_b = np.ones(2, dtype=node)
        """,
    )
    captured = capture_namespace(ns, blobs)
    assert captured.unrestorable == []
    found = groups(blobs, captured.manifest_id)
    assert all(len(names) == 1 for names in found), [g for g in found if len(g) > 1]
    variables = [n for n, v in ns.items() if not n.startswith("__") and type(v) is not type(np)]
    assert len(found) == len(variables) == 100 + 25

    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    assert fresh["mode_a"] is fresh["mode_b"] is sys.modules["mymod"].Mode.FAST
    assert fresh["settings_a"] == fresh["settings_b"]  # immutable: equal, not identical
    assert fresh["func_a"] is sys.modules["mymod"].helper and fresh["ufunc"] is np.add
    assert float(fresh["arr99"][0]) == 99.0  # type: ignore[index]
    nodes_b = fresh["nodes_b"]
    assert isinstance(nodes_b, np.ndarray) and nodes_b.dtype == ns["node"]
    assert nodes_b["threshold"].tolist() == [1.0, 1.0]


def test_shared_mutable_objects_still_keep_their_identity(
    blobs: BlobStore, notebook_module: Path
) -> None:
    ns = new_namespace()
    run(
        ns,
        """
        import numpy as np
        import mymod
        a = b = [1, 2]
        shared = [3]
        first = {"list": shared}
        second = {"again": shared}
        arr = np.arange(10.0)
        view_holder = {"arr": arr}
        inner = [0]
        frozen = mymod.Settings(1, tags=(inner,))  # immutable, but holds a mutable list
        keeper = {"inner": inner}
        alone = [9]
        """,
    )
    captured = capture_namespace(ns, blobs)
    assert sorted(groups(blobs, captured.manifest_id)) == [
        ["a", "b"],
        ["alone"],
        ["arr", "view_holder"],
        ["first", "second", "shared"],
        ["frozen", "inner", "keeper"],
    ]
    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    for target in (fresh, ns):
        if target is ns:
            run(ns, "a = [0]; shared = []; arr = arr.copy()")
            restore_namespace(ns, blobs, captured.manifest_id)
        first, second = target["first"], target["second"]
        assert isinstance(first, dict) and isinstance(second, dict)
        assert target["a"] is target["b"]
        assert first["list"] is second["again"] is target["shared"]
        assert target["view_holder"]["arr"] is target["arr"]  # type: ignore[index]
        assert target["frozen"].tags[0] is target["inner"] is target["keeper"]["inner"]  # type: ignore[attr-defined, index]


def test_big_flat_containers_group_like_any_other(blobs: BlobStore) -> None:
    """A long list or dict of nothing but strings and numbers skips copying the pickler's
    memo (`pickling._flat_memo`); it must still tie together the names that share it, and
    share nothing through the strings it holds."""
    ns = new_namespace()
    run(
        ns,
        """
        names = [f"user{i}" for i in range(5000)]
        alias = names
        lookup = {name: i for i, name in enumerate(names)}
        holder = {"names": names}
        words = tuple(names[:1000])
        mixed = [*names[:300], [1]]
        """,
    )
    captured = capture_namespace(ns, blobs)
    assert sorted(sorted(group) for group in groups(blobs, captured.manifest_id)) == [
        ["alias", "holder", "names"],
        ["lookup"],
        ["mixed"],
        ["words"],
    ]
    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    assert fresh["alias"] is fresh["names"] and fresh["holder"]["names"] is fresh["names"]  # type: ignore[index]
    assert fresh["lookup"] == ns["lookup"] and fresh["words"] == ns["words"]
    assert fresh["mixed"] == ns["mixed"]


def test_a_flat_container_has_the_same_identity_ids_as_its_full_memo() -> None:
    from ditto_jupyter.kernel.capture.atoms import Atoms
    from ditto_jupyter.kernel.capture.pickling import (
        Pickled,
        _flat_memo,
        identity_ids,
        pickle_values,
    )

    ns = new_namespace()
    values: list[object] = [
        [f"user{i}" for i in range(1000)],
        {f"k{i}": i * 0.5 for i in range(1000)},
        set(range(1000)),
        (None, True, 1.5, 2j, *range(500)),
    ]
    for value in values:
        assert _flat_memo([value]) is not None  # the shortcut is taken
        flat = pickle_values(ns, [value])
        assert flat.pickler is not None
        full = Pickled(flat.stream, flat.buffers, memo=flat.pickler.memo.copy())
        found = identity_ids(flat, Atoms(ns))
        assert found == identity_ids(full, Atoms(ns)) != set()
        assert (id(value) in found) is (not isinstance(value, tuple))  # a tuple is atomic
    assert _flat_memo([[*range(300), [1]]]) is None  # a mutable member: the memo is copied
    assert _flat_memo([list(range(10))]) is None  # short: copying is as cheap


def test_a_tuple_with_attributes_of_its_own_keeps_its_identity(blobs: BlobStore) -> None:
    """A subclass of tuple whose instances carry attributes (matplotlib's `BarContainer`)
    is changed in place like any object: two names holding one are one group, and come
    back as one object. A library's namedtuple (no `__dict__`) stays atomic: it ties
    nothing together."""
    ns = new_namespace()
    run(
        ns,
        """
        from urllib.parse import urlsplit

        class Bars(tuple):
            pass

        bars = Bars([1, 2, 3])  # no attribute yet: nothing but the tuple itself is shared
        holder = {"bars": bars}
        address = urlsplit("https://example.org/notebook")
        other = {"address": address}
        """,
    )
    captured = capture_namespace(ns, blobs)
    grouped = groups(blobs, captured.manifest_id)
    assert ["bars", "holder"] in grouped
    assert ["address"] in grouped and ["other"] in grouped
    fresh = new_namespace()
    assert restore_namespace(fresh, blobs, captured.manifest_id) == []
    assert fresh["holder"]["bars"] is fresh["bars"]  # type: ignore[index]
    run(fresh, "bars.label = 'set through one name'")
    assert fresh["holder"]["bars"].label == "set through one name"  # type: ignore[index]

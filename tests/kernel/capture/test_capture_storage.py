"""What checkpoints write (issue 14 sections 4-5): a cell that changed nothing writes next to
nothing, even with a matplotlib figure in the namespace, and a small change on a
notebook-sized namespace writes a small checkpoint.

Plain Python, like tests/kernel/capture/test_capture.py; the same figures in a real kernel are in
tests/kernel/capture/test_capture_pyplot.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib
import orjson
import pytest
import zstandard

from ditto_jupyter.core.blobs import CODEC_ZSTD, BlobStore, ManifestSignatureError
from ditto_jupyter.kernel.capture import capture_namespace, restore_namespace
from tests.support.stored_blobs import manifest_document, write_manifest_document

matplotlib.use("Agg")  # no display here; pyplot's figures stay in memory

KIB = 1024

NOTEBOOK = """
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt

rng = np.random.default_rng(3)
values = rng.normal(size=200_000)  # 1.6 MB: out of band, two chunks
small = np.arange(12).reshape(3, 4)
frame = pd.DataFrame({"x": rng.random(500), "label": [f"r{i}" for i in range(500)]})
threshold = 0.5
name = "run 1"
counts = {"a": 1, "b": [1, 2]}
fig, ax = plt.subplots()
ax.plot(values[:100])
ax.set_title("values")
plt.figure(2)
plt.hist(values, bins=30)  # the implicit API: a figure only pyplot holds
"""


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs", durable=False)


def run(namespace: dict[str, object], code: str) -> None:
    exec(textwrap.dedent(code), namespace)


def test_a_checkpoint_after_a_cell_that_changed_nothing_writes_at_most_4_kib(
    blobs: BlobStore,
) -> None:
    ns: dict[str, object] = {"__name__": "__main__"}
    run(ns, NOTEBOOK)
    first = capture_namespace(ns, blobs)
    assert first.unrestorable == []
    previous = first.manifest_id
    for cell in ("frame.head()", "print(threshold)", "len(counts)", "plt.get_fignums()"):
        run(ns, cell)
        again = capture_namespace(ns, blobs, previous_manifest_id=previous)
        assert again.bytes_written <= 4 * KIB, (cell, again.bytes_written)
        previous = again.manifest_id

    fresh: dict[str, object] = {"__name__": "__main__"}
    assert restore_namespace(fresh, blobs, previous) == []
    restored_ax = fresh["ax"]
    assert restored_ax.get_title() == "values"  # type: ignore[attr-defined]
    assert fresh["counts"] == {"a": 1, "b": [1, 2]}


HUNDRED = """
import numpy as np
import pandas as pd

rng = np.random.default_rng(11)
for i in range(40):
    globals()[f"n{i}"] = i * 7 if i % 2 else f"text {i}"
for i in range(20):
    globals()[f"items{i}"] = [i, str(i), {"k": i}]
for i in range(25):
    globals()[f"vec{i}"] = rng.random(30 + i)
for i in range(8):
    globals()[f"frame{i}"] = pd.DataFrame({"a": rng.random(20), "b": np.arange(20) * i})
big = rng.random(300_000)  # 2.4 MB: three chunks
del rng
"""


def snapshot(namespace: dict[str, object]) -> dict[str, object]:
    """A deep copy of the state, to compare restores with."""
    import copy
    import types

    return {
        k: v if isinstance(v, types.ModuleType) else copy.deepcopy(v)
        for k, v in namespace.items()
        if not k.startswith("__")
    }


def differences(restored: dict[str, object], expected: dict[str, object]) -> list[str]:
    """Names whose restored value differs from the expected one (or that are missing/extra)."""
    import types

    import numpy as np
    import pandas as pd

    state = {k: v for k, v in restored.items() if not k.startswith("__")}
    wrong = sorted(set(state) ^ set(expected))
    for name, want in expected.items():
        if name not in state:
            continue
        got = state[name]
        if isinstance(want, np.ndarray):
            same = isinstance(got, np.ndarray) and np.array_equal(got, want)
        elif isinstance(want, pd.DataFrame):
            same = isinstance(got, pd.DataFrame) and got.equals(want)
        elif isinstance(want, types.ModuleType):
            same = got is want
        else:
            same = got == want
        if not same:
            wrong.append(name)
    return wrong


def test_a_small_change_on_a_hundred_variable_namespace_writes_at_most_4_kib(
    blobs: BlobStore,
) -> None:
    ns: dict[str, object] = {"__name__": "__main__"}
    run(ns, HUNDRED)
    assert len(snapshot(ns)) >= 95
    checkpoints = [(capture_namespace(ns, blobs), snapshot(ns))]
    for cell in ("n3 = 1000", "items4.append('more')", "fresh_name = [1, 2]", "del n6"):
        run(ns, cell)
        captured = capture_namespace(ns, blobs, previous_manifest_id=checkpoints[-1][0].manifest_id)
        assert captured.bytes_written <= 4 * KIB, (cell, captured.bytes_written)
        checkpoints.append((captured, snapshot(ns)))
    for captured, expected in checkpoints:  # every checkpoint restores exactly, in place too
        fresh: dict[str, object] = {"__name__": "__main__"}
        assert restore_namespace(fresh, blobs, captured.manifest_id) == []
        assert differences(fresh, expected) == []
        assert restore_namespace(ns, blobs, captured.manifest_id) == []
        assert differences(ns, expected) == []


def test_parts_are_signed_checked_and_kept_by_gc(blobs: BlobStore) -> None:
    ns: dict[str, object] = {"__name__": "__main__"}
    run(ns, HUNDRED)
    first = capture_namespace(ns, blobs)
    run(ns, "n3 = -1")
    second = capture_namespace(ns, blobs, previous_manifest_id=first.manifest_id)
    top = blobs.get_manifest(second.manifest_id)
    parts = top["parts"]
    assert top["components"] == [] and top["manifests"] == parts and len(parts) > 3
    assert len(set(parts) & set(blobs.get_manifest(first.manifest_id)["parts"])) == len(parts) - 1

    # gc keeps what a live checkpoint's parts reference, and frees the rest
    live = second.manifest_id
    report = blobs.gc(lambda ids: [i for i in ids if i == live], grace_seconds=0)
    assert report.freed_manifests == 2  # the first top manifest and its one other part
    expected = snapshot(ns)
    fresh: dict[str, object] = {"__name__": "__main__"}
    assert restore_namespace(fresh, blobs, second.manifest_id) == []
    assert differences(fresh, expected) == []

    # a tampered part is refused before anything changes
    document = orjson.loads(decompressed(manifest_document(blobs.root, parts[1])))
    document["body"]["components"][0]["names"] = ["hacked"]
    write_manifest_document(blobs.root, parts[1], orjson.dumps(document))
    run(ns, "n3 = 5")
    with pytest.raises(ManifestSignatureError):
        restore_namespace(ns, blobs, second.manifest_id)
    assert ns["n3"] == 5 and "hacked" not in ns


def decompressed(raw: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompress(raw[1:]) if raw[:1] == CODEC_ZSTD else raw


def test_big_manifests_are_stored_compressed_and_still_checked(blobs: BlobStore) -> None:
    body = {"chunks": [], "names": [f"variable number {i}" for i in range(200)]}
    manifest_id, written = blobs.put_manifest(body)
    raw = manifest_document(blobs.root, manifest_id)
    assert raw[:1] == CODEC_ZSTD and written == len(raw) < len(orjson.dumps(body)) // 2
    assert blobs.get_manifest(manifest_id) == body
    small_id, _ = blobs.put_manifest({"chunks": [], "x": 1})
    assert manifest_document(blobs.root, small_id)[:1] == b"{"  # small ones stay JSON

    document = orjson.loads(decompressed(raw))
    document["body"]["names"][0] = "changed"
    tampered = CODEC_ZSTD + zstandard.ZstdCompressor().compress(orjson.dumps(document))
    write_manifest_document(blobs.root, manifest_id, tampered)
    with pytest.raises(ManifestSignatureError, match="signature"):
        blobs.get_manifest(manifest_id)
    write_manifest_document(blobs.root, manifest_id, CODEC_ZSTD + b"not a zstd frame")
    with pytest.raises(ManifestSignatureError, match="not valid"):
        blobs.get_manifest(manifest_id)


def test_a_big_stream_pickled_again_with_a_small_change_writes_the_chunks_around_it(
    blobs: BlobStore,
) -> None:
    """A pickle stream of several chunks is cut where its content says: a value pickled
    again with a few bytes more in the middle (a fitted model added to a dict of them)
    keeps the chunks before and after the change, where fixed boundaries would shift, and
    write again, every chunk after it. Both states restore exactly."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(
        "import random\n"
        "rng = random.Random(7)\n"
        "models = {f'model_{i}': {'weights': [rng.random() for j in range(300)], 'name': f'm{i}'}"
        " for i in range(1500)}",
        namespace,
    )
    first = capture_namespace(namespace, blobs)
    models = namespace["models"]
    assert isinstance(models, dict)
    models["model_700"]["name"] = "a much longer name than before, in the middle"
    second = capture_namespace(namespace, blobs)
    assert second.manifest_id != first.manifest_id
    assert second.bytes_written < first.bytes_written / 4
    for captured, name in ((first, "m700"), (second, models["model_700"]["name"])):
        fresh: dict[str, object] = {"__name__": "__main__"}
        assert restore_namespace(fresh, blobs, captured.manifest_id) == []
        restored = fresh["models"]
        assert isinstance(restored, dict) and restored["model_700"]["name"] == name
        assert restored["model_1499"]["weights"] == models["model_1499"]["weights"]


def test_chunk_lengths_that_do_not_add_up_are_refused() -> None:
    from ditto_jupyter.core.blobs import BlobIntegrityError
    from ditto_jupyter.kernel.capture.restoring import _chunk_views

    entry = {"size": 10, "chunks": ["a", "b"], "fps": ["x", "y"], "cuts": [4, 6]}
    assert _chunk_views(entry, 8) == [(0, 4), (4, 10)]
    for cuts in ([4, 5], [10], [0, 10], [-1, 11]):
        with pytest.raises(BlobIntegrityError):
            _chunk_views({**entry, "cuts": cuts}, 8)


def test_a_pickle_without_its_frames_loads_as_the_same_value() -> None:
    """`unframed` drops protocol 5's FRAME opcodes (a big payload the pickler wrote outside
    any frame, and several pickles written one after another, included); bytes it does not
    recognise come back unchanged."""
    import io
    import pickle

    from ditto_jupyter.kernel.capture.pickling import unframed

    value = {
        "numbers": list(range(50_000)),
        "text": "x" * 200_000,
        "raw": b"y" * 300_000,
        "grow": bytearray(b"z" * 70_000),
    }
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.dump([value])
    pickler.dump(["a second pickle"])
    framed = out.getvalue()
    stripped = unframed(framed)
    assert len(stripped) < len(framed) and b"\x95" not in stripped[:3]
    reader = io.BytesIO(stripped)
    assert pickle.load(reader) == [value]
    assert pickle.load(reader) == ["a second pickle"]
    assert unframed(b"\x95\xff" + framed) == b"\x95\xff" + framed  # not a pickle's frames

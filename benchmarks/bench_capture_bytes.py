"""Bytes a kernel checkpoint writes on a notebook-sized namespace (issue 14, sections 4-5).

Run from the repository root: `.venv/bin/python -m benchmarks.bench_capture_bytes`. Writes
the `bench_capture_bytes` section of benchmarks/RESULTS.md.

A namespace of about 100 variables, the mix a data-science notebook holds (numbers and
strings, small lists and dicts, small and mid-sized numpy arrays, pandas frames and series,
two notebook functions, a pyplot figure), is captured in-process with `capture_namespace`,
each checkpoint following the previous one as a kernel's would. Reported: the bytes the
first checkpoint wrote, a checkpoint after a cell that changed nothing, after a cell that
rebound one int, after a cell that appended to one list, after one new variable, and how
many of those bytes were manifests. Bytes do not depend on the machine, so no anchor is
needed: the figures are exact and repeatable.
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.core.blobs import BlobStore  # noqa: E402
from ditto_jupyter.kernel.capture import capture_namespace  # noqa: E402

NOTEBOOK = """
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt

rng = np.random.default_rng(7)
for i in range(30):
    globals()[f"n{i}"] = i * 3 if i % 3 else f"label {i}"
for i in range(15):
    globals()[f"items{i}"] = [i, i + 1, str(i)]
    globals()[f"conf{i}"] = {"k": i, "name": f"c{i}", "on": bool(i % 2)}
for i in range(20):
    globals()[f"vec{i}"] = rng.random(50 + i)
for i in range(4):
    globals()[f"big{i}"] = rng.random(20_000 + i)  # 160 KB each: out of band
frames = []
for i in range(6):
    globals()[f"df{i}"] = pd.DataFrame({"a": rng.random(40), "b": np.arange(40) + i})
    globals()[f"s{i}"] = globals()[f"df{i}"]["a"].rename(f"s{i}")

def scale(x, k=2):
    return x * k

square = lambda v: v * v
fig, ax = plt.subplots()
ax.plot(vec1)
"""

STEPS = [
    ("no-op cell (`df0.head()`)", "df0.head()"),
    ("rebind one int (`n1 = 1000`)", "n1 = 1000"),
    ("append to one list", "items3.append(99)"),
    ("one new variable", "fresh = [1, 2, 3]"),
    ("second no-op cell", "len(items3)"),
]

#: The same script on the code before issue 14 (measured once; bytes are exact).
BEFORE = (
    "Before issue 14 (commit bc0917e, this script): first checkpoint 685,044 bytes; every "
    "later one, no-op cells included, 41,883-42,177 bytes, of which 19,897-20,164 were the "
    "manifest and the rest the figure, re-pickled with a new callback id each time."
)


def manifest_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in (root / "manifests").glob("*.json"))


def main() -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(textwrap.dedent(NOTEBOOK), namespace)
    count = sum(1 for name in namespace if not name.startswith("_"))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "blobs"
        blobs = BlobStore(root, durable=False)
        rows: list[list[object]] = []
        before = manifest_bytes(root)
        capture = capture_namespace(namespace, blobs)
        rows.append(["first checkpoint", capture.bytes_written, manifest_bytes(root) - before])
        previous = capture.manifest_id
        for label, code in STEPS:
            exec(code, namespace)
            before = manifest_bytes(root)
            capture = capture_namespace(namespace, blobs, previous_manifest_id=previous)
            rows.append([label, capture.bytes_written, manifest_bytes(root) - before])
            previous = capture.manifest_id
    for label, written, manifests in rows:
        print(f"{label:40} {written:>10} bytes ({manifests} in manifests)")
    table = markdown_table(
        ["checkpoint after", "bytes written", "of which manifests"],
        [[label, f"{written:,}", f"{manifests:,}"] for label, written, manifests in rows],
    )
    body = f"{count} variables in the namespace.\n\n{table}\n\n{BEFORE}"
    write_section("bench_capture_bytes", "Bytes per checkpoint on a 100-variable namespace", body)


if __name__ == "__main__":
    main()

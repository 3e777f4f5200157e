"""What the notebook documents of a `%autocheckpoint` run take on disk (issue 23, section 1).

Run from the repository root: `.venv/bin/python -m benchmarks.bench_documents`. Writes the
`bench_documents` section of benchmarks/RESULTS.md.

A realistic 100-cell analysis notebook (numpy, pandas, matplotlib: data loading, cleaning,
group-bys, printed tables, 20 plots as PNG images, markdown between) is generated and
executed for real in a fresh kernel (nbclient), so its outputs are what a kernel makes.
Then every cell runs once under `%autocheckpoint`: one checkpoint per cell, each holding the
document as the user sees it then (cells up to that one run, with their outputs and
execution counts; the later ones not run yet). The documents are stored as checkpoints
store them (`CheckpointDocuments.save`, the path `POST .../checkpoint` and a front end's
answer take) into a blob store of their own, so the bytes on disk are the documents' alone:
the catalogue file (rows, indexes, free pages) and the chunk files, in disk blocks, less an
empty store's. Target: at most 2x the final notebook file's size for all 100 together.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.control.documents import DocumentStore  # noqa: E402
from ditto_jupyter.core.blobs import BlobStore  # noqa: E402
from ditto_jupyter.core.models import NotebookDocument  # noqa: E402

CELLS = 100
PLOTS = 20


def analysis_cells() -> list[tuple[str, str]]:
    """(cell type, source) of a 100-cell notebook: 20 of its code cells draw a plot."""
    cells: list[tuple[str, str]] = [
        ("markdown", "# Harbour tides and weather, 2019-2024\n\nA look at daily readings."),
        (
            "code",
            "%matplotlib inline\nimport numpy as np\nimport pandas as pd\n"
            "import matplotlib.pyplot as plt\n"
            "rng = np.random.default_rng(2024)\npd.set_option('display.max_rows', 12)",
        ),
        (
            "code",
            "days = pd.date_range('2019-01-01', '2024-12-31', freq='D')\n"
            "tides = pd.DataFrame({\n"
            "    'high_m': 4.2 + 0.6 * np.sin(np.arange(len(days)) / 14.8) "
            "+ rng.normal(0, 0.1, len(days)),\n"
            "    'low_m': 0.8 + 0.3 * np.cos(np.arange(len(days)) / 14.8) "
            "+ rng.normal(0, 0.05, len(days)),\n"
            "    'wind_kn': rng.gamma(2.0, 6.0, len(days)),\n"
            "    'temp_c': 12 + 7 * np.sin(2 * np.pi * days.dayofyear / 365) "
            "+ rng.normal(0, 1.5, len(days)),\n"
            "}, index=days)\ntides.head()",
        ),
    ]
    plots = 0
    step = 0
    while len(cells) < CELLS - 1:
        step += 1
        year = 2019 + step % 6
        if step % 4 == 0 and plots < PLOTS:
            plots += 1
            column = ("high_m", "low_m", "wind_kn", "temp_c")[plots % 4]
            kind = ("plot", "hist", "scatter", "box")[plots % 4]
            source = (
                f"fig, ax = plt.subplots(figsize=(6, 3))\npart = tides.loc['{year}', '{column}']\n"
            )
            if kind == "plot":
                source += f"part.rolling(7).mean().plot(ax=ax, title='{column} {year}')"
            elif kind == "hist":
                source += f"ax.hist(part, bins=30); ax.set_title('{column} in {year}')"
            elif kind == "scatter":
                source += f"ax.scatter(tides.loc['{year}', 'wind_kn'], part, s=4)"
            else:
                source += f"tides.loc['{year}'].boxplot(ax=ax)"
            source += "\nplt.show()"
            cells.append(("code", source))
        elif step % 4 == 1:
            cells.append(
                (
                    "code",
                    f"monthly_{step} = tides.loc['{year}'].resample('ME').mean()\n"
                    f"monthly_{step}.round(2)",
                )
            )
        elif step % 4 == 2:
            cells.append(
                (
                    "markdown",
                    f"## Step {step}\n\nIn {year} the spring tides ran high; "
                    "the table below keeps the days above the 95th percentile.",
                )
            )
        else:
            cells.append(
                (
                    "code",
                    f"threshold = tides['high_m'].quantile(0.95)\n"
                    f"peaks_{step} = tides.loc['{year}'].query('high_m > @threshold')\n"
                    f"print(len(peaks_{step}), 'peak days in {year}')\n"
                    f"peaks_{step}.describe().round(2)",
                )
            )
    cells.append(("markdown", "That is all for now."))
    assert sum(1 for kind, _ in cells if kind == "code" and "plt.show" in _) == PLOTS
    return cells[:CELLS]


def executed_notebook(workdir: Path) -> dict[str, Any]:
    """The notebook, run for real in a fresh kernel; as the final file holds it."""
    made = nbformat.v4.new_notebook()
    made.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    for index, (kind, source) in enumerate(analysis_cells()):
        make = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        cell = make(source)
        cell["id"] = f"cell-{index:03d}"
        made.cells.append(cell)
    NotebookClient(made, timeout=600, kernel_name="python3").execute(cwd=str(workdir))
    path = workdir / "tides.ipynb"
    nbformat.write(made, str(path))
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def document_after(final: dict[str, Any], ran: int) -> dict[str, Any]:
    """The notebook as the user sees it once the first `ran` cells have run."""
    seen = copy.deepcopy(final)
    for cell in seen["cells"][ran:]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return seen


def disk_bytes(root: Path) -> int:
    """Bytes the files under `root` take on disk (blocks), the catalogue's WAL folded in."""
    catalogue = root / "objects.db"
    if catalogue.exists():
        with sqlite3.connect(catalogue) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            if name == "secret":
                continue
            total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-documents-") as tmp:
        workdir = Path(tmp)
        started = time.perf_counter()
        final = executed_notebook(workdir)
        executed_s = time.perf_counter() - started
        file_bytes = (workdir / "tides.ipynb").stat().st_size
        images = sum(
            1
            for cell in final["cells"]
            for output in cell.get("outputs", [])
            if "image/png" in output.get("data", {})
        )
        blobs = BlobStore(workdir / "blobs")
        store = DocumentStore(blobs)
        empty = disk_bytes(workdir / "blobs")
        written = 0
        save_s: list[float] = []
        code_cells = [i for i, cell in enumerate(final["cells"]) if cell["cell_type"] == "code"]
        # one automatic checkpoint per cell run (markdown cells are "run" too in JupyterLab,
        # and a checkpoint after one changes nothing in the kernel: %autocheckpoint skips it)
        for index in code_cells:
            document = NotebookDocument.model_validate(
                document_after(final, index + 1), strict=False
            )
            began = time.perf_counter()
            saved = asyncio.run(_save(store, document))
            save_s.append(time.perf_counter() - began)
            written += saved
        on_disk = disk_bytes(workdir / "blobs") - empty
        ratio = on_disk / file_bytes
        rows = [
            [
                f"{len(final['cells'])} cells ({len(code_cells)} code, {images} images)",
                len(code_cells),
                f"{file_bytes / 1024:.0f} KiB",
                f"{written / 1024:.0f} KiB",
                f"{on_disk / 1024:.0f} KiB",
                f"{ratio:.2f}x",
                "<= 2x",
                "yes" if ratio <= 2 else "no",
                f"{1000 * sorted(save_s)[len(save_s) // 2]:.1f}",
            ]
        ]
        headers = [
            "notebook",
            "checkpoints (documents)",
            "final .ipynb",
            "bytes written",
            "on disk (blocks)",
            "on disk / file",
            "target",
            "met",
            "store ms / document (median)",
        ]
        body = markdown_table(headers, rows) + (
            "\n\n- The notebook is generated and executed for real (nbclient, a fresh "
            f"python3 kernel, {executed_s:.0f} s): its outputs, PNG plots included, are a "
            "kernel's own.\n"
            "- One document per code cell, as `%autocheckpoint` takes a checkpoint after each "
            "cell that ran: the document after cell i has cells 1..i with their outputs and "
            "execution counts, the later ones not run yet.\n"
            "- Stored as a checkpoint stores its document (`CheckpointDocuments.save`) into a "
            "blob store of their own. On disk: every file of that store (the catalogue with "
            "its rows, indexes and free pages, after folding its WAL in; the chunk files) in "
            "disk blocks, less an empty store's. Bytes written: what the saves reported.\n"
            "- Why it stays small: each cell is content-addressed, images are chunks of "
            "their own, and documents of more than 16 cells keep their cells in parts keyed "
            "by cell id, so a checkpoint after one cell writes that cell, one part and a "
            "short top manifest."
        )
        write_section("bench_documents", "Notebook documents of a %autocheckpoint run", body)
        print(body)


async def _save(store: DocumentStore, document: NotebookDocument) -> int:
    return await asyncio.to_thread(lambda: store.save(document).bytes_written)


if __name__ == "__main__":
    main()

"""A comparison as plain text, for `%diff` (its text form) and `ditto diff`.

    from cell-4 (3f2a9c1b0d4e) to live kernel, saved notebook
    variables: 1 added, 2 changed, 3 unchanged
      + df  pandas.DataFrame  shape (100, 3) columns a, b, c
      ~ x   int  41 -> 42
      ~ a   numpy.ndarray  shape (10,) int64, contents changed (digest 5be1e3a0 -> 0c4f9d21)
    files: 1 added, 0 changed, 2 unchanged
      + out/result.csv (1.2 KiB)
    cells: 2 changed, 1 added, 5 unchanged
      ~ cell 3 -> 3: source, outputs
        --- before
        +++ after
        ...

A part one side cannot show says so (`files: not available (...)`).
"""

from __future__ import annotations

from ditto_jupyter.core.models import (
    CellEntry,
    CellsDiff,
    FileEntry,
    FilesDiff,
    RuntimeDiffResult,
    Variable,
    VariablesDiff,
)

#: Lines of a source or text diff the report shows per entry (the rest is counted).
DIFF_LINES = 20


def size_text(count: int | None) -> str:
    """1536 -> '1.5 KiB'; None -> ''."""
    if count is None:
        return ""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _counts(added: int, removed: int, changed: int, unchanged: int) -> str:
    parts = [f"{added} added", f"{removed} removed", f"{changed} changed"]
    return ", ".join(parts) + f", {unchanged} unchanged"


def _indented(diff: str, depth: str = "      ") -> list[str]:
    lines = diff.splitlines()
    shown = [depth + line for line in lines[:DIFF_LINES]]
    if len(lines) > DIFF_LINES:
        shown.append(f"{depth}… {len(lines) - DIFF_LINES} more lines")
    return shown


def variable_text(variable: Variable) -> str:
    """`df  pandas.DataFrame  shape (2, 2) columns x, y`, or the reason it was not kept."""
    described = variable.summary if variable.kept else f"not kept: {variable.reason}"
    return "  ".join(part for part in (variable.name, variable.type, described) if part)


def variables_lines(diff: VariablesDiff) -> list[str]:
    """The variables part of a report."""
    if not diff.available:
        return ["variables: not available (a side holds none: pruned, or not captured)"]
    lines = [
        "variables: "
        + _counts(len(diff.added), len(diff.removed), len(diff.changed), diff.unchanged)
    ]
    lines += [f"  + {variable_text(v)}" for v in diff.added]
    lines += [f"  - {variable_text(v)}" for v in diff.removed]
    for change in diff.changed:
        old, new = change.old, change.new
        kind = new.type if old.type == new.type else f"{old.type} -> {new.type}"
        before = old.summary if old.kept else "not kept"
        after = new.summary if new.kept else f"not kept: {new.reason}"
        detail = f"{before} -> {after}" if before != after else (after or "changed")
        if before == after and old.digest != new.digest and old.digest and new.digest:
            detail += f", contents changed (digest {old.digest[:8]} -> {new.digest[:8]})"
        lines.append(f"  ~ {change.name}  {kind}  {detail}")
    return lines


def _file_text(entry: FileEntry) -> str:
    if entry.kind == "dir":
        return f"{entry.path}/"
    if entry.kind == "symlink":
        return f"{entry.path} (link)"
    return f"{entry.path} ({size_text(entry.size)})"


def files_lines(diff: FilesDiff) -> list[str]:
    """The files part of a report."""
    if not diff.available:
        return ["files: not available (a side's workspace cannot be read here)"]
    lines = [
        "files: " + _counts(len(diff.added), len(diff.removed), len(diff.changed), diff.unchanged)
    ]
    lines += [f"  + {_file_text(f)}" for f in diff.added]
    lines += [f"  - {_file_text(f)}" for f in diff.removed]
    for change in diff.changed:
        lines.append(f"  ~ {_file_text(change.new)}")
        if change.text_diff:
            lines += _indented(change.text_diff)
    return lines


def _cell_text(cell: CellEntry) -> str:
    first = next((line for line in cell.source.splitlines() if line.strip()), "")
    first = first if len(first) <= 60 else first[:59] + "…"
    count = f" [{cell.execution_count}]" if cell.execution_count is not None else ""
    return f"cell {cell.index} ({cell.cell_type}{count}): {first}"


def cells_lines(diff: CellsDiff) -> list[str]:
    """The cells part of a report."""
    if not diff.available:
        return ["cells: not available (a side holds no notebook document)"]
    lines = [
        "cells: " + _counts(len(diff.added), len(diff.removed), len(diff.changed), diff.unchanged)
    ]
    lines += [f"  + {_cell_text(c)}" for c in diff.added]
    lines += [f"  - {_cell_text(c)}" for c in diff.removed]
    for change in diff.changed:
        what = [
            w
            for w, on in (("source", change.source_diff), ("outputs", change.outputs_changed))
            if on
        ]
        lines.append(
            f"  ~ cell {change.index_old} -> {change.index_new}: {', '.join(what) or 'metadata'}"
        )
        if change.source_diff:
            lines += _indented(change.source_diff)
    return lines


def diff_text(result: RuntimeDiffResult) -> str:
    """The whole comparison as text."""
    lines = [f"from {result.from_.label} to {result.to.label}"]
    lines += variables_lines(result.variables)
    lines += files_lines(result.files)
    lines += cells_lines(result.cells)
    return "\n".join(lines)

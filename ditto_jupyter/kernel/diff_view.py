"""What `%diff` shows: a comparison as text (its repr) and as HTML (JupyterLab's rich view).

The text is `control.diff.report.diff_text`, the same as `ditto diff` prints. The HTML has
one section per part (variables, files, cells) with what was added, removed and changed,
old and new summaries side by side, and the unified diffs of small text files and of cell
sources in collapsible blocks.
"""

from __future__ import annotations

import html

from ditto_jupyter.control.diff.report import diff_text, size_text, variable_text
from ditto_jupyter.control.diff.side_by_side_report import compare_text
from ditto_jupyter.core.models import CellEntry, FileEntry, RuntimeCompareResult, RuntimeDiffResult

_STYLE = (
    "<style>.ditto-diff td,.ditto-diff th{text-align:left;padding:1px 8px}"
    ".ditto-diff .add{color:#1a7f37}.ditto-diff .del{color:#cf222e}"
    ".ditto-diff .chg{color:#9a6700}.ditto-diff pre{margin:2px 0 6px 0;font-size:90%}</style>"
)


def _e(text: object) -> str:
    return html.escape(str(text))


def _row(mark: str, css: str, *cells: str) -> str:
    tds = "".join(f"<td>{cell}</td>" for cell in cells)
    return f"<tr class='{css}'><td>{mark}</td>{tds}</tr>"


def _pre(diff: str | None) -> str:
    if not diff:
        return ""
    return f"<details><summary>diff</summary><pre>{_e(diff)}</pre></details>"


def _counts(added: int, removed: int, changed: int, unchanged: int) -> str:
    return f"{added} added, {removed} removed, {changed} changed, {unchanged} unchanged"


def _file(entry: FileEntry) -> str:
    size = f" ({size_text(entry.size)})" if entry.kind == "file" else ""
    return _e(entry.path + ("/" if entry.kind == "dir" else "") + size)


def _cell(cell: CellEntry) -> str:
    first = next((line for line in cell.source.splitlines() if line.strip()), "")
    count = f"[{cell.execution_count}] " if cell.execution_count is not None else ""
    return f"cell {cell.index} {_e(cell.cell_type)} {_e(count)}<code>{_e(first[:80])}</code>"


class DiffView:
    """A comparison, displayed: text in a terminal, HTML in JupyterLab."""

    def __init__(self, result: RuntimeDiffResult) -> None:
        self.result = result

    def __repr__(self) -> str:
        return diff_text(self.result)

    def _variables(self) -> str:
        diff = self.result.variables
        if not diff.available:
            return "<p>variables: not available (a side holds none)</p>"
        counts = _counts(len(diff.added), len(diff.removed), len(diff.changed), diff.unchanged)
        rows = [_row("+", "add", _e(variable_text(v))) for v in diff.added]
        rows += [_row("&minus;", "del", _e(variable_text(v))) for v in diff.removed]
        rows += [
            _row("~", "chg", _e(c.name), _e(c.new.type), _e(c.old.summary), "→", _e(c.new.summary))
            for c in diff.changed
        ]
        return f"<p><b>variables</b>: {counts}</p><table>{''.join(rows)}</table>"

    def _files(self) -> str:
        diff = self.result.files
        if not diff.available:
            return "<p>files: not available (a side's workspace cannot be read here)</p>"
        counts = _counts(len(diff.added), len(diff.removed), len(diff.changed), diff.unchanged)
        rows = [_row("+", "add", _file(f)) for f in diff.added]
        rows += [_row("&minus;", "del", _file(f)) for f in diff.removed]
        rows += [_row("~", "chg", _file(c.new) + _pre(c.text_diff)) for c in diff.changed]
        return f"<p><b>files</b>: {counts}</p><table>{''.join(rows)}</table>"

    def _cells(self) -> str:
        diff = self.result.cells
        if not diff.available:
            return "<p>cells: not available (a side holds no notebook document)</p>"
        counts = _counts(len(diff.added), len(diff.removed), len(diff.changed), diff.unchanged)
        rows = [_row("+", "add", _cell(c)) for c in diff.added]
        rows += [_row("&minus;", "del", _cell(c)) for c in diff.removed]
        for change in diff.changed:
            what = ", ".join(
                w
                for w, on in (("source", change.source_diff), ("outputs", change.outputs_changed))
                if on
            )
            rows.append(
                _row(
                    "~",
                    "chg",
                    _cell(change.new) + f" ({_e(what or 'metadata')})" + _pre(change.source_diff),
                )
            )
        return f"<p><b>cells</b>: {counts}</p><table>{''.join(rows)}</table>"

    def _repr_html_(self) -> str:
        result = self.result
        head = f"<p>from <b>{_e(result.from_.label)}</b> to <b>{_e(result.to.label)}</b></p>"
        parts = (self._variables(), self._files(), self._cells())
        return f"{_STYLE}<div class='ditto-diff'>{head}{''.join(parts)}</div>"


class CompareView:
    """A compare of 2 to 8 sides (`%compare`), displayed: the side-by-side table, as text
    in a terminal and preformatted in JupyterLab."""

    def __init__(self, result: RuntimeCompareResult) -> None:
        self.result = result

    def __repr__(self) -> str:
        return compare_text(self.result)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(compare_text(self.result))}</pre>"

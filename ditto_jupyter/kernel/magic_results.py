"""What the listing and sandbox magics return: values whose repr is their display."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ditto_jupyter.backends.base import ExecResult


class TableResult:
    """A listing (runtimes, checkpoints) as text and as an HTML table."""

    def __init__(self, headers: list[str], rows: list[list[str]], data: Any = None) -> None:
        self.headers = headers
        self.rows = rows
        self.data = data

    def __repr__(self) -> str:
        widths = [
            max(len(str(c)) for c in col) for col in zip(self.headers, *self.rows, strict=False)
        ]
        lines = [self.headers, *self.rows]
        return "\n".join(
            "  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
            for line in lines
        )

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        return f"<table class='ditto-table'><tr>{head}</tr>{body}</table>"


class SandboxResult:
    """What %%sandbox returns: the command's exit status (its output is already streamed)."""

    def __init__(self, result: ExecResult) -> None:
        self.result = result

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    def __repr__(self) -> str:
        return "timed out" if self.result.timed_out else f"exit {self.result.exit_code}"

    def _repr_html_(self) -> str:
        rows = [
            ("exit code", str(self.result.exit_code)),
            ("truncated", str(self.result.truncated)),
        ]
        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in rows
        )
        return f"<table class='ditto-result'>{cells}</table>"

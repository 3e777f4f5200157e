"""`TokenBudgetView(budget)`: a token budget's limit, use and records, kept live.

Shows limit, reserved, charged and remaining as a bar, the records grouped by scope (run,
branch, label) with how many of each status, and the latest records. It polls the budget
(`snapshot()` and `record_count()`, two cheap reads) every `poll_interval` seconds and
redraws only when they changed, reading only the records it has not seen yet (a record
never changes once made), so calls made while a cell runs, and calls of other processes
through a `SharedTokenBudget`, show up as they settle.
"""

from __future__ import annotations

import html
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import ipywidgets as widgets

from ditto_jupyter.widgets.polling import Polled, Poller, check_interval
from ditto_jupyter.worker.branch_budget import BranchTokenBudget
from ditto_jupyter.worker.budget.authority import BudgetAuthority
from ditto_jupyter.worker.budget.records import BudgetRecord, BudgetSnapshot

SCOPE_KEYS: Final = ("run_id", "branch_id", "label")
_NO_SCOPE: Final = "(no scope)"


def scope_group(scope: Mapping[str, object]) -> str:
    """The group a record's scope falls in: `run demo / branch b2 / label draft`."""
    parts = [f"{key.removesuffix('_id')} {scope[key]}" for key in SCOPE_KEYS if key in scope]
    return " / ".join(parts) or _NO_SCOPE


@dataclass
class ScopeGroup:
    """The records of one scope group, summed."""

    scope: str
    records: int = 0
    charged: int = 0
    replayed: int = 0
    statuses: Counter[str] = field(default_factory=Counter)

    def status_text(self) -> str:
        """`settled 2, exceeded 1`, most frequent first."""
        return ", ".join(f"{status} {count}" for status, count in self.statuses.most_common())


def group_records(
    records: Sequence[BudgetRecord], groups: dict[str, ScopeGroup] | None = None
) -> list[ScopeGroup]:
    """Records grouped by scope, groups in the order their first record was made; with
    `groups`, the records are added to those (and the dict is updated)."""
    groups = {} if groups is None else groups
    for record in records:
        name = scope_group(record.scope)
        group = groups.setdefault(name, ScopeGroup(name))
        group.records += 1
        group.charged += record.charge
        group.replayed += record.replayed_tokens
        group.statuses[record.status] += 1
    return list(groups.values())


def budget_summary(snapshot: BudgetSnapshot, records: int) -> str:
    """One line of a budget's figures (the view's text/plain)."""
    state = "admission closed" if snapshot.closed else "admitting"
    return (
        f"{snapshot.charged:,} of {snapshot.limit:,} tokens charged, {snapshot.reserved:,} "
        f"reserved, {snapshot.remaining:,} remaining; {count(records, 'record')}; {state}"
    )


def count(number: int, noun: str, plural: str | None = None) -> str:
    """`1 record`, `3 records` (`plural` when adding an s will not do)."""
    return f"{number:,} " + (noun if number == 1 else plural or noun + "s")


def _cell(value: object) -> str:
    return f"<td>{html.escape(str(value))}</td>"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], css: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f"<table class='{css}'><tr>{head}</tr>{body}</table>"


def meter_html(title: str, snapshot: BudgetSnapshot) -> str:
    """The title, admission state, stacked bar (charged, reserved, free) and the figures."""
    limit = max(snapshot.limit, 1)
    used = min(100.0, 100.0 * snapshot.charged / limit)
    held = min(100.0 - used, 100.0 * snapshot.reserved / limit)
    state = (
        f"<span style='color:#b00'>admission closed: "
        f"{html.escape(snapshot.closed_reason or '')}</span>"
        if snapshot.closed
        else "admitting"
    )
    return (
        f"<div class='ditto-budget-meter'><b>{html.escape(title)}</b> &mdash; {state}"
        f"<div role='img' aria-label='{used:.0f}% charged, {held:.0f}% reserved' "
        "style='display:flex;height:0.9em;background:#e5e5e5;margin:4px 0;max-width:36em'>"
        f"<div style='width:{used:.2f}%;background:#d9534f' title='charged'></div>"
        f"<div style='width:{held:.2f}%;background:#f0ad4e' title='reserved'></div></div>"
        f"limit {snapshot.limit:,} &middot; charged {snapshot.charged:,} &middot; reserved "
        f"{snapshot.reserved:,} &middot; remaining {snapshot.remaining:,} &middot; replayed "
        f"{snapshot.replayed:,} (not charged)</div>"
    )


def scopes_html(groups: Sequence[ScopeGroup]) -> str:
    """The records by scope group, or a line saying there are none yet."""
    if not groups:
        return "<i>no records yet</i>"
    rows = [
        [g.scope, g.records, f"{g.charged:,}", f"{g.replayed:,}", g.status_text()] for g in groups
    ]
    return _table(
        ["scope", "records", "charged", "replayed", "statuses"], rows, "ditto-budget-scopes"
    )


def recent_html(records: Sequence[BudgetRecord], count: int) -> str:
    """The latest `count` records, newest first."""
    if not records or count == 0:
        return ""
    rows = [
        [
            r.id,
            r.status,
            f"{r.reservation:,}",
            f"{r.charge:,}",
            f"{r.replayed_tokens:,}",
            scope_group(r.scope),
            r.detail or "",
        ]
        for r in reversed(records[-count:])
    ]
    headers = ["record", "status", "reserved", "charged", "replayed", "scope", "detail"]
    return f"<b>latest records</b>{_table(headers, rows, 'ditto-budget-records')}"


def branches_html(budget: BudgetAuthority) -> str:
    """Each branch of a budget many runtimes draw on, beside the total; empty for one."""
    if not isinstance(budget, BranchTokenBudget):
        return ""
    figures = budget.branch_figures()
    each = budget.each_limit()
    if len(figures) < 2 and each is None and not any(f.refused for f in figures):
        return ""
    rows = [
        [f.branch or "(unrecorded)", f"{f.reserved:,}", f"{f.charged:,}", f"{f.refused:,}"]
        for f in figures
    ]
    cap = f"each at most {each:,} tokens" if each else "no cap per branch"
    table = _table(["branch", "reserved", "charged", "refused"], rows, "ditto-budget-branches")
    return f"<b>branches</b> ({cap}){table}"


class TokenBudgetView(Polled, widgets.VBox):  # type: ignore[misc]  # ipywidgets is untyped
    """A live view of a token budget (`TokenBudget` or `SharedTokenBudget`)."""

    def __init__(
        self,
        budget: BudgetAuthority,
        *,
        title: str | None = None,
        poll_interval: float | None = 1.0,
        recent: int = 10,
        **kwargs: Any,
    ) -> None:
        if not isinstance(budget, BudgetAuthority):
            raise TypeError(f"TokenBudgetView needs a token budget, not {type(budget).__name__}")
        interval = check_interval(poll_interval)
        if isinstance(recent, bool) or not isinstance(recent, int) or recent < 0:
            raise ValueError(f"recent must be a number of records (0 or more), not {recent!r}")
        self.budget = budget
        self.title = title or type(budget).__name__
        self.recent = recent
        self.snapshot: BudgetSnapshot | None = None
        self.records: list[BudgetRecord] = []
        self.groups: list[ScopeGroup] = []
        self._groups_by_scope: dict[str, ScopeGroup] = {}
        self.error: str | None = None
        self._fingerprint: tuple[BudgetSnapshot, int, int] | None = None
        self._lock = threading.Lock()
        self._meter = widgets.HTML()
        self._scopes = widgets.HTML()
        self._latest = widgets.HTML()
        self._branches = widgets.HTML()
        super().__init__([self._meter, self._branches, self._scopes, self._latest], **kwargs)
        self.add_class("ditto-token-budget-view")
        self.refresh()
        self._poller = (
            None if interval is None else Poller(self.refresh, interval, "ditto-budget-view")
        )

    def refresh(self) -> bool:
        """Read the budget and redraw if it changed; True when it did. Never raises: a
        budget that cannot be read is shown as such."""
        with self._lock:
            try:
                refused = (
                    self.budget.refusal_count() if isinstance(self.budget, BranchTokenBudget) else 0
                )
                fingerprint = (self.budget.snapshot(), self.budget.record_count(), refused)
                if fingerprint == self._fingerprint and self.error is None:
                    return False
                if fingerprint[1] < len(self.records):  # fewer records: not the same ledger
                    self.records, self._groups_by_scope = [], {}
                new = self.budget.records_since(len(self.records))  # records never change
            except Exception as error:  # a deleted file, a locked database: say so, keep going
                self.error = f"{type(error).__name__}: {error}"
                self._meter.value = (
                    f"<b>{html.escape(self.title)}</b> &mdash; cannot read the budget: "
                    f"{html.escape(self.error)}"
                )
                self._fingerprint = None
                return True
            self.error = None
            self._fingerprint = fingerprint
            self.snapshot = fingerprint[0]
            self.records.extend(new)
            self.groups = group_records(new, self._groups_by_scope)
            self._meter.value = meter_html(self.title, fingerprint[0])
            self._scopes.value = scopes_html(self.groups)
            self._latest.value = recent_html(self.records, self.recent)
            self._branches.value = branches_html(self.budget)
            return True

    def close(self) -> None:
        """Stop polling and close the widget and its parts."""
        self.stop_polling()
        for name in (
            "_meter",
            "_branches",
            "_scopes",
            "_latest",
        ):  # absent when __init__ refused its input
            part = getattr(self, name, None)
            if part is not None:
                part.close()
        super().close()

    def __repr__(self) -> str:
        if self.error is not None or self.snapshot is None:
            return f"TokenBudgetView: cannot read the budget ({self.error})"
        return f"TokenBudgetView: {budget_summary(self.snapshot, len(self.records))}"

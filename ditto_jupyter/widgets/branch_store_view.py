"""`BranchStoreView(store)`: a BranchStore's namespaces and open branches, with actions.

Shows the store's revision and namespaces (each value in short), then every open branch
(`store.open_branches()`): what it was forked from and at which revision, its write set,
and whether committing it now would conflict, with a Commit and a Discard button. A
refused commit is shown as the conflict it is: the revision the branch expected and the
one the parent is at. The view polls the store every `poll_interval` seconds and redraws
when the revision or the open branches changed.
"""

from __future__ import annotations

import html
import json
import threading
from typing import Any, Final

import ipywidgets as widgets

from ditto_jupyter.widgets.polling import Polled, Poller, check_interval
from ditto_jupyter.widgets.token_budget_view import count
from ditto_jupyter.worker.branch_store import Branch, BranchStore
from ditto_jupyter.worker.errors import BranchConflictError, BranchError

PREVIEW_CHARS: Final = 60

# What a redraw depends on: the store's revision, and each open branch's serial, revision
# and parent revision (a parent that moved makes the branch stale).
Fingerprint = tuple[int, tuple[tuple[int, int, int], ...]]


def value_preview(value: object, limit: int = PREVIEW_CHARS) -> str:
    """A value as compact JSON, cut to `limit` characters."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def branch_label(branch: Branch) -> str:
    """`branch #2`, the name the view gives a branch."""
    return f"branch #{branch.serial}"


def branch_origin(branch: Branch) -> str:
    """What a branch was forked from, and at which revision."""
    parent = branch.parent
    source = "the store" if isinstance(parent, BranchStore) else branch_label(parent)
    return f"of {source} at revision {branch.base_revision}"


def branch_is_stale(branch: Branch) -> bool:
    """True when the parent moved since the fork, so a commit would be refused."""
    return branch.parent.revision != branch.base_revision


class BranchStoreView(Polled, widgets.VBox):  # type: ignore[misc]  # ipywidgets is untyped
    """A live view of a BranchStore with Commit and Discard buttons for its open branches."""

    def __init__(
        self, store: BranchStore, *, poll_interval: float | None = 1.0, **kwargs: Any
    ) -> None:
        if not isinstance(store, BranchStore):
            raise TypeError(f"BranchStoreView needs a BranchStore, not {type(store).__name__}")
        interval = check_interval(poll_interval)
        self.store = store
        self.message = ""  # the outcome of the last button press
        self.summary = ""  # one line about what the view shows (its text/plain)
        self.last_conflict: BranchConflictError | None = None
        self._fingerprint: Fingerprint | None = None
        self._lock = threading.RLock()
        self._header = widgets.HTML()
        self._namespaces = widgets.HTML()
        self._branches = widgets.VBox()
        self._status = widgets.HTML()
        self.buttons: dict[tuple[int, str], widgets.Button] = {}
        self._rows: dict[int, widgets.HBox] = {}
        super().__init__([self._header, self._namespaces, self._branches, self._status], **kwargs)
        self.add_class("ditto-branch-store-view")
        self.refresh()
        self._poller = (
            None if interval is None else Poller(self.refresh, interval, "ditto-branch-view")
        )

    # ---- reading the store -----------------------------------------------------------

    def _fingerprint_now(self) -> Fingerprint:
        return (
            self.store.revision,
            tuple((b.serial, b.revision, b.parent.revision) for b in self.store.open_branches()),
        )

    def refresh(self, *, force: bool = False) -> bool:
        """Redraw when the store or its open branches changed; True when it did."""
        with self._lock:
            fingerprint = self._fingerprint_now()
            if fingerprint == self._fingerprint and not force:
                return False
            self._fingerprint = fingerprint
            self.summary = self._summary()
            self._header.value = self._header_html()
            self._namespaces.value = self._namespaces_html()
            self._draw_branches()
            return True

    def _header_html(self) -> str:
        store = self.store
        return (
            f"<b>BranchStore {html.escape(repr(store.store_id))}</b> at revision "
            f"{store.revision}: {count(len(store), 'namespace')}, "
            f"{count(len(store.open_branches()), 'open branch', 'open branches')}"
        )

    def _namespaces_html(self) -> str:
        names = self.store.namespaces()
        if not names:
            return "<i>no namespaces yet</i>"
        rows = "".join(
            f"<tr><td>{html.escape(name)}</td>"
            f"<td><code>{html.escape(value_preview(self.store.get(name)))}</code></td></tr>"
            for name in names
        )
        return (
            "<table class='ditto-branch-namespaces'><tr><th>namespace</th><th>value</th></tr>"
            f"{rows}</table>"
        )

    def branch_line(self, branch: Branch) -> str:
        """One line about an open branch: origin, write set, and whether it is stale."""
        written = ", ".join(sorted(branch.written)) or "nothing yet"
        line = f"{branch_label(branch)} {branch_origin(branch)}; writes: {written}"
        if branch_is_stale(branch):
            line += (
                f"; stale: its parent is at revision {branch.parent.revision}, "
                "so a commit would be refused"
            )
        return line

    def _draw_branches(self) -> None:
        """One row per open branch; a branch's row (and its buttons) lives as long as it is
        open, so a front end's click always reaches the button it was shown."""
        rows: dict[int, widgets.HBox] = {}
        for branch in self.store.open_branches():
            row = self._rows.pop(branch.serial, None)
            if row is None:
                label = widgets.HTML()
                commit = self._button(branch, "Commit", self.commit)
                discard = self._button(branch, "Discard", self.discard)
                row = widgets.HBox([label, commit, discard])
            row.children[0].value = html.escape(self.branch_line(branch))
            rows[branch.serial] = row
        for gone in self._rows.values():  # committed, discarded or forgotten branches
            self._close_row(gone)
        self._rows = rows
        self.buttons = {key: button for key, button in self.buttons.items() if key[0] in rows}
        self._branches.children = list(rows.values())

    @staticmethod
    def _close_row(row: widgets.HBox) -> None:
        for part in row.children:
            part.close()
        row.close()

    def _button(self, branch: Branch, action: str, run: Any) -> widgets.Button:
        button = widgets.Button(
            description=action,
            tooltip=f"{action} {branch_label(branch)}",
            button_style="success" if action == "Commit" else "",
        )
        button.on_click(lambda _button: run(branch))
        self.buttons[(branch.serial, action.lower())] = button
        return button

    # ---- the buttons' actions --------------------------------------------------------

    def _report(self, text: str, *, conflict: BranchConflictError | None = None) -> None:
        self.message, self.last_conflict = text, conflict
        colour = "#b00" if conflict is not None else "inherit"
        self._status.value = f"<span style='color:{colour}'>{html.escape(text)}</span>"

    def commit(self, branch: Branch) -> int | None:
        """Commit a branch (the Commit button); the parent's new revision, or None when the
        commit was refused (the view then shows why)."""
        with self._lock:
            try:
                revision = branch.commit()
            except BranchConflictError as conflict:
                self._report(
                    f"commit of {branch_label(branch)} refused: it expected revision "
                    f"{conflict.expected_revision}, the parent is at revision "
                    f"{conflict.actual_revision}; not committed: "
                    f"{', '.join(conflict.namespaces) or 'nothing'}",
                    conflict=conflict,
                )
                self.refresh(force=True)
                return None
            except BranchError as error:
                self._report(f"commit of {branch_label(branch)} refused: {error}")
                self.refresh(force=True)
                return None
            self._report(f"committed {branch_label(branch)}: revision {revision}")
            self.refresh(force=True)
            return revision

    def discard(self, branch: Branch) -> None:
        """Discard a branch (the Discard button)."""
        with self._lock:
            try:
                branch.discard()
            except BranchError as error:
                self._report(f"discard of {branch_label(branch)} refused: {error}")
            else:
                self._report(f"discarded {branch_label(branch)}")
            self.refresh(force=True)

    # ---- lifetime and summary --------------------------------------------------------

    def close(self) -> None:
        """Stop polling and close the widget and its parts."""
        self.stop_polling()
        for row in getattr(self, "_rows", {}).values():  # absent when __init__ refused input
            self._close_row(row)
        for name in ("_header", "_namespaces", "_branches", "_status"):
            part = getattr(self, name, None)
            if part is not None:
                part.close()
        super().close()

    def __repr__(self) -> str:
        return self.summary

    def _summary(self) -> str:
        store = self.store
        branches = store.open_branches()
        stale = sum(branch_is_stale(branch) for branch in branches)
        open_branches = count(len(branches), "open branch", "open branches")
        text = (
            f"BranchStoreView: {store.store_id!r} at revision {store.revision}, "
            f"{count(len(store), 'namespace')}, {open_branches}"
        )
        return text + (f" ({stale} stale)" if stale else "")

"""`CheckpointTree`: a runtime's checkpoints and the runtimes checked out from them, live.

An ipywidgets `DOMWidget` whose view is part of the JupyterLab extension (labextension/,
`src/widgets/`): the extension registers the view with ipywidgets' widget registry, and
the view draws with the same tree code as the Runtimes side panel (`src/tree/`), so there
is one tree component. ipywidgets rather than anywidget because anywidget would need the
tree code bundled a second time as an ES module; the price is that the view renders only
where the extension is installed (JupyterLab, Notebook 7), elsewhere the one-line
`text/plain` summary shows.

The kernel side reads the tree through this kernel's runtime control (`this_kernel`: the
REST client under a server, the in-process RuntimeService without one), through the
control's protocol alone, and polls it on a timer thread
(`polling.Poller`): the kernel has no subscription to the server's events, and polling
also sees checkpoints made by the kernel's own cells (%checkpoint, %autocheckpoint) while
they run. Clicking a node sends `{"action": "restore" | "checkout", "checkpoint_id"}`;
restore runs the `%restore` magic (in place, this kernel's own runtime only), checkout the
control's checkout, and the outcome line is shown under the tree.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, Final

import ipywidgets as widgets
import traitlets

from ditto_jupyter.core.errors import DittoError
from ditto_jupyter.core.models import CheckpointSummary
from ditto_jupyter.kernel import this_kernel
from ditto_jupyter.kernel.runtime_control import RuntimeControl
from ditto_jupyter.widgets.polling import Polled, Poller, check_interval

#: The JupyterLab extension's npm package, which holds the view.
VIEW_MODULE: Final = "ditto-jupyter"
VIEW_MODULE_VERSION: Final = "^0.1.0"
#: Characters of a cell's source kept per automatic checkpoint (a tooltip, not the cell).
SOURCE_PREVIEW: Final = 200
#: Runtimes drawn at most (the runtime and the branches reached from it).
MAX_RUNTIMES: Final = 50


def node_of(summary: CheckpointSummary) -> dict[str, Any]:
    """One checkpoint as the view draws it (automatic ones carry their cell)."""
    auto = summary.automatic
    cell = None
    if auto is not None:
        cell = {
            "execution_count": auto.execution_count,
            "failed": auto.failed,
            "source": auto.source[:SOURCE_PREVIEW],
        }
    return {
        "id": summary.checkpoint_id,
        "parent": summary.parent_checkpoint_id,
        "runtime_id": summary.runtime_id,
        "name": summary.name,
        "time": summary.created_at_ms,
        "auto": cell,
        "unrestorable": [v.name for v in summary.unrestorable],
    }


def lineage_of(control: RuntimeControl, runtime_id: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The runtime's head checkpoint id and the checkouts made from it, as the view draws them."""
    lineage = control.lineage(runtime_id)
    return lineage.head_checkpoint_id, [asdict(checkout) for checkout in lineage.checkouts]


def _shell() -> Any:
    """The running IPython (ValueError outside one: the tree restores through its magics)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise ValueError("CheckpointTree runs in an IPython kernel")
    return shell


def control_of_this_kernel() -> RuntimeControl:
    """This kernel's runtime control, loading `%load_ext ditto_jupyter` if needed."""
    if this_kernel.installed() is None:
        _shell().extension_manager.load_extension("ditto_jupyter")
    return this_kernel.control()


class CheckpointTree(Polled, widgets.DOMWidget):  # type: ignore[misc]
    """The checkpoint tree of `runtime` (default: this kernel's) and its branches, live."""

    _model_name = traitlets.Unicode("CheckpointTreeModel").tag(sync=True)
    _model_module = traitlets.Unicode(VIEW_MODULE).tag(sync=True)
    _model_module_version = traitlets.Unicode(VIEW_MODULE_VERSION).tag(sync=True)
    _view_name = traitlets.Unicode("CheckpointTreeView").tag(sync=True)
    _view_module = traitlets.Unicode(VIEW_MODULE).tag(sync=True)
    _view_module_version = traitlets.Unicode(VIEW_MODULE_VERSION).tag(sync=True)

    runtime_id = traitlets.Unicode().tag(sync=True)
    #: The tree is this kernel's own runtime: restore in place is offered.
    restorable = traitlets.Bool(False).tag(sync=True)
    head_id = traitlets.Unicode(None, allow_none=True).tag(sync=True)
    nodes = traitlets.List(traitlets.Dict()).tag(sync=True)
    branches = traitlets.List(traitlets.Dict()).tag(sync=True)
    #: The last action's outcome (or why the tree cannot be read), one line.
    message = traitlets.Unicode("").tag(sync=True)
    message_is_error = traitlets.Bool(False).tag(sync=True)
    busy = traitlets.Bool(False).tag(sync=True)

    def __init__(
        self,
        runtime: str | None = None,
        *,
        poll_interval: float | None = 2.0,
        **kwargs: Any,
    ) -> None:
        interval = check_interval(poll_interval)
        if runtime is not None and (not isinstance(runtime, str) or not runtime.strip()):
            raise ValueError(f"runtime must be a runtime id, not {runtime!r}")
        self._control = control_of_this_kernel()
        self._lock = threading.Lock()
        self._poller: Poller | None = None
        own = self._control.runtime_id
        super().__init__(runtime_id=runtime or own, restorable=(runtime or own) == own, **kwargs)
        self._read()  # an unknown runtime raises here, before anything is shown
        self.on_msg(self._on_view_message)
        if interval is not None:
            self._poller = Poller(self.refresh, interval, "ditto-checkpoint-tree")

    # ---- reading --------------------------------------------------------------------------

    def _read(self) -> None:
        """Read the runtime and its branches (recursively) into the synced traits."""
        nodes: list[dict[str, Any]] = []
        branches: list[dict[str, Any]] = []
        head: str | None = None
        pending, seen = [self.runtime_id], set[str]()
        while pending and len(seen) < MAX_RUNTIMES:
            runtime_id = pending.pop(0)
            if runtime_id in seen:
                continue
            seen.add(runtime_id)
            nodes.extend(node_of(c) for c in self._control.checkpoints(runtime_id))
            runtime_head, checkouts = lineage_of(self._control, runtime_id)
            if runtime_id == self.runtime_id:
                head = runtime_head
            branches.extend(checkouts)
            pending.extend(c["runtime_id"] for c in checkouts)
        with self.hold_sync():
            self.nodes, self.branches, self.head_id = nodes, branches, head

    def refresh(self) -> bool:
        """Read the tree again; True when it could. Never raises (the poller calls it):
        a tree that cannot be read says why in `message`."""
        with self._lock:
            try:
                self._read()
            except Exception as error:  # a server gone, a closed store: say so, keep going
                self._say(f"cannot read the tree: {error}", error=True)
                return False
            return True

    # ---- actions from the view ------------------------------------------------------------

    def _on_view_message(self, _widget: Any, content: Any, _buffers: Sequence[Any]) -> None:
        action = content.get("action") if isinstance(content, dict) else None
        checkpoint_id = content.get("checkpoint_id") if isinstance(content, dict) else None
        if action not in ("restore", "checkout") or not isinstance(checkpoint_id, str):
            self._say(f"unknown request from the view: {content!r}", error=True)
            return
        if action == "restore":
            self.restore(checkpoint_id)
        else:
            self.checkout(checkpoint_id)

    def _node(self, checkpoint_id: str) -> dict[str, Any] | None:
        return next((n for n in self.nodes if n["id"] == checkpoint_id), None)

    def restore(self, checkpoint_id: str) -> None:
        """Roll this kernel back to one of its own checkpoints (what `%restore` does)."""
        node = self._node(checkpoint_id)
        if node is None:
            self._say(f"checkpoint {checkpoint_id[:12]!r} is not in this tree", error=True)
            return
        if node["runtime_id"] != self._control.runtime_id:
            self._say(
                "restore in place takes this kernel's own checkpoints; check this one out",
                error=True,
            )
            return
        shell = _shell()
        self._run(lambda: shell.run_line_magic("restore", checkpoint_id))

    def checkout(self, checkpoint_id: str) -> None:
        """Branch a new runtime from a checkpoint of the tree (what `%checkout` does)."""
        if self._node(checkpoint_id) is None:
            self._say(f"checkpoint {checkpoint_id[:12]!r} is not in this tree", error=True)
            return

        def run() -> None:
            try:
                result = self._control.checkout(checkpoint_id, None, None)
            except DittoError as error:
                print(f"ditto: {error.code}: {error.message}", file=sys.stderr)
                return
            where = f"; notebook {result.notebook_path}" if result.notebook_path else ""
            print(
                f"checked out {checkpoint_id[:12]} into runtime {result.runtime.runtime_id}{where}"
            )

        self._run(run)

    def _run(self, action: Callable[[], object]) -> None:
        """Run an action, show its one printed line (stderr: an error), then redraw."""
        out, err = io.StringIO(), io.StringIO()
        self.busy = True
        try:
            with self._lock, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                action()
        finally:
            self.busy = False
        failed = err.getvalue().strip()
        lines = (failed or out.getvalue().strip()).splitlines()
        self._say(lines[-1] if lines else "", error=bool(failed))
        self.refresh()

    def _say(self, text: str, *, error: bool) -> None:
        with self.hold_sync():
            self.message, self.message_is_error = text, error

    # ---- life -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop polling and close the widget."""
        self.stop_polling()
        super().close()

    def __repr__(self) -> str:
        """One line, within the 110 characters ipywidgets shows as text/plain."""
        own = [n for n in self.nodes if n["runtime_id"] == self.runtime_id]
        automatic = sum(1 for n in own if n["auto"] is not None)
        head = self._node(self.head_id) if self.head_id else None
        head_text = "no head yet" if head is None else f"head {head['id'][:12]}"
        if head is not None and head["name"]:
            name = head["name"] if len(head["name"]) <= 20 else head["name"][:19] + "…"
            head_text += f" {name!r}"
        branches = len({b["runtime_id"] for b in self.branches})
        counts = (
            f"{len(own)} checkpoint"
            + ("" if len(own) == 1 else "s")
            + (f" ({automatic} automatic)" if automatic else "")
        )
        branch_text = f"{branches} branch" + ("" if branches == 1 else "es")
        return f"CheckpointTree {self.runtime_id[:12]}: {counts}, {branch_text}, {head_text}"

"""IPython magics: %checkpoint, %restore, %checkout, %pause, %resume, %runtimes,
%checkpoints, %autocheckpoint and %%sandbox (%diff, %compare, %undo: `history_magics`).

Thin over `RuntimeControl` (the server's REST API, or an in-process RuntimeService when
no server started this kernel). The kernel captures and restores its own namespace here,
because it is busy running the magic and nobody else can.

Each result is shown once, following IPython's convention that a magic either prints or
returns a value with a rich repr, never both:
- the actions (%checkpoint, %restore, %checkout, %pause, %resume) print one line and
  return None, so the line shows wherever the magic sits in a cell;
- the listings (%runtimes, %checkpoints) print nothing and return a `TableResult` (text
  and HTML table), displayed when the magic ends the cell or kept with `rows = %runtimes`;
- %%sandbox streams the command's own stdout and stderr and returns a `SandboxResult`
  whose repr is the exit status (`exit 0`, `timed out`);
- %autocheckpoint on/off/(state) prints one line (the hook is `autocheckpoint`);
- %budget LIMIT prints one line; %budget returns the live TokenBudgetView (made by the
  `budget_view` the extension was loaded with: widgets are a layer above this one) and
  %budget --history a `TableResult` of the records.
An expected error prints one line to stderr (`ditto: Code: message`) and returns None,
never a traceback.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from ditto_jupyter.core.environment import CONVERSATION_ID_ENV
from ditto_jupyter.core.errors import DittoError, InvalidRequest
from ditto_jupyter.kernel import pause_fence
from ditto_jupyter.kernel.autocheckpoint import DEFAULT_KEEP, AutoCheckpointer
from ditto_jupyter.kernel.control_choice import control_from_environment
from ditto_jupyter.kernel.history_magics import HistoryMagics
from ditto_jupyter.kernel.magic_results import SandboxResult, TableResult
from ditto_jupyter.kernel.this_kernel import KernelControl, install

# Loading the magics imports only the modules above, all light: every kernel a server
# starts loads them. The capture, the models, the budgets and the runtime control are
# imported by the magic that first needs them.
if TYPE_CHECKING:
    from ditto_jupyter.control.budget_registry import RuntimeBudget
    from ditto_jupyter.core.models import (
        CheckedOutRuntime,
        CheckpointSummary,
        ContextCapture,
        RuntimeRecord,
        UnrestorableValue,
    )
    from ditto_jupyter.kernel.runtime_control import RuntimeControl
    from ditto_jupyter.worker.shared_budget import SharedTokenBudget

T = TypeVar("T")
MagicMethod = TypeVar("MagicMethod", bound=Callable[..., Any])
#: Makes the live view `%budget` shows: (the budget, its title) -> a widget.
BudgetViewFactory = Callable[["SharedTokenBudget", str], Any]


class _MagicDecorator(Protocol):
    """A decorator that hands back the magic it was given."""

    def __call__(self, magic: MagicMethod, /) -> MagicMethod: ...


# IPython's magic_arguments module has no annotations (IPython is only partly typed);
# these are the real signatures of its two decorator factories, which return the
# decorated function itself after attaching an argparse parser to it.
_with_arguments = cast(Callable[[], _MagicDecorator], magic_arguments)
_argument = cast(Callable[..., _MagicDecorator], argument)

#: What every `%checkpoint` line says a checkpoint holds, and what it does not.
CHECKPOINT_HOLDS = "variables + workspace (not the notebook's folder)"


def human_bytes(count: int) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def unrestorable_line(values: Sequence[UnrestorableValue]) -> str:
    """'not kept: gen (generator: ...), f (TextIOWrapper: ...)' or ''."""
    if not values:
        return ""
    return "not kept: " + ", ".join(f"{v.name} ({v.type}: {v.reason})" for v in values)


def parse_metadata(pairs: Sequence[str] | None) -> dict[str, str] | None:
    """['owner=ana', 'note=a b'] -> {'owner': 'ana', 'note': 'a b'} (the CLI's parser)."""
    from ditto_jupyter.client import CliError
    from ditto_jupyter.client import parse_metadata as parse

    try:
        return parse(pairs)
    except CliError as error:
        raise InvalidRequest(str(error)) from None


def parse_keep(text: str | None) -> int:
    """`--keep N`: a whole number of at least 1 (default `DEFAULT_KEEP`)."""
    if text is None:
        return DEFAULT_KEEP
    try:
        keep = int(text)
    except ValueError:
        keep = 0
    if keep < 1:
        raise InvalidRequest(f"--keep takes a whole number of at least 1, not {text!r}")
    return keep


def cell_line(checkpoint: CheckpointSummary, width: int = 40) -> str:
    """An automatic checkpoint's cell: its source's first line, shortened ('' otherwise)."""
    auto = checkpoint.automatic
    if auto is None:
        return ""
    lines = [text.strip() for text in auto.source.splitlines() if text.strip()]
    first = lines[0] if lines else ""
    more = len(lines) > 1
    if len(first) > width:
        first, more = first[: width - 1], True
    text = first + ("…" if more else "")
    marks = [" (failed)" if auto.failed else "", " (pruned)" if checkpoint.pruned else ""]
    return text + "".join(marks)


def _split(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as error:
        raise InvalidRequest(f"cannot parse the arguments: {error}") from None


def _short(identifier: str) -> str:
    return identifier[:12]


@magics_class
class DittoMagics(Magics):
    """The ditto-jupyter magics of one kernel; they install its `KernelControl`
    (`this_kernel`, which the widgets and helpers ask too)."""

    def __init__(
        self,
        shell: InteractiveShell,
        control_factory: Callable[[], RuntimeControl] | None = None,
        budget_view: BudgetViewFactory | None = None,
    ) -> None:
        super().__init__(shell)
        self._control_factory = control_factory  # None: from the environment
        self.kernel_control = KernelControl(self._make_control)
        install(self.kernel_control)
        self._budget_view_factory = budget_view
        self._budget_views: dict[str, Any] = {}  # one live view per budget, shown again
        self.autocheckpointer = AutoCheckpointer(self, shell)
        self.kernel_control.on_restore.append(self.autocheckpointer.restored_elsewhere)
        self.kernel_control.autocheckpoint_keep = self.autocheckpointer.setting
        self.kernel_control.unrecorded_cell = self.autocheckpointer.unrecorded_cell

    # ---- plumbing -----------------------------------------------------------------------

    def _make_control(self, kernel_control: KernelControl) -> RuntimeControl:
        if self._control_factory is not None:
            return self._control_factory()
        assert self.shell is not None
        conversation = os.environ.get(CONVERSATION_ID_ENV) or str(
            self.shell.user_ns.get("__session__") or "ipython"
        )
        return control_from_environment(
            self.shell.user_ns, conversation, notebook_folder=kernel_control.notebook_folder
        )

    @property
    def control(self) -> RuntimeControl:
        """The runtime control, created on first use (loading the extension is free)."""
        return self.kernel_control.control

    @property
    def notebook_folder(self) -> Path:
        """Where the runtime's kernels run without a server (see `KernelControl`)."""
        return self.kernel_control.notebook_folder

    @property
    def last_manifest(self) -> str | None:
        """The namespace manifest of this kernel's head, as far as this kernel knows."""
        return self.kernel_control.last_manifest

    @last_manifest.setter
    def last_manifest(self, manifest_id: str | None) -> None:
        self.kernel_control.last_manifest = manifest_id

    @property
    def namespace(self) -> dict[str, Any]:
        assert self.shell is not None
        namespace: dict[str, Any] = self.shell.user_ns  # IPython leaves the getter unannotated
        return namespace

    def _guard(self, action: Callable[[], T]) -> T | None:
        """Run a magic body; expected errors print one line and return None.

        Automatic checkpoints still being written are recorded first, so every magic sees
        them (and a restore or checkout never races one)."""
        self.autocheckpointer.flush()
        try:
            return action()
        except DittoError as error:
            print(f"ditto: {error.code}: {error.message}", file=sys.stderr)
        return None

    def guard(self, action: Callable[[], T]) -> T | None:
        """Run the body of a magic of another topic (`history_magics`) as `_guard` does."""
        return self._guard(action)

    def _args(self, magic: Callable[..., Any], line: str) -> argparse.Namespace:
        # `parser` is attached to the function at runtime by IPython's @magic_arguments.
        parser: argparse.ArgumentParser = magic.parser  # type: ignore[attr-defined]
        try:  # POSIX shell quoting: "a name with spaces" arrives without its quotes
            return parser.parse_args(_split(line))
        except UsageError as error:  # one line, not a traceback
            raise InvalidRequest(str(error).splitlines()[-1]) from None

    def _capture_for(self, control: RuntimeControl) -> Callable[[bool], ContextCapture]:
        """This kernel's capture for `control`'s runtime: after its last one, or whole."""
        from ditto_jupyter.kernel.capture import open_blob_store
        from ditto_jupyter.kernel.capture.kernel_entry import capture_following, collection_paused

        blobs = open_blob_store(control.blob_root)

        def take(whole: bool) -> ContextCapture:
            with collection_paused():
                return capture_following(
                    self.namespace,
                    blobs,
                    previous_manifest_id=self.last_manifest,
                    runtime_id=control.runtime_id,
                    whole=whole,
                )

        return take

    # ---- magics -------------------------------------------------------------------------

    @_with_arguments()
    @_argument("name", nargs="?", help="a name for the checkpoint (unique names are handy)")
    @_argument("-m", "--metadata", action="append", metavar="KEY=VALUE", help="metadata")
    @line_magic
    def checkpoint(self, line: str = "") -> None:
        """Checkpoint this kernel: its variables, its workspace, its session. Prints a line.

        The line says what the checkpoint holds (the variables and the workspace) and what
        it does not (the notebook's folder, where the kernel runs), and every byte it
        wrote: blobs and both databases (a server older than this counted blobs only).
        """

        def run() -> None:
            from ditto_jupyter.kernel.capture_again import record_own_capture

            args = self._args(DittoMagics.checkpoint, line)
            metadata = parse_metadata(args.metadata)
            started = time.perf_counter()
            control = self.control
            capture, result = record_own_capture(
                self._capture_for(control),
                lambda capture: control.checkpoint(capture, args.name, metadata),
            )
            self.last_manifest = capture.manifest_id
            elapsed = time.perf_counter() - started
            label = f" {args.name!r}" if args.name else ""
            text = (
                f"checkpoint {_short(result.checkpoint_id)}{label} of runtime "
                f"{_short(result.runtime.runtime_id)}: {CHECKPOINT_HOLDS}, "
                f"{human_bytes(result.bytes_written or capture.bytes_written)} written in "
                f"{elapsed * 1000:.0f} ms"
            )
            lost = unrestorable_line(capture.unrestorable)
            print(text + (f"; {lost}" if lost else ""))

        self._guard(run)

    @_with_arguments()
    @_argument("checkpoint", help="checkpoint id, unique id prefix, or name in this runtime")
    @line_magic
    def restore(self, line: str = "") -> None:
        """Roll this kernel back to a checkpoint, in place. Prints a line."""

        def run() -> None:
            from ditto_jupyter.kernel.capture import open_blob_store, restore_namespace

            args = self._args(DittoMagics.restore, line)
            started = time.perf_counter()
            control = self.control
            checkpoint = control.resolve(args.checkpoint)
            if checkpoint.runtime_id != control.runtime_id:  # refused before it is touched
                raise InvalidRequest(
                    f"checkpoint {_short(checkpoint.checkpoint_id)} belongs to runtime "
                    f"{checkpoint.runtime_id}: check it out instead (%checkout)"
                )
            if checkpoint.pruned:  # refused before the namespace is touched
                raise InvalidRequest(
                    f"checkpoint {_short(checkpoint.checkpoint_id)} ({checkpoint.name}) was "
                    "pruned by %autocheckpoint --keep: its variables are gone"
                )
            lost = restore_namespace(
                self.namespace, open_blob_store(control.blob_root), checkpoint.context_manifest_id
            )
            control.record_restore(checkpoint.checkpoint_id)
            self.last_manifest = checkpoint.context_manifest_id
            elapsed = time.perf_counter() - started
            label = f" {checkpoint.name!r}" if checkpoint.name else ""
            text = f"restored {_short(checkpoint.checkpoint_id)}{label} in {elapsed * 1000:.0f} ms"
            lost_text = unrestorable_line(lost or checkpoint.unrestorable)
            print(text + (f"; {lost_text}" if lost_text else ""))

        self._guard(run)

    @_with_arguments()
    @_argument("checkpoint", help="checkpoint id, unique id prefix, or name in this runtime")
    @_argument("--conversation", help="notebook path / conversation id of the new runtime")
    @_argument("--sender", help="user of the new runtime")
    @_argument("--count", type=int, default=1, help="how many children, 1 to 20 (default 1)")
    @_argument(
        "--each", help="first cap each branch of this budget at N tokens (as %%budget --each)"
    )
    @line_magic
    def checkout(self, line: str = "") -> None:
        """Branch NEW runtimes (new kernel, workspace copy) from a checkpoint: one, or
        `--count N` at once. Prints a line per child."""

        def run() -> None:
            args = self._args(DittoMagics.checkout, line)
            started = time.perf_counter()
            control = self.control
            checkpoint = control.resolve(args.checkpoint)
            if args.each is not None:  # on the budget, read at every reservation
                from ditto_jupyter.kernel.runtime_budget import each_line, set_each

                print(each_line(set_each(control.runtime_id, args.each)))
            result = control.checkout(
                checkpoint.checkpoint_id, args.conversation, args.sender, args.count
            )
            elapsed = time.perf_counter() - started
            short = _short(checkpoint.checkpoint_id)
            if args.count == 1:
                print(
                    f"checked out {short} into {self._child_line(result, f' in {elapsed:.2f} s')}"
                )
                return
            made = sum(1 for child in result.children if child.checkout is not None)
            print(f"checked out {short} into {made} of {args.count} runtimes in {elapsed:.2f} s")
            for child in result.children:
                if child.checkout is None:
                    print(f"  [{child.index}] failed: {child.error}: {child.message}")
                else:
                    print(f"  [{child.index}] {self._child_line(child.checkout)}")

        self._guard(run)

    def _child_line(self, result: CheckedOutRuntime, timing: str = "") -> str:
        """`runtime R<timing>; notebook N; ...`: one checkout child as a magic prints it."""
        text = f"runtime {result.runtime.runtime_id}{timing}"
        hint = self.control.connection_hint(result.kernel_id)
        extra = [f"notebook {result.notebook_path}"] if result.notebook_path else []
        lost = unrestorable_line(result.unrestorable)
        extra += [e for e in (result.notebook_note, hint and f"connect: {hint}", lost) if e]
        return "; ".join([text, *extra])

    @_with_arguments()
    @_argument("name", nargs="?", help="a name for the pause checkpoint")
    @line_magic
    def pause(self, line: str = "") -> None:
        """Checkpoint this kernel and stop it when this cell ends; resume it by id later.

        Prints a line.
        """

        def run() -> None:
            from ditto_jupyter.kernel.capture_again import record_own_capture

            args = self._args(DittoMagics.pause, line)
            control = self.control
            capture, result = record_own_capture(
                self._capture_for(control),
                lambda capture: control.pause_self(capture, args.name),
            )
            self.last_manifest = capture.manifest_id
            self.autocheckpointer.turn_off()  # the runtime is paused: nothing more to record
            pause_fence.seal_now(result.runtime.runtime_id)  # cells queued after this: refused
            rid = result.runtime.runtime_id
            text = (
                f"paused runtime {rid} at checkpoint {_short(result.checkpoint_id)} "
                f"({human_bytes(capture.bytes_written)} written); this kernel stops after "
                f"this cell; resume with: %resume {rid}"
            )
            lost = unrestorable_line(capture.unrestorable)
            print(text + (f"; {lost}" if lost else ""))
            if control.mode == "local":
                self._stop_after_cell()

        self._guard(run)

    def _stop_after_cell(self) -> None:
        """Ask IPython to exit once the current cell has finished (its output is sent)."""
        shell = self.shell
        assert shell is not None

        def stop(*_: Any) -> None:
            shell.events.unregister("post_run_cell", stop)
            # Every concrete shell (ipykernel's, the terminal's) defines ask_exit and
            # IPython's own `exit` calls it, but the InteractiveShell base does not declare it.
            shell.ask_exit()  # type: ignore[attr-defined]

        shell.events.register("post_run_cell", stop)

    @_with_arguments()
    @_argument("runtime", help="the id of a paused runtime")
    @line_magic
    def resume(self, line: str = "") -> None:
        """Bring a paused runtime back (new kernel, same id, same variables). Prints a line."""

        def run() -> None:
            args = self._args(DittoMagics.resume, line)
            started = time.perf_counter()
            control = self.control
            result = control.resume(args.runtime)
            elapsed = time.perf_counter() - started
            text = (
                f"resumed runtime {result.runtime.runtime_id} from checkpoint "
                f"{_short(result.checkpoint_id)} in {elapsed:.2f} s"
            )
            hint = control.connection_hint(result.kernel_id)
            extra = [f"connect: {hint}"] if hint else []
            lost = unrestorable_line(result.unrestorable)
            extra += [lost] if lost else []
            print("; ".join([text, *extra]))

        self._guard(run)

    @line_magic
    def runtimes(self, line: str = "") -> TableResult | None:
        """List the runtimes the control plane knows; returns the table, prints nothing."""

        def run() -> TableResult:
            if _split(line):
                raise InvalidRequest("%runtimes takes no arguments")
            records: list[RuntimeRecord] = self.control.runtimes()
            own = self.control.runtime_id
            rows = [
                [
                    ("* " if r.runtime_id == own else "  ") + r.runtime_id,
                    r.status.value,
                    r.conversation_id,
                    r.sender_id,
                ]
                for r in records
            ]
            return TableResult(["runtime", "status", "conversation", "sender"], rows, records)

        return self._guard(run)

    @line_magic
    def checkpoints(self, line: str = "") -> TableResult | None:
        """List this runtime's (or the given runtime's) checkpoints; returns the table."""

        def run() -> TableResult:
            parts = _split(line)
            if len(parts) > 1:
                raise InvalidRequest("%checkpoints takes at most one runtime id")
            runtime_id = parts[0] if parts else self.control.runtime_id
            listed: list[CheckpointSummary] = self.control.checkpoints(runtime_id)
            rows = [
                [
                    _short(c.checkpoint_id),
                    c.name or "",
                    _short(c.parent_checkpoint_id or ""),
                    time.strftime("%H:%M:%S", time.localtime(c.created_at_ms / 1000)),
                    ", ".join(v.name for v in c.unrestorable),
                    cell_line(c),
                ]
                for c in listed
            ]
            headers = ["checkpoint", "name", "parent", "time", "not kept", "cell"]
            if not any(row[-1] for row in rows):  # no automatic checkpoint: no cell column
                headers, rows = headers[:-1], [row[:-1] for row in rows]
            return TableResult(headers, rows, listed)

        return self._guard(run)

    @_with_arguments()
    @_argument("action", nargs="?", help="on or off; none shows the state")
    @_argument("--keep", metavar="N", help=f"automatic checkpoints kept (default {DEFAULT_KEEP})")
    @line_magic
    def autocheckpoint(self, line: str = "") -> None:
        """`%autocheckpoint on [--keep N]`: a checkpoint `cell-<n>` after every cell that
        changes something; `off` stops; no argument shows the state. Prints a line."""

        def run() -> None:
            args = self._args(DittoMagics.autocheckpoint, line)
            auto = self.autocheckpointer
            if args.action not in (None, "on", "off"):
                raise InvalidRequest(
                    f"%autocheckpoint takes on, off or nothing, not {args.action!r}"
                )
            if args.keep is not None and args.action != "on":
                raise InvalidRequest("--keep goes with on: %autocheckpoint on --keep N")
            if args.action == "on":
                print(auto.turn_on(parse_keep(args.keep)))
            elif args.action == "off":
                print(auto.turn_off())
            else:
                print(auto.state())

        self._guard(run)

    @_with_arguments()
    @_argument("limit", nargs="?", help="most tokens the runtime may use: 200000 or 200_000")
    @_argument("--own", action="store_true", help="a checkout's own budget, not its source's")
    @_argument("--history", action="store_true", help="the budget's records, as a table")
    @_argument("--each", help="cap each branch (runtime) at N tokens inside the limit; 0: none")
    @_argument("--branches", action="store_true", help="each branch beside the total, a table")
    @line_magic
    def budget(self, line: str = "") -> Any:
        """`%budget LIMIT` sets this runtime's token budget, `--each N` caps each branch
        (prints a line); `%budget` shows it live; `--history` its records, `--branches`
        each branch beside the total, as tables."""

        def run() -> Any:
            from ditto_jupyter.kernel.runtime_budget import budget_magic

            args = self._args(DittoMagics.budget, line)
            return budget_magic(args, self.control.runtime_id, self._budget_view)

        return self._guard(run)

    def _budget_view(self, budget: RuntimeBudget) -> Any:
        """The live view of a budget: the one shown before while it is open, else a new one."""
        from ditto_jupyter.kernel.runtime_budget import view_title

        key = f"{budget.authority.path}:{budget.authority.name}"
        view = self._budget_views.get(key)
        if view is not None and getattr(view, "comm", None) is not None:
            view.refresh()  # the figures as of now, not of the last poll
            return view
        if self._budget_view_factory is None:  # loaded without widgets: the figures in a line
            return budget.authority
        view = self._budget_view_factory(budget.authority, view_title(budget))
        self._budget_views[key] = view
        return view

    @cell_magic
    def sandbox(self, line: str = "", cell: str = "") -> SandboxResult | None:
        """Run the cell body as a shell command in this runtime's backend (workspace/sandbox).

        The command's stdout and stderr are streamed; the returned result is its exit status.
        """

        def run() -> SandboxResult:
            if _split(line):
                raise InvalidRequest("%%sandbox takes no arguments; put the command in the cell")
            result = self.control.exec(cell)
            self.autocheckpointer.sandbox_ran = True
            sys.stdout.write(result.stdout)
            sys.stderr.write(result.stderr)
            return SandboxResult(result)

        return self._guard(run)


def load_ipython_extension(
    shell: InteractiveShell, budget_view: BudgetViewFactory | None = None
) -> None:
    """`%load_ext ditto_jupyter`: register the magics (the control starts on first use).

    `budget_view` makes the live view `%budget` shows (the package root passes the widget).
    """
    magics = DittoMagics(shell, budget_view=budget_view)
    shell.register_magics(magics, HistoryMagics(shell, magics))

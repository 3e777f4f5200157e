"""What may have changed in a kernel since a capture: the change journal of one shell.

A capture that follows another pickles again only what may have changed since (`incremental`).
The journal says what that is, from everything that ran in the kernel in between:

- every cell, read by `CellEffects` (the names its code can have touched; None: anything);
- code no cell showed: a silent execute request with code, a user expression or a kernel
  call that is not ditto's own, a comm message (a widget's callback): anything;
- the figures pyplot handed to each cell's code (`pyplot_access`): `plt.title()`,
  `df.plot()` and seaborn draw on the current figure without naming it (`figure_watch`
  sees the rest: every matplotlib setter marks its figure changed); where pyplot was not
  watched for the whole cell, its current figure before and after the cell;
- at capture time, code that may run behind the cells' back: a thread that is not the
  kernel's own or ditto's, a pending asyncio task running notebook code
  (`thread_activity`). A capture follows the one before only when no such code ran in
  between: the same threads, none of them scheduled since (the OS's counts), no task.

So a value is kept only when nothing that ran could have reached it; where the journal
cannot tell, the capture pickles. Outside IPython (a plain dict) there is no journal, and
every capture is whole.
"""

from __future__ import annotations

import ast
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ditto_jupyter.kernel.capture import kernel_hooks
from ditto_jupyter.kernel.capture.cell_effects import CellEffects
from ditto_jupyter.kernel.capture.pyplot_access import FigureAccess
from ditto_jupyter.kernel.capture.thread_activity import ThreadActivity
from ditto_jupyter.kernel.capture.thread_activity import foreign_threads as foreign_threads
from ditto_jupyter.kernel.capture.trusted_code import is_trusted_module

#: Kernel calls that change no variable (their module's own bookkeeping aside), and
#: calls that replace the namespace (a restore: the next capture is whole anyway).
DITTO_CALL_PREFIX = "ditto_jupyter."
#: Our magics that change no variable of the kernel (they record, list, branch elsewhere).
QUIET_MAGICS = frozenset(
    {
        "autocheckpoint",
        "budget",
        "checkpoint",
        "checkpoints",
        "checkout",
        "diff",
        "pause",
        "runtimes",
    }
)
#: How many cells the journal remembers; a capture older than that is followed wholly.
MAX_ENTRIES = 4096


def cell_python(shell: Any, source: str) -> str:
    """A cell as Python (IPython's transformation: magics become calls): the one the history
    stored for it, or the cell transformed again (a cell run without history)."""
    history = getattr(shell, "history_manager", None)
    raw = getattr(history, "input_hist_raw", None)
    parsed = getattr(history, "input_hist_parsed", None)
    if isinstance(raw, list) and isinstance(parsed, list) and len(raw) == len(parsed) > 0:
        last = parsed[-1]
        if raw[-1] == source.rstrip("\n") and isinstance(last, str):
            return last
    transformed = shell.transform_cell(source)
    return transformed if isinstance(transformed, str) else source


def only_quiet_magics(python: str) -> bool:
    """Whether a cell (as Python) is nothing but magics of ours that change no variable
    (`QUIET_MAGICS`): it reaches nothing, and is no reason to look for unseen code."""
    if "run_line_magic" not in python:  # no line magic at all (most cells): no parse
        return False
    try:
        body = ast.parse(python).body
    except SyntaxError:
        return False

    def quiet(statement: ast.stmt) -> bool:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
            return False
        shell = call.func.value
        name = call.args[0] if call.args else None
        return (
            call.func.attr == "run_line_magic"
            and isinstance(shell, ast.Call)
            and isinstance(shell.func, ast.Name)
            and shell.func.id == "get_ipython"
            and isinstance(name, ast.Constant)
            and name.value in QUIET_MAGICS
        )

    return bool(body) and all(quiet(statement) for statement in body)


def shows_one_value(shell: Any, python: str, namespace: Mapping[str, object]) -> bool:
    """Whether a cell only shows one variable (`fig`, `df`: a bare name) whose display runs
    no notebook code: its class and every display formatter for it come from installed
    packages or the standard library, and no class of the notebook defines a display
    method. A builtin container (`stats`, a list of dicts) shows its elements: each of
    them must qualify (`_shown_values`). Showing it then changes nothing a checkpoint
    keeps (a library's display may fill a cache, as a figure's repr fills its transforms,
    but the value means the same)."""
    if not python or len(python) > 200:
        return False
    try:
        body = ast.parse(python).body
    except SyntaxError:
        return False
    if len(body) != 1 or not isinstance(body[0], ast.Expr):
        return False
    node = body[0].value
    if not isinstance(node, ast.Name) or node.id not in namespace:
        return False
    value = namespace[node.id]
    if type(value) in _SHOWN_ATOMS:
        return True
    shown = _shown_values(value)
    if shown is None or any(_displays_itself(other) for other in list(namespace.values())):
        return False
    printers = getattr(getattr(shell, "display_formatter", None), "formatters", {})
    return _all_displayed_by_libraries(shown, printers)


#: How many objects a shown builtin container may hold (nested ones counted) for its
#: display to be vouched for; a bigger one counts as a cell that may have changed it.
SHOWN_ELEMENTS_LIMIT = 256


def _shown_values(value: object) -> list[object] | None:
    """The values showing `value` displays by their own code: itself, or for a builtin
    container (exactly list, tuple, dict, set, frozenset: a subclass shows itself) every
    element and key, nested ones too; None when there are more than `SHOWN_ELEMENTS_LIMIT`."""
    shown: list[object] = []
    pending = [value]
    seen: set[int] = set()
    while pending:
        each = pending.pop()
        if type(each) in _SHOWN_ATOMS or id(each) in seen:
            continue
        seen.add(id(each))
        if len(seen) > SHOWN_ELEMENTS_LIMIT:
            return None
        if isinstance(each, dict) and type(each) is dict:
            pending.extend(each.keys())
            pending.extend(each.values())
        elif isinstance(each, list | tuple | set | frozenset) and type(each) in _SHOWN_CONTAINERS:
            pending.extend(each)
        else:
            shown.append(each)
    return shown


def _all_displayed_by_libraries(values: list[object], printers: Mapping[str, Any]) -> bool:
    """`_displayed_by_libraries` of every value, decided once per class (a list of 200
    arrays asks IPython's ten formatters once, not 2,000 times): a formatter finds its
    printer by the value's class, except for a value registered by id (a singleton
    printer), which is decided on its own."""
    singletons: set[int] = set()
    for each in printers.values():
        registered = getattr(each, "singleton_printers", None)
        if isinstance(registered, dict):
            singletons.update(registered)
    decided: dict[tuple[type, object], bool] = {}
    for value in values:
        try:
            key = (type(value), getattr(value, "__class__", None))
            hash(key)
        except Exception:  # an odd `__class__`: decided on its own
            key = None
        if key is None or id(value) in singletons:
            if not _displayed_by_libraries(value, printers):
                return False
            continue
        verdict = decided.get(key)
        if verdict is None:
            verdict = decided[key] = _displayed_by_libraries(value, printers)
        if not verdict:
            return False
    return True


def _displayed_by_libraries(value: object, printers: Mapping[str, Any]) -> bool:
    """Whether a value's class and every display formatter for it are library code."""
    if not _trusted_code(type(value)):
        return False
    for each in printers.values():
        try:
            printer = each.lookup(value)
        except Exception:  # no printer registered for it: the default display
            continue
        if not _trusted_code(printer):
            return False
    return True


#: Values a bare-name cell shows without running any code but the builtins'; a cell that
#: names nothing else cannot reach pyplot either.
_SHOWN_ATOMS = frozenset({int, float, complex, bool, str, bytes, type(None)})
_ATOMS = _SHOWN_ATOMS
#: Builtin containers: showing one shows (and runs the display code of) every element.
_SHOWN_CONTAINERS = frozenset({list, tuple, dict, set, frozenset})
_DISPLAY_METHODS = ("__repr__", "__str__", "_repr_html_", "_repr_pretty_", "_repr_mimebundle_")


def _trusted_code(obj: object) -> bool:
    """Whether a class or function comes from a module of the stdlib or site-packages."""
    module_name = getattr(obj, "__module__", None)
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    return module is not None and is_trusted_module(module)


def _displays_itself(value: object) -> bool:
    """Whether `value` is a class of the notebook with a display method of its own."""
    return (
        isinstance(value, type)
        and getattr(value, "__module__", None) == "__main__"
        and any(name in vars(value) for name in _DISPLAY_METHODS)
    )


def _weakly(figure: Any) -> Callable[[], Any]:
    """A reference to `figure` that does not keep it alive (a figure no one holds any more
    cannot be reached, and a journal of 4,096 cells must not keep every closed figure and
    its 100,000s of objects in memory); a strong one for what takes no weak reference."""
    try:
        return weakref.ref(figure)
    except TypeError:
        return lambda: figure


@dataclass
class _Entry:
    serial: int
    touched: set[str] | None  # None: anything
    #: pyplot's current figure around it (weakly: see `_weakly`)
    figures: list[Callable[[], Any]] = field(default_factory=list)
    fresh: set[str] = field(default_factory=set)  # bound anew before any read of them


class ChangeJournal:
    """The journal of one IPython shell (attach once; `journal_of` finds it)."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.effects = CellEffects()
        self.serial = 0  # the entries so far; a capture remembers it as its mark
        self._entries: list[_Entry] = []
        self._executing = False  # code of an execute request runs (pre_execute came)
        self._visible = False  # the execution under way is a cell (pre_run_cell came)
        self._current_before: Any = None
        self._bindings_before: dict[str, object] | None = None  # the namespace as it started
        self._taken: Any = None  # the last cell result journaled
        self._running: str | None = None  # the cell under way (pre_run_cell came), as typed
        self.figure_access = FigureAccess()  # the figures pyplot handed to the cell

    # ---- recording -------------------------------------------------------------------

    def record(
        self,
        touched: set[str] | None,
        figures: list[Any] | None = None,
        fresh: set[str] | None = None,
    ) -> None:
        """One more thing ran: the names it can have touched (None: anything), the figures
        it reached, the names it bound anew before reading them."""
        self.serial += 1
        held = [_weakly(figure) for figure in figures or ()]
        self._entries.append(_Entry(self.serial, touched, held, fresh or set()))
        if len(self._entries) > MAX_ENTRIES:
            del self._entries[: len(self._entries) - MAX_ENTRIES]

    def anything(self) -> None:
        """Code ran that no cell showed: anything may have changed."""
        self.record(None)

    def _pre_execute(self) -> None:
        self._executing = True  # code runs (an empty request fires post_execute alone)
        self._visible = False

    def _pre_run_cell(self, info: Any) -> None:
        self._visible = True
        raw = getattr(info, "raw_cell", None)
        self._running = raw if isinstance(raw, str) else ""
        self._current_before = current_figure()
        self._bindings_before = dict(self.shell.user_ns)
        self.figure_access.start()

    def _post_run_cell(self, result: Any) -> None:
        self.take_cell(result)

    def take_cell(self, result: Any) -> None:
        """Journal the cell `result` is of, once (the hook and `%autocheckpoint` both ask)."""
        if self._taken is result:
            return
        self._taken = result
        self._running = None
        info = getattr(result, "info", None)
        source = getattr(info, "raw_cell", None)
        namespace = self.shell.user_ns
        try:
            python = cell_python(self.shell, source if isinstance(source, str) else "")
            read = "" if only_quiet_magics(python) else python
            fresh: set[str] = set()
            if shows_one_value(self.shell, read, namespace):
                touched: set[str] | None = set()
            else:
                touched = self.effects.touched_by(read, namespace, self._bindings_before)
                fresh = self.effects.fresh
        except Exception:  # a cell we cannot read could have done anything
            touched = None
        handed = self.figure_access.stop()
        figures: list[Any] = []
        if handed is not None:  # what pyplot handed to the cell's code, and nothing else
            figures = list({id(f): f for f in handed}.values())
        elif touched is None or any(
            type(namespace[n]) not in _ATOMS for n in touched if n in namespace
        ):
            # pyplot was not watched the whole cell: a cell that named more than numbers
            # and strings may have drawn on pyplot's current figure without naming it
            # (`df.plot()`, seaborn): it counts as reached
            figures = [f for f in (self._current_before, current_figure()) if f is not None]
        self._current_before = self._bindings_before = None
        self.record(touched, figures, fresh)

    def _post_execute(self) -> None:
        if self._executing and not self._visible:  # silent code: nothing showed it
            self.anything()
        self._executing = self._visible = False
        self._running = None

    def running_cell_is_quiet(self) -> bool:
        """Whether a capture taken now sees every change the journal cannot show yet: no
        cell is under way (a kernel call between cells), or the one under way is nothing but
        quiet magics of ours (`%checkpoint`, `%diff`). A cell that ran code before its magic
        (`x = 1; %checkpoint`) is journaled only once it ends: a capture inside it is whole."""
        if self._running is None:
            return True
        try:
            return only_quiet_magics(cell_python(self.shell, self._running))
        except Exception:  # a cell we cannot read could have done anything
            return False

    # ---- reading ---------------------------------------------------------------------

    def since(self, mark: int) -> tuple[set[str] | None, list[Any]]:
        """The names touched since `mark` (None: anything), and the figures pyplot made
        current around the cells since then."""
        if mark > self.serial or (self._entries and self._entries[0].serial > mark + 1):
            return None, []
        if mark < self.serial and not self._entries:
            return None, []
        touched: set[str] = set()
        figures: list[Any] = []
        for entry in self._entries:
            if entry.serial <= mark:
                continue
            if entry.touched is None:
                return None, []
            touched |= entry.touched
            figures.extend(f for held in entry.figures if (f := held()) is not None)
        return touched, figures

    def fresh_since(self, mark: int) -> set[str]:
        """The names whose first mention since `mark` bound them anew before reading them:
        no code since reached their values of then through them."""
        decided: set[str] = set()
        fresh: set[str] = set()
        for entry in self._entries:
            if entry.serial <= mark or entry.touched is None:
                continue
            fresh |= (entry.fresh & entry.touched) - decided
            decided |= entry.touched
        return fresh

    @staticmethod
    def foreign_activity() -> ThreadActivity:
        """What may run behind the cells' back now (a thread that is not the kernel's or
        ditto's, a pending task of notebook code): a capture follows the one before only
        when nothing of it ran in between (`ThreadActivity.quiet_since`)."""
        return ThreadActivity.now()


# ---- the kernel's journal -------------------------------------------------------------

_journals: dict[int, ChangeJournal] = {}


def journal_of(namespace: Mapping[str, object]) -> ChangeJournal | None:
    """The journal of the running shell whose user namespace is `namespace`, attached on
    first use (None outside IPython); it sees the cells from then on."""
    shell = _shell_of(namespace)
    if shell is None:
        return None
    journal = _journals.get(id(shell))
    if journal is None or journal.shell is not shell:
        journal = _journals[id(shell)] = ChangeJournal(shell)
        _attach(shell, journal)
        # the code that exists now, no cell of which the journal saw: counted as it is,
        # before the next cell runs (a plain `def` it shows from here is its own)
        journal.effects.scan_live_code(shell.user_ns)
    return journal


def _shell_of(namespace: Mapping[str, object]) -> Any:
    module = sys.modules.get("IPython")
    if module is None:
        return None
    shell = module.get_ipython()
    if shell is None or getattr(shell, "user_ns", None) is not namespace:
        return None
    return shell if hasattr(shell, "events") else None


def _attach(shell: Any, journal: ChangeJournal) -> None:
    """Register the hooks, and watch the ways code reaches the kernel without a cell
    (through `kernel_hooks`, which takes them out again)."""
    kernel_hooks.register_event(shell, "pre_execute", journal._pre_execute)
    kernel_hooks.register_event(shell, "pre_run_cell", journal._pre_run_cell)
    kernel_hooks.register_event(shell, "post_run_cell", journal._post_run_cell)
    kernel_hooks.register_event(shell, "post_execute", journal._post_execute)

    def before_expressions(expressions: dict[str, str]) -> None:
        if any(not _is_ditto_call(text) for text in expressions.values()):
            journal.anything()

    kernel_hooks.wrap_user_expressions(shell, before_expressions)
    # a widget's callbacks run notebook code no cell showed
    kernel_hooks.wrap_comm_msg(shell, journal.anything)
    kernel_hooks.on_removal("the change journal", lambda: _journals.pop(id(shell), None))


def _is_ditto_call(expression: str) -> bool:
    """Whether a user expression is a kernel call (`dispatch_call`, which journals a call
    of anything but ditto's own functions itself)."""
    return expression.startswith("__import__('ditto_jupyter.kernel'")


def note_kernel_call(function: str) -> None:
    """A kernel call is about to run `function` (`module:function`): anything but ditto's
    own functions is code no cell showed."""
    if function.startswith(DITTO_CALL_PREFIX):
        return
    for journal in _journals.values():
        journal.anything()


# ---- evidence at capture time ---------------------------------------------------------


def current_figure() -> Any:
    """pyplot's current figure (None when pyplot is not imported or holds none)."""
    if "matplotlib.pyplot" not in sys.modules:
        return None
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    manager = helpers.Gcf.get_active() if helpers is not None else None
    return getattr(getattr(manager, "canvas", None), "figure", None)

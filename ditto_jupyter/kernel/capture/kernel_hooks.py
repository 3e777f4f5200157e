"""Every hook the kernel side puts into code it does not own, put in and taken out here.

To see what a cell's code reached, the capture watches the kernel from inside:
- IPython's cell events (the journal's, the pause fence's, the cell counter's);
- the shell's `user_expressions` (code a front end runs without a cell) and the kernel's
  `comm_msg` handler (a widget's callbacks), each wrapped to tell the journal;
- IPython's `input_transformers_cleanup` (a sealed kernel refuses cells: `pause_fence`);
- matplotlib's `Gcf.get_active` / `Gcf.get_fig_manager`, on the class, wrapped to note
  the figures pyplot hands to a cell (`pyplot_access`);
- each captured figure's `stale_callback`, wrapped to stamp its changes (`figure_watch`).

Each is put in through a function of this module, which remembers how to take it out.
`remove_all` (`%unload_ext ditto_jupyter`) puts every original back, newest first, and runs
the callbacks the modules gave (`on_removal`) to forget what they attached; a hook that
cannot be taken out is logged, never silent. As `server/jupyter_hooks.py` is for the server.
"""

from __future__ import annotations

import logging
import sys
import weakref
from collections.abc import Callable
from typing import Any

_log = logging.getLogger(__name__)

#: The mark on matplotlib's Gcf while its accessors are wrapped.
GCF_MARK = "_ditto_noted"

#: How to take out each hook put in, oldest first: (what it is, the undo).
_undos: list[tuple[str, Callable[[], object]]] = []
#: figure -> (the wrapper installed as its stale_callback, the callback it replaced)
_figures: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _remember(what: str, undo: Callable[[], object]) -> None:
    _undos.append((what, undo))


def on_removal(what: str, forget: Callable[[], object]) -> None:
    """Run `forget` when the hooks are taken out (a module's own record of what it
    attached, so that it attaches again on its next use)."""
    _remember(what, forget)


def register_event(shell: Any, event: str, callback: Callable[..., Any]) -> None:
    """`shell.events.register(event, callback)`, unregistered by `remove_all`."""
    shell.events.register(event, callback)

    def undo() -> None:
        if callback in shell.events.callbacks.get(event, []):
            shell.events.unregister(event, callback)

    _remember(f"IPython event {event}", undo)


def insert_input_transformer(shell: Any, transformer: Callable[[list[str]], list[str]]) -> None:
    """Run `transformer` first on every cell's lines (`input_transformers_cleanup`)."""
    shell.input_transformers_cleanup.insert(0, transformer)

    def undo() -> None:
        if transformer in shell.input_transformers_cleanup:
            shell.input_transformers_cleanup.remove(transformer)

    _remember("IPython input transformer", undo)


def wrap_user_expressions(shell: Any, before: Callable[[dict[str, str]], None]) -> None:
    """Call `before(expressions)` ahead of the shell's every `user_expressions`."""
    had_own = "user_expressions" in vars(shell)
    original = shell.user_expressions

    def user_expressions(expressions: dict[str, str]) -> Any:
        before(expressions or {})
        return original(expressions)

    shell.user_expressions = user_expressions

    def undo() -> None:
        if had_own:
            shell.user_expressions = original
        else:
            vars(shell).pop("user_expressions", None)

    _remember("shell.user_expressions", undo)


def wrap_comm_msg(shell: Any, before: Callable[[], None]) -> None:
    """Call `before()` ahead of the kernel's every `comm_msg` (nothing without a kernel)."""
    handlers = getattr(getattr(shell, "kernel", None), "shell_handlers", None)
    if not isinstance(handlers, dict) or "comm_msg" not in handlers:
        return
    handle = handlers["comm_msg"]

    def comm_msg(*args: Any, **kwargs: Any) -> Any:
        before()
        return handle(*args, **kwargs)

    handlers["comm_msg"] = comm_msg

    def undo() -> None:
        if handlers.get("comm_msg") is comm_msg:
            handlers["comm_msg"] = handle

    _remember("kernel comm_msg handler", undo)


def wrap_pyplot_accessors(note: Callable[[Any], None]) -> bool:
    """Wrap `Gcf.get_active` and `Gcf.get_fig_manager` (once) to `note` each manager they
    return; False when pyplot's registry is not imported yet."""
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    gcf = getattr(helpers, "Gcf", None)
    if gcf is None:
        return False
    if getattr(gcf, GCF_MARK, False):
        return True
    active_descriptor = gcf.__dict__["get_active"]
    manager_descriptor = gcf.__dict__["get_fig_manager"]
    get_active = active_descriptor.__func__
    get_fig_manager = manager_descriptor.__func__

    def noted_active(cls: Any) -> Any:
        manager = get_active(cls)
        note(manager)
        return manager

    def noted_manager(cls: Any, num: Any) -> Any:
        manager = get_fig_manager(cls, num)
        note(manager)
        return manager

    noted_active.__doc__, noted_manager.__doc__ = get_active.__doc__, get_fig_manager.__doc__
    gcf.get_active = classmethod(noted_active)
    gcf.get_fig_manager = classmethod(noted_manager)
    setattr(gcf, GCF_MARK, True)

    def undo() -> None:
        gcf.get_active = active_descriptor
        gcf.get_fig_manager = manager_descriptor
        delattr(gcf, GCF_MARK)

    _remember("matplotlib Gcf accessors", undo)
    return True


def wrap_stale_callback(figure: Any, on_change: Callable[[Any], None]) -> Any:
    """Make `figure`'s `stale_callback` call `on_change(figure)`, then the callback it had;
    the wrapper (the figure is held weakly: a closed figure goes as before)."""
    original = getattr(figure, "stale_callback", None)
    reference = weakref.ref(figure)

    def stale_callback(artist: Any, value: bool) -> None:
        watched = reference()
        if watched is not None:
            on_change(watched)
        if original is not None:
            original(artist, value)

    figure.stale_callback = stale_callback
    _figures[figure] = (stale_callback, original)
    return stale_callback


def _unwrap_figures() -> None:
    for figure, (wrapper, original) in list(_figures.items()):
        if getattr(figure, "stale_callback", None) is wrapper:
            figure.stale_callback = original
    _figures.clear()


def installed() -> list[str]:
    """What is in place now, oldest first (for tests and `%unload_ext`'s log)."""
    return [what for what, _ in _undos] + (["figure stale_callback"] * len(_figures))


def remove_all() -> list[str]:
    """Take every hook out, newest first; the names of those that failed (each logged)."""
    failed: list[str] = []
    try:
        _unwrap_figures()
    except Exception as error:  # a figure's own setter refused: log it, go on
        _log.warning("ditto: could not unwrap a figure's stale_callback: %s", error)
        failed.append("figure stale_callback")
    while _undos:
        what, undo = _undos.pop()
        try:
            undo()
        except Exception as error:
            _log.warning("ditto: could not take out the hook on %s: %s", what, error)
            failed.append(what)
    return failed

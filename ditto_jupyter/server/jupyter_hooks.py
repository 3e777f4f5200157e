"""Every patch the extension makes to jupyter-server, in one place: installed together at
start, removed together in `stop_extension`.

Each patch wraps a method on the server's own instance (never its class), and only where
jupyter-server has no public API for the job; each says why. Where there is one, the
extension uses it instead: the kernel manager's restart callbacks (`kernel_watcher`),
`list_kernel_ids`, `get_kernel` and its traits (`idle_pauser`), `save_session` and
`get_session`, and jupyter_events (`events`).

On the session manager:

- `get_kernel_env`, `start_kernel_for_session`, `update_session`: a Jupyter session's
  kernel gets the `DITTO_*` variables with its session id, the runtime's id. The public
  `get_kernel_env(path, name)` is not told the session, so the two methods that call it
  say which session they work for (a context variable).
- `create_session`: a new Jupyter session is registered as a runtime as soon as it
  exists. jupyter-server has no event or callback for a new session.
- `update_session` again: a session switched to another kernel (JupyterLab's kernel
  picker) updates its runtime's kernel, and a new path (JupyterLab creates a session under
  a random path, then sets the notebook's; a rename) its runtime's notebook. No callback
  for either.
- `forget_session_row`: drops a session's row once the extension stopped its kernel
  (pause, close). `delete_session` would shut the kernel down a second time; this is the
  statement the manager itself runs for a kernel that was culled.

On the kernel manager:

- `start_kernel`: IPython kernels start with `--ext=ditto_jupyter` (the magics). No hook
  adds launch arguments; the kernel spec is the user's, not ours to rewrite.
- `list_kernels`: the warm pool's kernels (no runtime's yet) stay out of `GET /api/kernels`,
  and out of the listing before their models are built (one being started has none yet).
- `cull_kernel_if_idle`: the idle culler asks the one `CullingPolicy`. The culler has
  timeouts, not a per-kernel say.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jupyter_server.utils import ensure_async
from tornado import web

from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.server.culling import CullingPolicy

log = logging.getLogger(__name__)

#: The Jupyter session whose kernel the session manager is starting or updating.
_session_in_progress: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ditto_session_in_progress", default=None
)

#: What IPython needs on its command line to load the magics at start.
MAGICS_ARGUMENT = "--ext=ditto_jupyter"


def is_ipython_kernel(argv: list[str]) -> bool:
    """Whether a kernel spec's command line starts an ipykernel (the magics are IPython's)."""
    return any("ipykernel" in part for part in argv)


def forget_session_row(session_manager: Any, session_id: str) -> None:
    """Drop the Jupyter session row of a runtime whose kernel the extension stopped.

    Raw SQL on jupyter-server's `session` table: `delete_session` would shut the kernel down
    again, and the manager has no public method that only forgets a row. It is the
    statement the manager runs itself for a kernel that was culled.
    """
    session_manager.cursor.execute("DELETE FROM session WHERE session_id=?", (session_id,))


@dataclass(frozen=True)
class SessionEvents:
    """What the extension does when jupyter-server works on a session."""

    #: The variables every kernel of the server gets.
    kernel_env: Callable[[], dict[str, str]]
    #: The variables a session's kernel gets besides: its runtime's identity.
    runtime_env: Callable[[str], dict[str, str]]
    #: A session was created (its model, as `get_session` answers).
    created: Callable[[dict[str, Any]], Awaitable[None]]
    #: A session switched to another kernel (session id, kernel id).
    kernel_switched: Callable[[str, str], Awaitable[None]]
    #: A session's notebook path changed (session id, path): JupyterLab starts a session
    #: under a random path and sets the notebook's right after; a rename moves it too.
    path_changed: Callable[[str, str], Awaitable[None]]


@dataclass
class _Patch:
    target: Any
    name: str
    wrapper: Any
    previous: Any  # the instance's own attribute before, or _NOTHING


_NOTHING = object()


class JupyterHooks:
    """Install and uninstall every patch on one server's session and kernel managers."""

    def __init__(self, session_manager: Any, kernel_manager: Any, kernel_spec_manager: Any) -> None:
        self.session_manager: Any = session_manager  # jupyter_server is untyped
        self.kernel_manager: Any = kernel_manager
        self.kernel_spec_manager: Any = kernel_spec_manager
        #: The rules the idle culler follows (the pool and the idle pauser register).
        self.culling = CullingPolicy(kernel_manager)
        self._patches: list[_Patch] = []

    @property
    def installed(self) -> bool:
        return bool(self._patches)

    def install(
        self,
        events: SessionEvents,
        *,
        load_magics: bool,
        hidden_kernels: Callable[[], set[str]] | None = None,
    ) -> None:
        """Install the patches: session hooks always; the magics, the hidden kernels and the
        culling policy when asked for (the culler only when a rule is registered)."""
        if self._patches:
            return
        self._session_patches(events)
        if load_magics:
            self._patch(self.kernel_manager, "start_kernel", self._magics_start_kernel)
        if hidden_kernels is not None:
            self._patch(self.kernel_manager, "list_kernels", self._hiding_list(hidden_kernels))
        if self.culling.active:
            self._patch(self.kernel_manager, "cull_kernel_if_idle", self._policy_cull)

    def install_culling_only(self) -> None:
        """Install the culling policy's patch alone: the server runs without the extension
        (a setting is wrong), and the culler must still leave the kernels its rules spare."""
        if not self._patches:
            self._patch(self.kernel_manager, "cull_kernel_if_idle", self._policy_cull)

    def uninstall(self) -> None:
        """Remove every patch, newest first (one another library wrapped since is left, and
        logged: removing ours would remove theirs)."""
        while self._patches:
            patch = self._patches.pop()
            if getattr(patch.target, patch.name, None) is not patch.wrapper:
                log.warning(
                    "ditto_jupyter: %s.%s was wrapped again since; left in place",
                    type(patch.target).__name__,
                    patch.name,
                )
                continue
            if patch.previous is _NOTHING:
                delattr(patch.target, patch.name)
            else:
                setattr(patch.target, patch.name, patch.previous)

    def _patch(self, target: Any, name: str, make: Callable[[Any], Any]) -> None:
        previous = vars(target).get(name, _NOTHING)
        wrapper = make(getattr(target, name))
        setattr(target, name, wrapper)
        self._patches.append(_Patch(target, name, wrapper, previous))

    # ---- the session manager ---------------------------------------------------------------

    def _session_patches(self, events: SessionEvents) -> None:
        manager = self.session_manager

        def env(original: Any) -> Any:
            @functools.wraps(original)
            def get_kernel_env(path: str | None, name: Any = None) -> dict[str, str]:
                found = dict(original(path, name))
                found.update(events.kernel_env())
                session_id = _session_in_progress.get()
                if session_id:
                    found.update(events.runtime_env(session_id))
                return found

            return get_kernel_env

        def start(original: Any) -> Any:
            @functools.wraps(original)
            async def start_kernel_for_session(session_id: str, *args: Any, **kwargs: Any) -> str:
                token = _session_in_progress.set(session_id)
                try:
                    kernel_id: str = await original(session_id, *args, **kwargs)
                    return kernel_id
                finally:
                    _session_in_progress.reset(token)

            return start_kernel_for_session

        def update(original: Any) -> Any:
            @functools.wraps(original)
            async def update_session(session_id: str, **kwargs: Any) -> None:
                token = _session_in_progress.set(session_id)
                try:
                    await original(session_id, **kwargs)
                finally:
                    _session_in_progress.reset(token)
                kernel_id = kwargs.get("kernel_id")
                if kernel_id:
                    await _reported(
                        "a kernel switch", events.kernel_switched(session_id, kernel_id)
                    )
                path = kwargs.get("path")
                if path:
                    await _reported("a new notebook path", events.path_changed(session_id, path))

            return update_session

        def create(original: Any) -> Any:
            @functools.wraps(original)
            async def create_session(*args: Any, **kwargs: Any) -> dict[str, Any]:
                model: dict[str, Any] = await original(*args, **kwargs)
                await _reported("registering a new session", events.created(dict(model)))
                return model

            return create_session

        self._patch(manager, "get_kernel_env", env)
        self._patch(manager, "start_kernel_for_session", start)
        self._patch(manager, "update_session", update)
        self._patch(manager, "create_session", create)

    # ---- the kernel manager ----------------------------------------------------------------

    def _magics_start_kernel(self, original: Any) -> Any:
        manager, specs = self.kernel_manager, self.kernel_spec_manager

        @functools.wraps(original)
        async def start_kernel(*args: Any, **kwargs: Any) -> str:
            name = kwargs.get("kernel_name") or manager.default_kernel_name
            try:
                argv = list(specs.get_kernel_spec(name).argv)
            except Exception as error:  # an unknown kernel name: the manager reports it
                log.debug("ditto_jupyter: no kernel spec %r (%s)", name, error)
                argv = []
            if is_ipython_kernel(argv):
                extra = list(kwargs.get("extra_arguments") or [])
                if MAGICS_ARGUMENT not in extra:
                    kwargs["extra_arguments"] = [*extra, MAGICS_ARGUMENT]
            kernel_id: str = await original(*args, **kwargs)
            return kernel_id

        return start_kernel

    def _hiding_list(self, hidden: Callable[[], set[str]]) -> Callable[[Any], Any]:
        """The listing without the hidden kernels, whose models are never built: jupyter-server
        puts a started kernel in its table one loop turn before it sets `last_activity`, and
        its own `list_kernels` fails on that kernel (500 from `/api/kernels` and `/api/status`,
        at every server start, where the pool starts its kernel). Otherwise as it lists."""
        manager = self.kernel_manager

        def make(original: Any) -> Any:
            @functools.wraps(original)
            def list_kernels() -> list[dict[str, Any]]:
                kept = hidden()
                models: list[dict[str, Any]] = []
                for kernel_id in manager.list_kernel_ids():
                    if kernel_id in kept:
                        continue
                    try:
                        models.append(manager.kernel_model(kernel_id))
                    except (web.HTTPError, KeyError):  # gone since, as jupyter-server skips it
                        continue
                return models

            return list_kernels

        return make

    def _policy_cull(self, original: Any) -> Any:
        policy = self.culling

        @functools.wraps(original)
        async def cull_kernel_if_idle(kernel_id: str) -> None:
            # A rule may read the store (the idle pauser's): on a store thread, never here.
            why = await off_loop(policy.reason_to_spare, kernel_id)
            if why is not None:
                log.debug(
                    "ditto_jupyter: the idle culler leaves kernel %s alone: %s", kernel_id, why
                )
                return
            await ensure_async(original(kernel_id))

        return cull_kernel_if_idle


async def _reported(what: str, step: Awaitable[None]) -> None:
    """Run an extension step inside a jupyter-server call; a failure is logged, never
    raised into jupyter-server (its session is made all the same)."""
    try:
        await step
    except Exception as error:
        log.warning("ditto_jupyter: %s failed: %s", what, error)

"""The ditto_jupyter Jupyter server extension: the runtime REST API, events, kernel env.

Enabled by `jupyter-config/jupyter_server_config.d/ditto_jupyter.json`. Configure with
`--DittoJupyterApp.data_dir=...` (or `c.DittoJupyterApp.*` in jupyter_server_config.py):
`data_dir` (SQLite store, blob store, workspaces), `store_url` (SQLAlchemy URL, for
PostgreSQL), `default_backend` (`local` or `e2b`), `e2b_template`, `pause_idle_after`
(seconds of kernel idleness after which a runtime pauses; `idle_pauser.py`), `kernel_pool_size`
(warm kernels per kernelspec for checkout and resume, see `kernel_pool`).

IPython kernels the server starts load the magics (`--ext=ditto_jupyter`, trait
`load_magics`) and get `DITTO_SERVER_URL`, `DITTO_TOKEN`, `DITTO_DATA_DIR`,
`DITTO_RUNTIME_ID` (their session id) and `DITTO_RUNTIME_TOKEN` (proof of that id for the
`self/...` routes, see `runtime_tokens`) in their environment, so the magics can call back.
Kernels of ordinary Jupyter sessions get them through the session manager's own
`get_kernel_env` hook (wrapped on the server's instance, the session id taken from the
`start_kernel_for_session` / `update_session` call it runs in); kernels started by the
extension itself (checkout, resume) through `ServerKernelHost`.
"""

from __future__ import annotations

import contextvars
import functools
import getpass
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.services.sessions.handlers import SessionHandler
from traitlets import Bool, Enum, Float, Integer, Unicode, default

from ditto_jupyter.backends.base import BackendProvider
from ditto_jupyter.control.budget_registry import RuntimeBudgets
from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.environment import runtime_identity_env, server_env
from ditto_jupyter.hosts.kernel_context_driver import KernelContextDriver
from ditto_jupyter.server.events import RuntimeEvents
from ditto_jupyter.server.handlers import route_table
from ditto_jupyter.server.idle_pauser import IdlePauser
from ditto_jupyter.server.kernel_pool import KernelPool, hide_pooled_kernels
from ditto_jupyter.server.openapi import openapi_document
from ditto_jupyter.server.runtime_tokens import RuntimeTokens
from ditto_jupyter.server.server_kernel_host import ServerKernelHost
from ditto_jupyter.server.sessions import RuntimeSessions, ServerContextCapture
from ditto_jupyter.wiring import default_data_dir, open_runtime_service

#: The package's loggers (`logging.getLogger(__name__)` in control/, backends/, ...): under a
#: server they write to the server's log, with its format and level (`initialize_settings`).
PACKAGE_LOG = logging.getLogger("ditto_jupyter")

#: The Jupyter session whose kernel the session manager is starting or updating.
_session_in_progress: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ditto_session_in_progress", default=None
)


#: Session ids with more than five dash-separated parts (checkout children and their children).
CHILD_SESSION_ROUTE = r"/api/sessions/(?P<session_id>\w+(?:-\w+){5,})"


class DittoJupyterApp(ExtensionApp):
    """Checkpoint, restore, branch and pause live Jupyter runtimes over REST."""

    name = "ditto_jupyter"
    description = "Git-like checkpoint, checkout, pause and resume of live Jupyter runtimes."
    load_other_extensions = True

    data_dir = Unicode(
        config=True,
        help="Directory of the checkpoint store, blob store and local workspaces "
        "(default: $DITTO_DATA_DIR, else $XDG_DATA_HOME/ditto-jupyter).",
    )
    store_url = Unicode(
        None,
        allow_none=True,
        config=True,
        help="SQLAlchemy URL of the checkpoint store (default: SQLite file in data_dir).",
    )
    default_backend = Enum(
        ["local", "e2b"], default_value="local", config=True, help="Backend of new runtimes."
    )
    e2b_template = Unicode("base", config=True, help="E2B template of new E2B sandboxes.")
    load_magics = Bool(
        True,
        config=True,
        help="Load the ditto magics (%checkpoint, %restore, ...) in every IPython kernel the "
        "server starts (adds `--ext=ditto_jupyter` to ipykernel's command line).",
    )
    kernel_call_timeout = Float(
        600.0, config=True, help="Seconds a capture or restore call into a kernel may take."
    )

    pause_idle_after = Float(
        0.0,
        config=True,
        help="Pause a runtime (checkpoint, then stop its kernel) whose kernel has been idle "
        "this many seconds with no execution; 0 turns it off. While on, jupyter-server's "
        "idle culler (cull_idle_timeout) leaves runtimes' kernels alone.",
    )

    kernel_pool_size = Integer(
        1,
        min=0,
        config=True,
        help="Started kernels kept waiting per kernelspec, so checkout and resume skip "
        "kernel start-up (0 turns the pool off). Refilled in the background.",
    )

    document_wait_seconds = Float(
        10.0,
        min=0.0,
        config=True,
        help="Seconds a checkpoint taken without a document (a magic, %autocheckpoint, the "
        "CLI) waits for the JupyterLab that has the notebook open to send it as the user "
        "sees it; meanwhile, and after, it holds the saved file (0: never wait).",
    )

    @default("data_dir")
    def _default_data_dir(self) -> str:
        return str(default_data_dir())

    service: RuntimeService | None = None
    host: ServerKernelHost | None = None
    runtime_sessions: RuntimeSessions | None = None
    idle_pauser: IdlePauser | None = None
    kernel_pool: KernelPool | None = None
    _log_parent: logging.Logger | None = None

    def kernel_env(self) -> dict[str, str]:
        """What every kernel the server starts gets in its environment (besides its id)."""
        assert self.serverapp is not None
        token = getattr(self.serverapp.identity_provider, "token", "") or ""
        return server_env(self.serverapp.connection_url, str(token), Path(self.data_dir).resolve())

    def _context_factory(
        self, host: ServerKernelHost, pool: KernelPool | None = None
    ) -> Callable[[BlobStore], ContextDriver]:
        def build(blobs: BlobStore) -> ContextDriver:
            kernels = KernelContextDriver(host, blobs.root, notebook_folder=host.notebook_folder)
            if pool is not None:
                pool.blob_root = blobs.root
            return ServerContextCapture(kernels, pool)

        return build

    def _providers(self) -> dict[str, BackendProvider]:
        try:
            from ditto_jupyter.backends.e2b import E2BConfig, E2BProvider
        except ImportError as error:  # the e2b SDK missing: local runtimes still work
            self.log.warning("ditto_jupyter: E2B backend unavailable (%s)", error)
            return {}
        return {"e2b": E2BProvider(E2BConfig(template=self.e2b_template))}

    def initialize_settings(self) -> None:
        """Open the RuntimeService and wire it to the server's kernels, sessions and events."""
        assert self.serverapp is not None
        serverapp = self.serverapp
        self._log_parent = PACKAGE_LOG.parent
        PACKAGE_LOG.parent = serverapp.log  # failed cleanups, skipped rows: in the server's log
        tokens = RuntimeTokens()
        host = ServerKernelHost(
            serverapp.kernel_manager,
            env_provider=self.kernel_env,
            call_timeout=self.kernel_call_timeout,
            runtime_tokens=tokens,
        )
        pool = None
        if self.kernel_pool_size > 0:
            pool = KernelPool(
                host,
                tokens,
                size=self.kernel_pool_size,
                data_dir=Path(self.data_dir),
                kernel_names=(serverapp.kernel_manager.default_kernel_name,),
            )
            hide_pooled_kernels(serverapp.kernel_manager, pool)
        service = open_runtime_service(
            self.data_dir,
            store_url=self.store_url,
            context_factory=self._context_factory(host, pool),
            extra_providers=self._providers(),
            default_backend=self.default_backend,
        )
        assert serverapp.event_logger is not None
        events = RuntimeEvents(serverapp.event_logger)
        sessions = RuntimeSessions(
            service,
            serverapp.session_manager,
            serverapp.contents_manager,
            events,
            host,
            tokens,
            RuntimeBudgets(self.data_dir),
            pool=pool,
        )
        sessions.documents.wait_seconds = self.document_wait_seconds  # issue 23
        self.host, self.service, self.runtime_sessions = host, service, sessions
        self.kernel_pool = pool
        self.settings["ditto_runtime_sessions"] = sessions
        install_kernel_env(serverapp.session_manager, self.kernel_env, tokens)
        if self.load_magics:
            install_magics_autoload(serverapp.kernel_manager, serverapp.kernel_spec_manager)
        if self.pause_idle_after > 0:
            self.idle_pauser = IdlePauser(
                sessions,
                serverapp.kernel_manager,
                self.pause_idle_after,
                sender=getpass.getuser(),
                log=self.log,
            )
            self.idle_pauser.defer_culling()
            self.idle_pauser.start()
        self.log.info("ditto_jupyter: runtime store in %s", self.data_dir)

    def initialize_handlers(self) -> None:
        self.handlers.extend(route_table(openapi_document))
        # Checkout children are Jupyter sessions whose id is the source id plus a suffix,
        # which jupyter_server's UUID-shaped /api/sessions/{id} pattern does not match;
        # serve those ids with the server's own SessionHandler so JupyterLab can rename
        # and shut them down like any other session.
        self.handlers.append((CHILD_SESSION_ROUTE, SessionHandler))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Once the server's loop runs: start the warm kernel pool in the background."""
        if self.kernel_pool is not None:
            self.kernel_pool.refill_soon()

    async def stop_extension(self) -> None:
        """Stop the idle pauser and the pooled kernels; close kernel clients and the store."""
        if self.runtime_sessions is not None:
            self.runtime_sessions.documents.close()  # issue 23: pending documents' timers
        if self.idle_pauser is not None:
            self.idle_pauser.stop()
        if self.kernel_pool is not None:
            await self.kernel_pool.close()
        if self.host is not None:
            await self.host.wait_deferred()
            await self.host.close()
        if self.service is not None:
            self.service.close_store()
        if self._log_parent is not None:
            PACKAGE_LOG.parent = self._log_parent


def install_kernel_env(
    session_manager: Any,
    env_provider: Callable[[], dict[str, str]],
    runtime_tokens: RuntimeTokens | None = None,
) -> None:
    """Give kernels of Jupyter sessions the DITTO_* variables, their session id included.

    Wraps three methods on the server's session-manager instance (not its class):
    `start_kernel_for_session` and `update_session` record which session they work for,
    and `get_kernel_env` (which both call) adds the variables for that session.
    """
    if getattr(session_manager, "_ditto_env_installed", False):
        return
    original_env = session_manager.get_kernel_env
    original_start = session_manager.start_kernel_for_session
    original_update = session_manager.update_session

    @functools.wraps(original_env)
    def get_kernel_env(path: str | None, name: Any = None) -> dict[str, str]:
        env = dict(original_env(path, name))
        env.update(env_provider())
        session_id = _session_in_progress.get()
        if session_id:
            env.update(runtime_identity_env(session_id))
            if runtime_tokens is not None:
                env.update(runtime_tokens.kernel_env(session_id))
        return env

    @functools.wraps(original_start)
    async def start_kernel_for_session(session_id: str, *args: Any, **kwargs: Any) -> str:
        token = _session_in_progress.set(session_id)
        try:
            kernel_id: str = await original_start(session_id, *args, **kwargs)
            return kernel_id
        finally:
            _session_in_progress.reset(token)

    @functools.wraps(original_update)
    async def update_session(session_id: str, **kwargs: Any) -> None:
        token = _session_in_progress.set(session_id)
        try:
            await original_update(session_id, **kwargs)
        finally:
            _session_in_progress.reset(token)

    session_manager.get_kernel_env = get_kernel_env
    session_manager.start_kernel_for_session = start_kernel_for_session
    session_manager.update_session = update_session
    session_manager._ditto_env_installed = True


MAGICS_ARGUMENT = "--ext=ditto_jupyter"


def is_ipython_kernel(argv: list[str]) -> bool:
    """Whether a kernel spec's command line starts an ipykernel (the magics are IPython's)."""
    return any("ipykernel" in part for part in argv)


def install_magics_autoload(kernel_manager: Any, kernel_spec_manager: Any) -> None:
    """Start every IPython kernel of this server with `--ext=ditto_jupyter`.

    Wraps `start_kernel` on the server's kernel-manager instance; IPython's own `--ext`
    alias loads the extension at kernel start (and again after a restart, which reuses the
    launch arguments). Kernels of other languages are started unchanged.
    """
    if getattr(kernel_manager, "_ditto_magics_installed", False):
        return
    original_start = kernel_manager.start_kernel

    @functools.wraps(original_start)
    async def start_kernel(*args: Any, **kwargs: Any) -> str:
        name = kwargs.get("kernel_name") or kernel_manager.default_kernel_name
        try:
            argv = list(kernel_spec_manager.get_kernel_spec(name).argv)
        except Exception:  # an unknown kernel name: let the manager report it
            argv = []
        if is_ipython_kernel(argv):
            extra = list(kwargs.get("extra_arguments") or [])
            if MAGICS_ARGUMENT not in extra:
                kwargs["extra_arguments"] = [*extra, MAGICS_ARGUMENT]
        kernel_id: str = await original_start(*args, **kwargs)
        return kernel_id

    kernel_manager.start_kernel = start_kernel
    kernel_manager._ditto_magics_installed = True

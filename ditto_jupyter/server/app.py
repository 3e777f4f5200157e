"""The ditto_jupyter Jupyter server extension: the runtime REST API, events, kernel env.

Enabled by `jupyter-config/jupyter_server_config.d/ditto_jupyter.json`. Configure with
`--DittoJupyterApp.data_dir=...` (or `c.DittoJupyterApp.*` in jupyter_server_config.py):
`data_dir` (SQLite store, blob store, workspaces), `store_url` (SQLAlchemy URL, for
PostgreSQL), `default_backend` (`local` or `e2b`), `e2b_template`, `pause_idle_after`
(seconds of kernel idleness after which a runtime pauses; `idle_pauser.py`), `kernel_pool_size`
(warm kernels per kernelspec for checkout and resume, see `kernel_pool`), and the object
store the blob store is replicated to: `blob_store_url` (`s3://bucket/prefix`),
`blob_store_endpoint`, `blob_store_region`, `blob_secret_file` (the signing secret all
servers share), `blob_cache_bytes`, `checkpoint_durability` (`blob_store_traits`), and the
parts a deployment may swap for its own classes: `store_class`, `backend_provider_class`,
`context_driver_class` (`swappable_parts`).

IPython kernels the server starts load the magics (`--ext=ditto_jupyter`, trait
`load_magics`) and get `DITTO_SERVER_URL`, `DITTO_TOKEN`, `DITTO_DATA_DIR`,
`DITTO_RUNTIME_ID` (their session id) and `DITTO_RUNTIME_TOKEN` (proof of that id for the
`self/...` routes, see `runtime_tokens`) in their environment, so the magics can call back.
Kernels of ordinary Jupyter sessions get them through the session manager's hooks, kernels
started by the extension itself (checkout, resume) through `ServerKernelHost`. Every patch
of jupyter-server lives in `jupyter_hooks`, installed here and removed in `stop_extension`.

The server holds a lease on every live runtime it runs (`lease_ttl`, renewed by the kernel
watcher), so a second server on the same data directory never touches them; the kernel
watcher (`kernel_watcher`) is the one part that records a runtime's kernel dead,
restarted, or its server gone.

A setting that is wrong (a malformed `blob_store_url`, a missing or short
`blob_secret_file`, a `store_url` that is not one or whose database refuses, an object
store prefix another deployment owns, a value that does not fit its setting: a word for a
number, a number below its minimum, not one of the choices) is found as the extension
starts. The server then starts without it: one line naming the setting goes to the log at
ERROR, every route of the extension answers 503 `ConfigurationError` with that line, and
jupyter-server's idle culler leaves every kernel alone (nothing pauses them), until the
setting is fixed and the server restarted. Why not refuse to start: jupyter-server has no
way for an extension to stop the server (a failing extension is logged and left out, which
is how every route came to answer 404 and the culler to kill kernels), and the users'
notebooks, files and running kernels stay in reach meanwhile; the answer of every ditto
call says what is wrong where they see it (the panel, the magics, the `ditto` command).
A PostgreSQL store that is not reachable yet is no wrong setting: the extension tries
again for `store_connect_timeout` seconds (`store_wait`), answering 503 `StoreUnavailable`
meanwhile, then starts as it would have (or, once the time is up, runs without ditto as
above). Kernels started in that time get no ditto magics or variables.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.services.sessions.handlers import SessionHandler
from traitlets import Bool, Float, Integer, TraitError, Unicode, default

from ditto_jupyter.backends.base import BackendProvider
from ditto_jupyter.control.budget_registry import RuntimeBudgets
from ditto_jupyter.control.context_driver import ContextDriver
from ditto_jupyter.control.off_loop import off_loop
from ditto_jupyter.control.ownership import this_process
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.control.store import StoreUnreachable
from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.environment import (
    STORE_URL_ENV,
    default_data_dir,
    runtime_identity_env,
    server_env,
)
from ditto_jupyter.core.errors import ConfigurationError
from ditto_jupyter.server.blob_store_traits import BlobStoreTraits
from ditto_jupyter.server.event_stream import SUBSCRIBE_ROUTE, UserEventStream
from ditto_jupyter.server.events import RuntimeEvents
from ditto_jupyter.server.handlers import CONFIGURATION_ERROR, STORE_PENDING, route_table
from ditto_jupyter.server.idle_pauser import IdlePauser
from ditto_jupyter.server.jupyter_hooks import JupyterHooks, SessionEvents
from ditto_jupyter.server.kernel_pool import KernelPool
from ditto_jupyter.server.kernel_watcher import WATCH_INTERVAL_S, KernelWatcher
from ditto_jupyter.server.openapi import openapi_document
from ditto_jupyter.server.runtime_tokens import RuntimeTokens
from ditto_jupyter.server.server_context import ServerContextCapture
from ditto_jupyter.server.server_kernel_host import ServerKernelHost
from ditto_jupyter.server.sessions import RuntimeSessions
from ditto_jupyter.server.setting_values import drop_bad_settings, setting_error_line
from ditto_jupyter.server.store_wait import open_with_backoff, unreachable_line
from ditto_jupyter.server.swappable_parts import SwappableParts
from ditto_jupyter.server.user_scope import server_user
from ditto_jupyter.wiring import open_runtime_service

#: The package's loggers (`logging.getLogger(__name__)` in control/, backends/, ...): under a
#: server they write to the server's log, with its format and level (`initialize_settings`).
PACKAGE_LOG = logging.getLogger("ditto_jupyter")

#: Session ids with more than five dash-separated parts (checkout children and their children).
CHILD_SESSION_ROUTE = r"/api/sessions/(?P<session_id>\w+(?:-\w+){5,})"


class DittoJupyterApp(BlobStoreTraits, SwappableParts, ExtensionApp):
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
        help="SQLAlchemy URL of the checkpoint store (default: $DITTO_STORE_URL, else a "
        "SQLite file in data_dir).",
    )

    @default("store_url")
    def _default_store_url(self) -> str | None:
        return os.environ.get(STORE_URL_ENV) or None

    default_backend = Unicode(
        "local",
        config=True,
        help="Backend of new runtimes: local, e2b, or the kind of backend_provider_class.",
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

    lease_ttl = Float(
        30.0,
        min=1.0,
        config=True,
        help="Seconds a lease on a live runtime lasts between this server's heartbeats "
        "(every third of it). Another server sharing the store (on another host) takes the "
        "runtimes of a server that died over once its leases ran out; on the same host, "
        "as soon as its process is gone.",
    )

    store_lock_timeout = Float(
        30.0,
        min=0.001,
        config=True,
        help="Seconds a store write waits at most for the store's write lock (SQLite's busy "
        "timeout, PostgreSQL's lock_timeout) before it answers 503 StoreUnavailable: a "
        "server frozen inside a write never stops the others.",
    )

    store_connect_timeout = Float(
        60.0,
        min=0.0,
        config=True,
        help="Seconds a starting server keeps trying to reach a PostgreSQL store that is not "
        "reachable (down, or not up yet), with backoff; meanwhile every ditto route answers "
        "503 StoreUnavailable. Then ditto is off until a restart (0: no second try).",
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
    hooks: JupyterHooks | None = None
    watcher: KernelWatcher | None = None
    #: Why the extension did not start (a setting that is wrong), or None: it runs.
    configuration_error: str | None = None
    #: While the store is not reachable yet: the task trying again (`store_wait`).
    _store_task: asyncio.Task[None] | None = None
    _open_later: Callable[[], RuntimeService] | None = None
    _store_error: StoreUnreachable | None = None
    _start_later: Callable[[RuntimeService], None] | None = None
    #: Lines of settings whose value did not fit (`setting_values`), found while linking.
    setting_errors: list[str] = []
    _log_parent: logging.Logger | None = None

    @staticmethod
    def server_user() -> str:
        """Who runs this server: the hub user on JupyterHub, else the OS user. The sender
        and owner of the runtimes its Jupyter sessions become (a session is made without a
        user), and the user of requests whose identity provider names nobody."""
        return server_user()

    def kernel_env(self) -> dict[str, str]:
        """What every kernel the server starts gets in its environment (besides its id)."""
        assert self.serverapp is not None
        token = getattr(self.serverapp.identity_provider, "token", "") or ""
        return server_env(self.serverapp.connection_url, str(token), Path(self.data_dir).resolve())

    def _context_factory(
        self, host: ServerKernelHost, pool: KernelPool | None = None
    ) -> Callable[[BlobStore], ContextDriver]:
        def build(blobs: BlobStore) -> ContextDriver:
            kernels = self.context_driver(host, blobs.root, host.notebook_folder)
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

    def _link_jupyter_server_extension(self, serverapp: Any) -> None:
        """Link as jupyter-server does, but a value that does not fit its setting is a
        setting that is wrong (`setting_values`): dropped, kept as a line, and the
        extension links, to answer 503 with it, rather than be left out."""
        self.setting_errors = drop_bad_settings(self, serverapp.config)
        try:
            super()._link_jupyter_server_extension(serverapp)
        except TraitError as error:  # a value in a config file of the extension's own
            self.setting_errors.append(setting_error_line(type(self).__name__, "config", error))
            serverapp.update_config(self.config)
            self._linked = True  # what the base class sets last, once linked

    def initialize_settings(self) -> None:
        """Open the RuntimeService and wire it to the server's kernels, sessions and events."""
        assert self.serverapp is not None
        serverapp = self.serverapp
        self._log_parent = PACKAGE_LOG.parent
        PACKAGE_LOG.parent = serverapp.log  # failed cleanups, skipped rows: in the server's log
        if self.setting_errors:
            self._run_without_ditto(ConfigurationError("; ".join(self.setting_errors)))
            return
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
        try:
            service = self._open_service(host, pool)
        except StoreUnreachable as error:  # not up yet, maybe: tried again once the loop runs
            self._wait_for_store(error, lambda: self._open_service(host, pool))
            self._start_later = lambda opened: self._start_ditto(opened, host, pool, tokens)
            return
        except Exception as error:  # a wrong setting: the server runs on without ditto
            self._run_without_ditto(error)
            return
        self._start_ditto(service, host, pool, tokens)

    def _start_ditto(
        self,
        service: RuntimeService,
        host: ServerKernelHost,
        pool: KernelPool | None,
        tokens: RuntimeTokens,
    ) -> None:
        """Wire an opened service to the server's sessions, kernels, events and culler."""
        assert self.serverapp is not None
        serverapp = self.serverapp
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
            server_user=self.server_user(),
        )
        sessions.documents.wait_seconds = self.document_wait_seconds  # issue 23
        self.host, self.service, self.runtime_sessions = host, service, sessions
        self.kernel_pool = pool
        self._publish("ditto_runtime_sessions", sessions)
        self.watcher = KernelWatcher(
            sessions,
            serverapp.kernel_manager,
            interval=min(WATCH_INTERVAL_S, self.lease_ttl / 3.0),
            heartbeat=self.lease_ttl / 3.0,
            log=self.log,
        )
        sessions.kernel_listeners.append(self.watcher.watch)
        self.hooks = JupyterHooks(
            serverapp.session_manager, serverapp.kernel_manager, serverapp.kernel_spec_manager
        )
        if pool is not None:
            pool.spare_from_culling(self.hooks.culling)
        if self.pause_idle_after > 0:
            self.idle_pauser = IdlePauser(
                sessions,
                serverapp.kernel_manager,
                self.pause_idle_after,
                sender=self.server_user(),
                log=self.log,
            )
            self.idle_pauser.defer_culling(self.hooks.culling)
        self.hooks.install(
            self._session_events(sessions, tokens),
            load_magics=self.load_magics,
            hidden_kernels=pool.kernel_ids if pool is not None else None,
        )
        self.watcher.start()
        if self.idle_pauser is not None:
            self.idle_pauser.start()
        self.log.info("ditto_jupyter: runtime store in %s", self.data_dir)

    def _open_service(self, host: ServerKernelHost, pool: KernelPool | None) -> RuntimeService:
        """The RuntimeService the settings name, its object store prefix checked to be this
        deployment's; ConfigurationError naming a setting that is wrong."""
        assert self.serverapp is not None
        service = open_runtime_service(
            self.data_dir,
            store_url=self.store_url,
            context_factory=self._context_factory(host, pool),
            extra_providers=self._providers(),
            default_backend=self.default_backend,
            lease_holder=this_process(url=self.serverapp.connection_url),
            lease_ttl_ms=round(self.lease_ttl * 1000),
            object_store=self.object_store(),
            store_factory=self.store_factory(),
            provider_factory=self.provider_factory(),
            store_lock_timeout_ms=max(1, round(self.store_lock_timeout * 1000)),
        )
        try:
            service.replication.check_at_start()
        except BaseException:
            service.close_store()
            raise
        return service

    def _wait_for_store(
        self, error: StoreUnreachable, open_once: Callable[[], RuntimeService]
    ) -> None:
        """The store is not reachable: answer 503 StoreUnavailable, spare every kernel from
        the culler, and try again once the loop runs (`_connect_store`)."""
        assert self.serverapp is not None
        if self.store_connect_timeout <= 0:
            self._run_without_ditto(ConfigurationError(f"store_url (DITTO_STORE_URL): {error}"))
            return
        self._store_failed(error, 1)
        self._open_later, self._store_error = open_once, error
        hooks = JupyterHooks(
            self.serverapp.session_manager,
            self.serverapp.kernel_manager,
            self.serverapp.kernel_spec_manager,
        )
        hooks.culling.spare("ditto_jupyter waits for its store", lambda kernel_id: True)
        hooks.install_culling_only()
        self.hooks = hooks

    def _store_failed(self, error: StoreUnreachable, attempt: int) -> None:
        line = unreachable_line(error, self.store_connect_timeout)
        self._publish(STORE_PENDING, line)
        self.log.warning("ditto_jupyter: attempt %d: %s", attempt, line)

    async def _connect_store(self, serverapp: Any) -> None:
        """Open the store again with backoff; once open, start as at a first try."""
        assert self._open_later is not None and self._start_later is not None
        assert self._store_error is not None
        try:
            service = await open_with_backoff(
                self._open_later, self._store_error, self.store_connect_timeout, self._store_failed
            )
        except Exception as error:
            if isinstance(error, StoreUnreachable):
                error = ConfigurationError(
                    f"store_url (DITTO_STORE_URL): not reachable within "
                    f"{self.store_connect_timeout:g} s (store_connect_timeout): {error}"
                )
            self._stop_waiting()
            self._run_without_ditto(error)
            return
        self._stop_waiting()
        self._start_later(service)
        self.log.info("ditto_jupyter: the checkpoint store is reachable; ditto is on")
        await self._started(serverapp)

    def _publish(self, key: str, value: Any) -> None:
        """Set (None: remove) a setting the handlers read: in the extension's settings and,
        once the web application has copied them, in its own too (a late start)."""
        web_app = getattr(self.serverapp, "web_app", None)
        for settings in (self.settings, getattr(web_app, "settings", None)):
            if settings is None:
                continue
            if value is None:
                settings.pop(key, None)
            else:
                settings[key] = value

    def _stop_waiting(self) -> None:
        """The wait is over: its culling rule and its 503 go."""
        if self.hooks is not None:
            self.hooks.uninstall()
            self.hooks = None
        self._publish(STORE_PENDING, None)

    def _run_without_ditto(self, error: Exception) -> None:
        """Start the server without the extension (see the module): the line, 503 on
        every route, and no culling."""
        assert self.serverapp is not None
        if isinstance(error, ConfigurationError):
            line = str(error)
        else:  # not a setting we know: still one line, saying what failed
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            line = f"the extension could not start: {type(error).__name__}: {first}".rstrip(": ")
        self.configuration_error = line
        self._publish(CONFIGURATION_ERROR, line)
        self.log.error(
            "ditto_jupyter is off: %s. Every ditto route answers 503 and the idle culler "
            "stops no kernel until this is fixed and the server restarted",
            line,
        )
        hooks = JupyterHooks(
            self.serverapp.session_manager,
            self.serverapp.kernel_manager,
            self.serverapp.kernel_spec_manager,
        )
        hooks.culling.spare("ditto_jupyter is off (a setting is wrong)", lambda kernel_id: True)
        hooks.install_culling_only()
        self.hooks = hooks

    def _session_events(self, sessions: RuntimeSessions, tokens: RuntimeTokens) -> SessionEvents:
        """What the session hooks do: the kernel's variables, and keeping runtimes in step."""
        user = self.server_user()

        def runtime_env(session_id: str) -> dict[str, str]:
            return {**runtime_identity_env(session_id), **tokens.kernel_env(session_id)}

        async def created(model: dict[str, Any]) -> None:
            await sessions.register_session(model, user)

        return SessionEvents(
            kernel_env=self.kernel_env,
            runtime_env=runtime_env,
            created=created,
            kernel_switched=sessions.kernel_switched,
            path_changed=sessions.path_changed,
        )

    def initialize_handlers(self) -> None:
        self.handlers.extend(route_table(openapi_document))
        # Checkout children are Jupyter sessions whose id is the source id plus a suffix,
        # which jupyter_server's UUID-shaped /api/sessions/{id} pattern does not match;
        # serve those ids with the server's own SessionHandler so JupyterLab can rename
        # and shut them down like any other session.
        self.handlers.append((CHILD_SESSION_ROUTE, SessionHandler))
        # Each runtime event to its owner only, in place of the server's own stream.
        self.handlers.append((SUBSCRIBE_ROUTE, UserEventStream))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Once the server's loop runs: register the sessions that exist, take over the
        runtimes of servers that are gone (the watcher's first round), start the warm
        kernel pool. A store not reachable yet: all that once it is."""
        if self._open_later is not None and self.configuration_error is None:
            self._store_task = asyncio.ensure_future(self._connect_store(serverapp))
            return
        await self._started(serverapp)

    async def _started(self, serverapp: Any) -> None:
        if self.service is not None:  # with --port=0 the port is known only now
            self.service.ownership.answer_at(serverapp.connection_url)
        if self.runtime_sessions is not None:
            await self.runtime_sessions.register_existing(self.server_user())
        if self.watcher is not None:
            await self.watcher.check_once()
        if self.kernel_pool is not None:
            self.kernel_pool.refill_soon()

    async def stop_extension(self) -> None:
        """Stop the watcher, the idle pauser and the pooled kernels; remove the hooks; close
        kernel clients and the store (this server's leases run out)."""
        if self._store_task is not None:
            self._store_task.cancel()
        if self.watcher is not None:
            await self.watcher.stop()
        if self.runtime_sessions is not None:
            self.runtime_sessions.documents.close()  # pending documents' timers
        if self.idle_pauser is not None:
            self.idle_pauser.stop()
        if self.hooks is not None:
            self.hooks.uninstall()
        if self.kernel_pool is not None:
            await self.kernel_pool.close()
        if self.host is not None:
            await self.host.wait_deferred()
            await self.host.close()
        if self.service is not None:
            await off_loop(self.service.close_store)  # its leases run out: a store write
        if self._log_parent is not None:
            PACKAGE_LOG.parent = self._log_parent

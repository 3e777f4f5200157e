"""A kernel start lost to a port taken meanwhile is started again on new ports, under a
real Jupyter server; a kernel that dies for its own reasons still gets its clear error.

The CI flake: a checkout's kernel died with `ZMQError: Address already in use` and the
checkout answered 502 "kernel ... did not start: Kernel died before replying to
kernel_info". Here the first port of the checkout's kernel is held on purpose
(`tests.fakes.taken_port`). The checkout must succeed, its kernel answer with the restored
variables, and the dead start must not look like a restart of the runtime (the kernel
watcher records no `lost`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.core.errors import BackendError
from ditto_jupyter.hosts.kernel_start import START_ATTEMPTS
from ditto_jupyter.server.app import DittoJupyterApp
from tests.fakes.taken_port import first_port_taken
from tests.server.conftest import Api, OpenRuntime
from tests.server.notebook_sessions import user_variables
from tests.support.dying_kernel import write_dying_kernel_spec

pytestmark = pytest.mark.slow  # real kernels, one of them started three times

AGAIN = "starting it again on new ports"


@pytest.fixture
def ditto_load_magics() -> bool:
    return False  # REST only


def restarts_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if AGAIN in r.getMessage()]


def connection_files(jp_serverapp: Any) -> set[str]:
    return {path.name for path in Path(jp_serverapp.kernel_manager.connection_dir).iterdir()}


async def test_a_checkout_whose_kernel_port_was_taken_succeeds_on_new_ports(
    api: Api,
    open_runtime: OpenRuntime,
    ditto_app: DittoJupyterApp,
    jp_serverapp: Any,
    events: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="ditto_jupyter.hosts.kernel_start")
    source = await open_runtime("taken.ipynb", x=41)
    code, checkpoint = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})
    assert code == 200, checkpoint
    manager = jp_serverapp.kernel_manager
    kernels_before = set(manager.list_kernel_ids())

    with first_port_taken() as taken:
        code, child = await api("POST", "checkout", {"checkpoint_id": checkpoint["checkpoint_id"]})
    assert code == 200, child
    assert taken.handed_out == 1  # the checkout's first kernel was given the held port
    (logged,) = restarts_logged(caplog)
    kernel_id = child["kernel_id"]
    assert kernel_id in logged and str(taken.port) in logged

    assert await user_variables(ditto_app, kernel_id) == {"x": 41}
    assert set(manager.list_kernel_ids()) - kernels_before == {kernel_id}
    assert taken.port not in manager.get_kernel(kernel_id).ports
    # the kernel that died starting is no restart of the new runtime
    assert ditto_app.watcher is not None
    assert await ditto_app.watcher.check_once() == []
    await jp_serverapp.event_logger.gather_listeners()
    assert [e for e in events if e["action"] == "lost"] == []
    child_id = child["runtime"]["runtime_id"]
    code, record = await api("GET", child_id)
    assert (code, record["status"]) == (200, "idle"), record


async def test_a_server_kernel_that_always_dies_gets_the_clear_error_after_its_starts(
    ditto_app: DittoJupyterApp,
    jp_serverapp: Any,
    jp_kernel_dir: Path,
    jp_root_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="ditto_jupyter.hosts.kernel_start")
    dying = write_dying_kernel_spec(jp_kernel_dir)
    manager = jp_serverapp.kernel_manager
    kernels_before = set(manager.list_kernel_ids())
    files_before = connection_files(jp_serverapp)
    assert ditto_app.host is not None

    with pytest.raises(BackendError) as failed:
        await ditto_app.host.start_kernel(dying, cwd=jp_root_dir)
    message = str(failed.value)
    assert "did not start: it died before it answered" in message
    assert f"in each of its {START_ATTEMPTS} starts" in message
    assert len(restarts_logged(caplog)) == START_ATTEMPTS - 1
    assert set(manager.list_kernel_ids()) == kernels_before
    assert connection_files(jp_serverapp) == files_before

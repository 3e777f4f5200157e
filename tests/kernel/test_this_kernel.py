"""`this_kernel`: the one owner of this kernel's runtime control, which `workspace()`,
adoption by a runtime and the widgets ask. Runs in-process on real LocalControls (a real
SQLite store under tmp_path); the environment, folder and `sys.path` are put back."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_jupyter.core.environment import RUNTIME_ID_ENV, WORKSPACE_ENV
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.kernel import this_kernel
from ditto_jupyter.kernel.adoption import adopt_runtime
from ditto_jupyter.kernel.local_control import LocalControl
from ditto_jupyter.kernel.runtime_control import RuntimeControl
from ditto_jupyter.kernel.this_kernel import KernelControl
from ditto_jupyter.kernel.workspace import workspace


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[LocalControl]]:
    """No control installed and no DITTO_* variable; what the test changes is undone.

    Yields a list the test puts its LocalControls in, shut down afterwards.
    """
    environ, cwd, path = dict(os.environ), os.getcwd(), list(sys.path)
    monkeypatch.setattr(this_kernel, "_installed", None)
    for name in [name for name in os.environ if name.startswith("DITTO_")]:
        del os.environ[name]
    controls: list[LocalControl] = []
    try:
        yield controls
    finally:
        for control in controls:
            control.shutdown()
        os.chdir(cwd)
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(environ)


def test_no_control_says_what_to_do(isolated: list[LocalControl]) -> None:
    with pytest.raises(InvalidRequest, match="run `%load_ext ditto_jupyter` first"):
        workspace()
    assert this_kernel.runtime_id() is None


def test_workspace_asks_this_kernels_control(isolated: list[LocalControl], tmp_path: Path) -> None:
    control = LocalControl({}, data_dir=tmp_path / "data", conversation_id="w.ipynb")
    isolated.append(control)
    this_kernel.install(KernelControl(lambda _: control))
    del os.environ[WORKSPACE_ENV]  # as after a kernel restart: only the control knows
    assert workspace() == control.workspace_path()
    assert os.environ[WORKSPACE_ENV] == str(control.workspace_path())
    assert this_kernel.runtime_id() == control.runtime_id


def test_adoption_builds_the_control_again_for_the_new_runtime(
    isolated: list[LocalControl], tmp_path: Path
) -> None:
    data, folder = tmp_path / "data", tmp_path / "notebooks"
    folder.mkdir()

    def from_environment(kernel_control: KernelControl) -> RuntimeControl:
        control = LocalControl(
            {},
            data_dir=data,
            runtime_id=os.environ.get(RUNTIME_ID_ENV),
            notebook_folder=kernel_control.notebook_folder,
        )
        isolated.append(control)
        return control

    owner = KernelControl(from_environment)
    this_kernel.install(owner)
    first = this_kernel.control()
    owner.last_manifest = "a manifest of the first runtime"
    adopted = uuid.uuid4().hex
    adopt_runtime(adopted, "token", str(data), str(folder))
    assert owner.built is None and owner.last_manifest is None
    assert owner.notebook_folder == folder
    second = this_kernel.control()
    assert second.runtime_id == adopted != first.runtime_id
    assert this_kernel.control() is second

"""Where the server starts a runtime's kernels: its notebook's folder, never outside the root.

`ServerKernelHost.notebook_folder` on jupyter-server's own kernel manager (no kernel is
started): the notebook path is a runtime's conversation id, relative to the server's root
like a Jupyter session's path.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.server.server_kernel_host import ServerKernelHost


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    (folder / "project" / "sub").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (folder / "escape").symlink_to(tmp_path / "outside")
    return folder.resolve()


def folder_for(root: Path, conversation_id: str) -> Path:
    host = ServerKernelHost(MappingKernelManager(root_dir=str(root)))
    session = SessionRecord(session_id="r", conversation_id=conversation_id, sender_id="ana")
    return host.notebook_folder(session)


@pytest.mark.parametrize(
    ("conversation_id", "expected"),
    [
        ("project/sub/analysis.ipynb", "project/sub"),
        ("/project/sub/analysis-1a2b3c4d.ipynb", "project/sub"),  # a checkout's copy
        ("project/analysis.ipynb", "project"),
        ("analysis.ipynb", ""),
        ("project/missing/analysis.ipynb", "project"),  # walked up to a folder that exists
        ("ipython", ""),  # not a notebook path: the root
        ("../../etc/analysis.ipynb", ""),  # outside the root: the root
        ("escape/analysis.ipynb", ""),  # a symlink leading outside: the root
    ],
)
def test_a_runtimes_kernels_run_in_its_notebooks_folder(
    root: Path, conversation_id: str, expected: str
) -> None:
    assert folder_for(root, conversation_id) == root / expected

"""`adopt_runtime` (the warm pool's kernel call) refuses bad input before it changes anything.

The call on a real pooled kernel is tested in tests/server/test_kernel_pool.py; here it runs
in-process, only with input it must refuse (a valid call would move this process).
"""

from __future__ import annotations

import os

import pytest

from ditto_jupyter.core.environment import without_runtime_identity
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.kernel.adoption import adopt_runtime

GOOD = {"runtime_id": "r1", "runtime_token": "t1", "data_dir": "/data", "cwd": "/"}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"runtime_id": ""}, "runtime_id"),
        ({"runtime_token": 7}, "runtime_token"),
        ({"data_dir": "relative/data"}, "data_dir"),
        ({"cwd": "notebooks"}, "cwd"),
        ({"cwd": "/no/such/folder/for/ditto"}, "/no/such/folder/for/ditto"),
        ({"workspace": "ws"}, "workspace"),
    ],
)
def test_bad_identity_is_refused_and_changes_nothing(change: dict[str, object], named: str) -> None:
    environ, cwd = dict(os.environ), os.getcwd()
    with pytest.raises(InvalidRequest, match=named):
        adopt_runtime(**{**GOOD, **change})  # type: ignore[arg-type]
    assert (dict(os.environ), os.getcwd()) == (environ, cwd)


def test_a_pooled_kernel_inherits_no_runtime_identity() -> None:
    inherited = {
        "PATH": "/bin",
        "DITTO_SERVER_URL": "http://x/",
        "DITTO_RUNTIME_ID": "r0",
        "DITTO_RUNTIME_TOKEN": "t0",
        "DITTO_WORKSPACE": "/w0",
    }
    assert without_runtime_identity(inherited) == {"PATH": "/bin", "DITTO_SERVER_URL": "http://x/"}

"""Repository-wide pytest setup (tests/ and the nbval notebooks in notebooks/).

Kernels that nbval starts have no server behind them, and no fixture runs before they
start, so their environment is set here, in pytest_configure: the magics' embedded store
goes to a throwaway data directory, never the user's own.
"""

from __future__ import annotations

import os
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("DITTO_TEST_KEEP_ENV"):
        os.environ["DITTO_DATA_DIR"] = tempfile.mkdtemp(prefix="ditto-test-data-")
        for name in ("DITTO_SERVER_URL", "DITTO_TOKEN", "DITTO_RUNTIME_ID"):
            os.environ.pop(name, None)

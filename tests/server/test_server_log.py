"""Under a server, the package's own log lines (a failed cleanup of control/, a damaged row
skipped by the store) go to the server's log, with its format and level (issue 21
section 5), and the logger is given back when the extension stops."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from ditto_jupyter.server.app import PACKAGE_LOG, DittoJupyterApp


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


class Remember(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}")


async def test_control_warnings_reach_the_servers_log(
    jp_serverapp: Any, ditto_app: DittoJupyterApp
) -> None:
    remember = Remember()
    jp_serverapp.log.addHandler(remember)
    try:
        logging.getLogger("ditto_jupyter.control.leftovers").warning("ditto: a leftover")
    finally:
        jp_serverapp.log.removeHandler(remember)
    assert remember.lines == ["ditto_jupyter.control.leftovers: ditto: a leftover"]
    assert PACKAGE_LOG.parent is jp_serverapp.log

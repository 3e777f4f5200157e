"""`DittoSaver` passes LangGraph's conformance suite without a server: the in-process
control plane the magics run (`LocalControl`) on the embedded SQLite store of a data
directory, every base and extended capability."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ditto_jupyter.kernel.local_control import LocalControl
from ditto_jupyter.langgraph import DittoSaver
from tests.langgraph_saver.conformance import EVERY_CAPABILITY, conformance, failures_of


@pytest.fixture
def control(tmp_path: Path) -> Iterator[LocalControl]:
    opened = LocalControl({}, data_dir=tmp_path / "data", notebook_folder=tmp_path)
    yield opened
    opened.shutdown()


def test_every_capability_passes_on_the_embedded_store(control: LocalControl) -> None:
    results = conformance("DittoSaver-embedded", lambda: DittoSaver(control=control))
    assert set(results) == EVERY_CAPABILITY
    assert failures_of(results) == {}

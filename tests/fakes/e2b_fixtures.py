"""Pytest fixtures for the FAKE E2B cloud; import them into a test module to use them.

`fake_e2b` starts a fresh `FakeE2BCloud` (API + envd on 127.0.0.1) for one test and points
the real `e2b` SDK at it through its environment variables (`E2B_API_KEY`, `E2B_API_URL`,
`E2B_SANDBOX_URL`), so code under test needs no special wiring to reach the fake.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.e2b_cloud import FakeE2BCloud


@pytest.fixture
def fake_e2b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeE2BCloud]:
    """A running fake E2B cloud, with the SDK's env vars pointing at it for this test."""
    cloud = FakeE2BCloud(tmp_path / "fake-e2b")
    cloud.start()
    monkeypatch.setenv("E2B_API_KEY", cloud.api_key)
    monkeypatch.setenv("E2B_API_URL", cloud.api_url)
    monkeypatch.setenv("E2B_SANDBOX_URL", cloud.sandbox_url)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    monkeypatch.delenv("E2B_ACCESS_TOKEN", raising=False)
    try:
        yield cloud
    finally:
        cloud.stop()

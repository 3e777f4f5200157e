"""The start-up wait for a store that is not reachable yet (`store_wait`): it tries again
until the store opens, one report per failed attempt, and gives up with the last error
once its time is up; any other error ends it at once. A clock of the test's own, no
waits (the backoff's delays are set to nothing)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from ditto_jupyter.control.store import StoreUnreachable
from ditto_jupyter.core.errors import ConfigurationError
from ditto_jupyter.server import store_wait
from ditto_jupyter.server.store_wait import open_with_backoff, unreachable_line


@pytest.fixture(autouse=True)
def no_delays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_wait, "FIRST_DELAY_S", 0.0)


def failing(times: int, then: Callable[[], str]) -> Callable[[], str]:
    calls = iter(range(times + 1))

    def open_once() -> str:
        if next(calls) < times:
            raise StoreUnreachable("cannot reach the checkpoint store postgresql://u:***@h/db")
        return then()

    return open_once


def test_it_tries_again_until_the_store_opens_one_report_per_failure() -> None:
    reports: list[int] = []
    first = StoreUnreachable("down")
    opened = asyncio.run(
        open_with_backoff(failing(3, lambda: "store"), first, 60.0, lambda e, n: reports.append(n))
    )
    assert opened == "store" and reports == [2, 3, 4]


def test_it_gives_up_with_the_last_error_once_the_time_is_up() -> None:
    now = [0.0]

    def clock() -> float:
        now[0] += 10.0  # every look at the clock: ten seconds later
        return now[0]

    reports: list[int] = []
    with pytest.raises(StoreUnreachable, match="cannot reach"):
        asyncio.run(
            open_with_backoff(
                failing(1000, lambda: "never"),
                StoreUnreachable("down"),
                25.0,
                lambda e, n: reports.append(n),
                clock=clock,
            )
        )
    assert reports and len(reports) < 5


def test_a_wrong_setting_ends_the_wait_at_once() -> None:
    def wrong() -> str:
        raise ConfigurationError("store_url: not a database URL")

    with pytest.raises(ConfigurationError):
        asyncio.run(open_with_backoff(wrong, StoreUnreachable("down"), 60.0, lambda e, n: None))


def test_the_line_says_not_reachable_yet_and_names_the_setting() -> None:
    line = unreachable_line(StoreUnreachable("cannot reach postgresql://u:***@h/db\nmore"), 60.0)
    assert "\n" not in line and "not reachable yet" in line and "store_connect_timeout" in line

"""A fan-out seen as one exploration (issue 44 §3), on a real server with real kernels: the
group each child records (lineage checkouts, runtime records, one checkout event per child),
a compare of N sides, and *keep this branch* closing the others."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import OpenRuntime

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def fan_out(
    api: Api, open_runtime: OpenRuntime, path: str, count: int
) -> tuple[str, str, list[str]]:
    """A source runtime holding x = 1, its checkpoint, and `count` children of it."""
    source = await open_runtime(path, x=1)
    _, cp = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})
    status, answer = await api(
        "POST", "checkout", {"checkpoint_id": cp["checkpoint_id"], "count": count}
    )
    assert status == 200, answer
    ids = [c["checkout"]["runtime"]["runtime_id"] for c in answer["children"]]
    return source.runtime_id, cp["checkpoint_id"], ids


async def test_fan_out_of_three_is_one_group_in_lineage_records_and_events(
    api: Api, open_runtime: OpenRuntime, events: list[dict[str, Any]]
) -> None:
    source, _, ids = await fan_out(api, open_runtime, "notebooks/group.ipynb", 3)
    _, lineage = await api("GET", f"{source}/lineage")
    groups = {c["runtime_id"]: c["fanout"] for c in lineage["checkouts"]}
    assert set(groups) == set(ids)
    fanout_id = groups[ids[0]]["id"]
    assert fanout_id
    for index, child in enumerate(ids):
        assert groups[child] == {"id": fanout_id, "index": index, "size": 3}
        _, record = await api("GET", child)
        assert record["fanout"] == {"id": fanout_id, "index": index, "size": 3}
    _, listing = await api("GET")
    by_id = {r["runtime_id"]: r for r in listing["runtimes"]}
    assert by_id[ids[1]]["fanout"]["index"] == 1
    assert by_id[source]["fanout"] is None
    checkouts = [e for e in events if e["action"] == "checkout" and e["ok"]]
    assert [e["runtime_id"] for e in checkouts] == ids
    assert [e["fanout"] for e in checkouts] == [
        {"id": fanout_id, "index": i, "size": 3} for i in range(3)
    ]

    # a second fan-out is another group; a single checkout is none
    _, _, again = await fan_out(api, open_runtime, "notebooks/group2.ipynb", 2)
    _, record = await api("GET", again[0])
    assert record["fanout"]["id"] != fanout_id and record["fanout"]["size"] == 2
    _, cp = await api("POST", "checkpoint", {"runtime_id": source})
    _, one = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    assert one["runtime"]["fanout"] is None

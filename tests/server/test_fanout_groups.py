"""A fan-out seen as one exploration (issue 44 §3), on a real server with real kernels: the
group each child records (lineage checkouts, runtime records, one checkout event per child),
a compare of N sides, and *keep this branch* closing the others."""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.core.models import SessionRecord
from ditto_jupyter.server.app import DittoJupyterApp
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def fan_out(
    api: Api, open_runtime: OpenRuntime, path: str, count: int
) -> tuple[str, str, list[str]]:
    """A source runtime holding x = 1, its checkpoint, and `count` children of it."""
    ids, _ = await fan_out_kernels(api, open_runtime, path, count)
    return ids[0], ids[1], ids[2:]


async def fan_out_kernels(
    api: Api, open_runtime: OpenRuntime, path: str, count: int
) -> tuple[list[str], list[str]]:
    """[source, checkpoint, child ids...] of a fan-out of a source holding x = 1 and
    w = 7, and the children's kernel ids."""
    source = await open_runtime(path, x=1, w=7)
    _, cp = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})
    status, answer = await api(
        "POST", "checkout", {"checkpoint_id": cp["checkpoint_id"], "count": count}
    )
    assert status == 200, answer
    results = [c["checkout"] for c in answer["children"]]
    ids = [r["runtime"]["runtime_id"] for r in results]
    return [source.runtime_id, cp["checkpoint_id"], *ids], [r["kernel_id"] for r in results]


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


async def test_compare_of_three_children_shows_each_side_and_what_they_share(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    ids, kernels = await fan_out_kernels(api, open_runtime, "notebooks/cmp.ipynb", 3)
    children = ids[2:]
    for kernel, cell in zip(kernels, ("x = 10", "y = 5", "z = 'hi'"), strict=True):
        await run(ditto_app, kernel, cell)
    sides = [{"runtime_id": child, "at": None} for child in children]
    status, answer = await api("POST", "compare", {"sides": sides})
    assert status == 200, answer
    assert [s["runtime_id"] for s in answer["sides"]] == children
    assert all(s["checkpoint_id"] is None for s in answer["sides"])  # live, all three
    variables = answer["variables"]
    assert variables["available"] == [True, True, True]
    rows = {row["name"]: row for row in variables["rows"]}
    assert [row["name"] for row in variables["rows"]] == sorted(rows)
    assert rows["w"]["same"] is True
    assert [v["summary"] for v in rows["w"]["values"]] == ["7", "7", "7"]
    assert rows["x"]["same"] is False
    assert [v["summary"] for v in rows["x"]["values"]] == ["10", "1", "1"]
    assert rows["y"]["same"] is False and rows["y"]["values"][0] is None
    assert rows["y"]["values"][1]["summary"] == "5" and rows["y"]["values"][2] is None
    assert [v is not None for v in rows["z"]["values"]] == [False, False, True]
    assert set(answer["files"]) == {"available", "rows"}
    assert set(answer["cells"]) == {"available", "rows"}

    # a checkpoint by name within its runtime, beside the source's checkpoint (its id)
    _, cp = await api("POST", "checkpoint", {"runtime_id": children[0], "name": "ten"})
    sides = [{"runtime_id": children[0], "at": "ten"}, {"runtime_id": ids[0], "at": ids[1]}]
    status, answer = await api("POST", "compare", {"sides": sides})
    assert status == 200, answer
    assert [s["checkpoint_id"] for s in answer["sides"]] == [cp["checkpoint_id"], ids[1]]
    rows = {row["name"]: row for row in answer["variables"]["rows"]}
    assert [v["summary"] for v in rows["x"]["values"]] == ["10", "1"]


async def test_compare_refuses_bad_sides_with_one_line(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime
) -> None:
    ids, _ = await fan_out_kernels(api, open_runtime, "notebooks/bad.ipynb", 2)
    one = {"runtime_id": ids[2], "at": None}
    for count in (1, 9):
        status, answer = await api("POST", "compare", {"sides": [one] * count})
        assert (status, answer["error"]) == (400, "InvalidRequest"), answer
        assert "2 to 8 sides" in answer["message"] and "\n" not in answer["message"]
    assert ditto_app.service is not None
    ditto_app.service.store.insert_session(
        SessionRecord(
            session_id="theirs", conversation_id="t.ipynb", sender_id="someone", owner="someone"
        )
    )
    for other in ("theirs", "nobody-at-all"):
        sides = [one, {"runtime_id": other, "at": None}]
        status, answer = await api("POST", "compare", {"sides": sides})
        assert (status, answer["error"]) == (404, "RuntimeNotFound"), answer
        assert answer["message"] == f"no runtime or Jupyter session with id {other!r}"
    sides = [one, {"runtime_id": ids[3], "at": "no-such-checkpoint"}]
    status, answer = await api("POST", "compare", {"sides": sides})
    assert (status, answer["error"]) == (404, "CheckpointNotFound"), answer


async def test_keep_closes_the_other_children_whose_checkpoints_stay(
    api: Api, open_runtime: OpenRuntime, events: list[dict[str, Any]]
) -> None:
    source, _, children = await fan_out(api, open_runtime, "notebooks/keep.ipynb", 3)
    _, before = await api("GET")

    # not a child of a fan-out: refused, nothing changes
    for lone in (source, "nobody-at-all"):
        status, answer = await api("POST", f"{lone}/keep", {})
        assert status in (400, 404), answer
        assert "\n" not in answer["message"]
    status, answer = await api("POST", f"{source}/keep", {})
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert "not a child of a fan-out" in answer["message"]
    _, after = await api("GET")
    assert after == before

    status, answer = await api("POST", f"{children[1]}/keep", {})
    assert status == 200, answer
    assert answer == {"kept": children[1], "closed": [children[0], children[2]], "failed": []}
    for child in children:
        _, record = await api("GET", child)
        assert record["status"] == ("idle" if child == children[1] else "closed")
    for closed in (children[0], children[2]):
        _, listing = await api("GET", f"{closed}/checkpoints")
        assert [c["name"] for c in listing["checkpoints"]] == ["close"], listing
    closes = [e["runtime_id"] for e in events if e["action"] == "close" and e["ok"]]
    assert closes == [children[0], children[2]]

    # again: nothing left to close
    status, answer = await api("POST", f"{children[1]}/keep", {})
    assert answer == {"kept": children[1], "closed": [], "failed": []}

"""Checkout of N children at once (`count`, issue 44 §1) through the REST route, on real
kernels: each child its own runtime, kernel, workspace and notebook copy, each succeeding
or failing on its own; the cap of 20 said in the error; E2B children from the one provider
snapshot of the fake cloud, one refused by the provider while the others go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.server.app import DittoJupyterApp
from tests.fakes.e2b_cloud import ROUTE_CREATE_SANDBOX, FakeE2BCloud
from tests.fakes.e2b_fixtures import fake_e2b  # noqa: F401
from tests.server.conftest import OpenRuntime
from tests.server.notebook_sessions import run

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


async def test_count_gives_children_each_with_its_kernel_workspace_and_notebook(
    api: Api, ditto_app: DittoJupyterApp, open_runtime: OpenRuntime, jp_root_dir: Path
) -> None:
    source = await open_runtime("notebooks/fan.ipynb", "x = 41", x=41)
    _, cp = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})

    status, answer = await api(
        "POST", "checkout", {"checkpoint_id": cp["checkpoint_id"], "count": 4}
    )
    assert status == 200, answer
    children = answer["children"]
    assert [c["index"] for c in children] == [0, 1, 2, 3]
    assert all(c["error"] is None for c in children), children
    results = [c["checkout"] for c in children]
    assert answer["runtime"]["runtime_id"] == results[0]["runtime"]["runtime_id"]
    ids = {r["runtime"]["runtime_id"] for r in results}
    kernels = {r["kernel_id"] for r in results}
    notebooks = {r["notebook_path"] for r in results}
    assert len(ids) == len(kernels) == len(notebooks) == 4
    for result in results:
        assert (jp_root_dir / result["notebook_path"]).is_file()
        assert result["runtime"]["conversation_id"] == result["notebook_path"]
        # each child holds the variables and a workspace of its own
        out = await run(ditto_app, result["kernel_id"], "x += 1\nprint(x)")
        assert out.strip() == "42"
        _, where = await api("GET", f"{result['runtime']['runtime_id']}/workspace")
        assert where["path"] is not None
    paths = set()
    for result in results:
        _, where = await api("GET", f"{result['runtime']['runtime_id']}/workspace")
        paths.add(where["path"])
    assert len(paths) == 4
    _, lineage = await api("GET", f"{source.runtime_id}/lineage")
    assert {c["runtime_id"] for c in lineage["checkouts"]} == ids

    # a single checkout answers as before, its one child listed
    status, one = await api("POST", "checkout", {"checkpoint_id": cp["checkpoint_id"]})
    assert status == 200 and [c["index"] for c in one["children"]] == [0]
    assert one["children"][0]["checkout"]["runtime"] == one["runtime"]


async def test_count_above_twenty_is_refused_naming_the_cap(
    api: Api, open_runtime: OpenRuntime
) -> None:
    source = await open_runtime("notebooks/cap.ipynb", x=1)
    _, cp = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})
    _, before = await api("GET")
    for count in (21, 0):
        status, answer = await api(
            "POST", "checkout", {"checkpoint_id": cp["checkpoint_id"], "count": count}
        )
        assert (status, answer["error"]) == (400, "InvalidRequest"), answer
        assert "count" in answer["message"] and "at most 20" in answer["message"], answer
    status, answer = await api(
        "POST",
        "checkout",
        {"checkpoint_id": cp["checkpoint_id"], "count": 2, "conversation_id": "a.ipynb"},
    )
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    _, after = await api("GET")
    assert after == before


@pytest.fixture
def e2b_server_config(jp_server_config: Any, fake_e2b: FakeE2BCloud) -> Any:  # noqa: F811
    jp_server_config["DittoJupyterApp"]["default_backend"] = "e2b"
    return jp_server_config


async def test_e2b_children_come_from_the_snapshot_and_fail_on_their_own(
    e2b_server_config: Any,
    fake_e2b: FakeE2BCloud,  # noqa: F811
    api: Api,
    ditto_app: DittoJupyterApp,
    open_runtime: OpenRuntime,
    jp_root_dir: Path,
    events: list[dict[str, Any]],
) -> None:
    source = await open_runtime("notebooks/cloud.ipynb", "x = 7", x=7)
    _, cp = await api("POST", "checkpoint", {"runtime_id": source.runtime_id})
    sandboxes_before = set(fake_e2b.running_sandbox_ids())
    notebooks_before = sorted(p.name for p in (jp_root_dir / "notebooks").glob("*.ipynb"))
    fake_e2b.fail_next(ROUTE_CREATE_SANDBOX, 500, times=1)

    status, answer = await api(
        "POST", "checkout", {"checkpoint_id": cp["checkpoint_id"], "count": 3}
    )
    assert status == 200, answer
    failed = [c for c in answer["children"] if c["checkout"] is None]
    made = [c["checkout"] for c in answer["children"] if c["checkout"] is not None]
    assert len(failed) == 1 and failed[0]["error"] == "BackendError", answer["children"]
    assert "E2B" in failed[0]["message"]
    assert len(made) == 2
    new_sandboxes = set(fake_e2b.running_sandbox_ids()) - sandboxes_before
    assert len(new_sandboxes) == 2  # the failed child's sandbox is not left running
    for result in made:
        _, where = await api("GET", f"{result['runtime']['runtime_id']}/workspace")
        assert where["backend_kind"] == "e2b"
        out = await run(ditto_app, result["kernel_id"], "print(x * 6)")
        assert out.strip() == "42"
    # the failed child left no notebook copy, no runtime
    notebooks_after = sorted(p.name for p in (jp_root_dir / "notebooks").glob("*.ipynb"))
    assert len(notebooks_after) == len(notebooks_before) + 2
    _, listing = await api("GET")
    assert len(listing["runtimes"]) == 3
    # one checkout event per child, the failed one too, each with its place in the fan-out
    checkouts = [e for e in events if e["action"] == "checkout"]
    assert [e["fanout"]["index"] for e in checkouts] == [0, 1, 2]
    assert len({e["fanout"]["id"] for e in checkouts}) == 1
    [refused] = [e for e in checkouts if not e["ok"]]
    assert refused["error"] == "BackendError" and refused["runtime_id"] == source.runtime_id
    assert refused["fanout"]["index"] == failed[0]["index"]

"""Issue 10 sections 3 and 5 on a real server with real kernels: limits, nothing poisoned.

Each test is a finding of the outside probe: a request that was accepted and then broke
reads of the store (metadata nested 200 deep), one that answered 500 (depth 300, restore
with an empty checkpoint id, exec with a NUL byte), a 10 MB name that was stored, and a
damaged row that took listings of other runtimes down. Every refused request must leave
the store as it was.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.core.limits import (
    MAX_BODY_BYTES,
    MAX_DOCUMENT_BODY_BYTES,
    MAX_METADATA_DEPTH,
    MAX_NAME_LENGTH,
)
from tests.server.conftest import OpenRuntime

Api = Any  # the `api` fixture of conftest.py


@pytest.fixture
def ditto_load_magics() -> bool:
    return False


def nested(depth: int) -> dict[str, Any]:
    """Metadata `depth` levels deep: {"k": {"k": ... {"k": 1}}}."""
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return dict(value)


async def snapshot_of_store(api: Api, *runtime_ids: str) -> Any:
    """What the API shows of the store: the runtimes and each one's checkpoints."""
    _, listing = await api("GET")
    checkpoints = {}
    for rid in runtime_ids:
        status, rows = await api("GET", f"{rid}/checkpoints")
        assert status == 200, rows
        checkpoints[rid] = rows["checkpoints"]
    return listing["runtimes"], checkpoints


async def test_deep_metadata_is_400_everywhere_and_nothing_is_stored(
    api: Api, open_runtime: OpenRuntime
) -> None:
    live = (await open_runtime("notebooks/live.ipynb", x=1)).runtime_id
    paused = (await open_runtime("notebooks/paused.ipynb", y=2)).runtime_id
    status, cp = await api("POST", "checkpoint", {"runtime_id": live})
    assert status == 200, cp
    status, answer = await api("POST", "pause", {"runtime_id": paused})
    assert status == 200, answer
    before = await snapshot_of_store(api, live, paused)
    for depth in (200, 300, MAX_METADATA_DEPTH + 1):
        metadata = nested(depth)
        for route, body in [
            ("checkpoint", {"runtime_id": live, "metadata": metadata}),
            ("pause", {"runtime_id": live, "metadata": metadata}),
            ("resume", {"runtime_id": paused, "metadata": metadata}),
            ("checkout", {"checkpoint_id": cp["checkpoint_id"], "metadata": metadata}),
        ]:
            status, answer = await api("POST", route, body)
            assert (status, answer["error"]) == (400, "InvalidRequest"), (route, depth, answer)
            assert answer["message"] == (
                f"field 'metadata': metadata is nested {depth} deep; "
                f"the limit is {MAX_METADATA_DEPTH}"
            )
    assert await snapshot_of_store(api, live, paused) == before
    status, at_limit = await api(
        "POST", "checkpoint", {"runtime_id": live, "metadata": nested(MAX_METADATA_DEPTH)}
    )
    assert status == 200, at_limit
    status, rows = await api("GET", f"{live}/checkpoints")
    assert status == 200
    assert rows["checkpoints"][-1]["metadata"] == nested(MAX_METADATA_DEPTH)


async def test_long_names_and_big_bodies_are_400(api: Api, open_runtime: OpenRuntime) -> None:
    rid = (await open_runtime(x=1)).runtime_id
    before = await snapshot_of_store(api, rid)
    huge = {"runtime_id": rid, "name": "n" * (10 * 1024 * 1024)}
    status, answer = await api("POST", "pause", huge)
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert f"the limit is {MAX_BODY_BYTES}" in answer["message"]
    # a checkpoint may carry the notebook document, images and all: a limit of its own
    huge["name"] = "n" * (MAX_DOCUMENT_BODY_BYTES + 1)
    status, answer = await api("POST", "checkpoint", huge)
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert f"the limit is {MAX_DOCUMENT_BODY_BYTES}" in answer["message"]
    status, answer = await api(
        "POST", "checkpoint", {"runtime_id": rid, "name": "n" * (MAX_NAME_LENGTH + 1)}
    )
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert answer["message"] == (
        f"field 'name': String should have at most {MAX_NAME_LENGTH} characters"
    )
    assert await snapshot_of_store(api, rid) == before


async def test_empty_checkpoint_id_and_nul_in_a_command_are_400(
    api: Api, open_runtime: OpenRuntime
) -> None:
    rid = (await open_runtime(x=1)).runtime_id
    for route, extra in (("restore", {}), ("self/restore", {"runtime_token": "t"})):
        body = {"runtime_id": rid, "checkpoint_id": "", **extra}
        status, answer = await api("POST", route, body)
        assert (status, answer["error"]) == (400, "InvalidRequest"), (route, answer)
        assert "'checkpoint_id'" in answer["message"]
    status, answer = await api("POST", "exec", {"runtime_id": rid, "command": "echo a\x00b"})
    assert (status, answer["error"]) == (400, "InvalidRequest"), answer
    assert answer["message"] == "field 'command': a shell command cannot hold a NUL byte"
    status, answer = await api("POST", "exec", {"runtime_id": rid, "command": "echo ok"})
    assert (status, answer["stdout"]) == (200, "ok\n"), answer


def damage(db: Path, table: str, key_column: str, key: str) -> None:
    """Store a row the way the probe's request did: metadata nested 200 deep."""
    raw = sqlite3.connect(db)
    (text,) = raw.execute(f"SELECT data FROM {table} WHERE {key_column} = ?", (key,)).fetchone()
    record = json.loads(text)
    record["metadata"] = nested(200)
    raw.execute(f"UPDATE {table} SET data = ? WHERE {key_column} = ?", (json.dumps(record), key))
    raw.commit()
    raw.close()


async def test_a_damaged_row_never_takes_down_other_runtimes(
    api: Api, open_runtime: OpenRuntime, ditto_data_dir: Path
) -> None:
    bad = (await open_runtime("notebooks/bad.ipynb", x=1)).runtime_id
    good = (await open_runtime("notebooks/good.ipynb", y=2)).runtime_id
    other = (await open_runtime("notebooks/other.ipynb", z=3)).runtime_id
    _, bad_cp = await api("POST", "checkpoint", {"runtime_id": bad, "name": "broken"})
    _, bad_kept = await api("POST", "checkpoint", {"runtime_id": bad, "name": "kept"})
    _, good_cp = await api("POST", "checkpoint", {"runtime_id": good})
    db = ditto_data_dir / "ditto.db"
    damage(db, "checkpoints", "checkpoint_id", bad_cp["checkpoint_id"])
    damage(db, "sessions", "runtime_id", other)

    status, listing = await api("GET")
    assert status == 200, listing
    assert {r["runtime_id"] for r in listing["runtimes"]} == {bad, good}
    status, rows = await api("GET", f"{good}/checkpoints")
    assert status == 200, rows
    assert [c["checkpoint_id"] for c in rows["checkpoints"]] == [good_cp["checkpoint_id"]]
    status, rows = await api("GET", f"{bad}/checkpoints")
    assert status == 200, rows
    assert [c["name"] for c in rows["checkpoints"]] == ["kept"]

    status, answer = await api(
        "POST", "checkpoint/delete-snapshot", {"checkpoint_id": good_cp["checkpoint_id"]}
    )
    assert (status, answer["deleted"]) == (200, True), answer
    status, rows = await api("GET", f"{good}/checkpoints")
    assert rows["checkpoints"][0]["has_provider_snapshot"] is False
    status, answer = await api("POST", "close", {"runtime_id": good})
    assert (status, answer["runtime"]["status"]) == (200, "closed"), answer
    kept = {"runtime_id": bad, "checkpoint_id": bad_kept["checkpoint_id"]}
    status, answer = await api("POST", "restore", kept)
    assert status == 200, answer

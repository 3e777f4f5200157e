"""Finding checkpoints through RuntimeService: references (id, prefix, name) and pages.

On a real SQLite file and real local workspaces, with the test capture (no kernel).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.lookups import PREFIX_MATCHES_COUNTED
from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import CheckpointNotFound, InvalidRequest, RuntimeNotFound
from ditto_jupyter.wiring import open_runtime_service
from tests.fakes.fake_context_capture import InMemoryContextCapture

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RuntimeService]:
    opened = open_runtime_service(tmp_path / "data", context_factory=InMemoryContextCapture)
    yield opened
    opened.close_store()


def checkpoints(service: RuntimeService, runtime_id: str, count: int, **kwargs: Any) -> list[str]:
    return [run(service.checkpoint(runtime_id, **kwargs)).checkpoint_id for _ in range(count)]


def test_a_name_shared_by_runtimes_is_ambiguous_without_a_runtime(
    service: RuntimeService,
) -> None:
    one = run(service.create_runtime("one.ipynb", runtime_id="rt-one")).runtime_id
    two = run(service.create_runtime("two.ipynb", runtime_id="rt-two")).runtime_id
    (older,) = checkpoints(service, one, 1, name="base")
    (newer,) = checkpoints(service, one, 1, name="base")
    (theirs,) = checkpoints(service, two, 1, name="base")
    with pytest.raises(InvalidRequest) as refused:
        service.resolve_checkpoint("base")
    assert str(refused.value) == (
        "'base' names checkpoints of several runtimes (rt-one, rt-two); "
        "say which: RUNTIME:NAME, or the checkpoint id"
    )
    # within a runtime the newest of a reused name; by id always exactly that one
    assert service.resolve_checkpoint("base", one).checkpoint_id == newer
    assert service.resolve_checkpoint("base", two).checkpoint_id == theirs
    assert service.resolve_checkpoint(older).checkpoint_id == older
    (unique,) = checkpoints(service, two, 1, name="only-here")
    assert service.resolve_checkpoint("only-here").checkpoint_id == unique


def test_many_runtimes_sharing_a_name_are_listed_with_an_ellipsis(
    service: RuntimeService,
) -> None:
    for number in range(12):
        rid = run(service.create_runtime("nb.ipynb", runtime_id=f"rt-{number:02}")).runtime_id
        checkpoints(service, rid, 1, name="pause")
    with pytest.raises(InvalidRequest, match=r"\(rt-00, rt-01, .*, rt-09, \.\.\.\)"):
        service.resolve_checkpoint("pause")


def test_prefixes_and_names(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    ids = checkpoints(service, rid, 40)
    for checkpoint_id in ids:
        assert service.resolve_checkpoint(checkpoint_id[:12]).checkpoint_id == checkpoint_id
        assert service.resolve_checkpoint(checkpoint_id[:12], rid).checkpoint_id == checkpoint_id
    first = ids[0][0]
    sharing = sum(i.startswith(first) for i in ids)
    if sharing > 1:
        with pytest.raises(InvalidRequest, match=f"matches {sharing} checkpoints"):
            service.resolve_checkpoint(first)
    # a name wins over an id prefix it looks like
    (named,) = checkpoints(service, rid, 1, name=ids[1][:6])
    assert service.resolve_checkpoint(ids[1][:6]).checkpoint_id == named
    with pytest.raises(CheckpointNotFound, match="in runtime"):
        service.resolve_checkpoint(ids[2][:12], "another-runtime")
    with pytest.raises(CheckpointNotFound):
        service.resolve_checkpoint("g-not-hex")
    with pytest.raises(InvalidRequest, match="must not be empty"):
        service.resolve_checkpoint("")


def test_a_short_prefix_counts_only_so_far(
    service: RuntimeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    monkeypatch.setattr("ditto_jupyter.control.lookups.PREFIX_MATCHES_COUNTED", 3)
    ids = iter(f"{n:032x}" for n in range(5))
    monkeypatch.setattr("ditto_jupyter.control.checkpointing.new_checkpoint_id", lambda: next(ids))
    checkpoints(service, rid, 5)
    with pytest.raises(InvalidRequest, match="'0' matches 3 or more checkpoints"):
        service.resolve_checkpoint("0")
    assert PREFIX_MATCHES_COUNTED == 100


def test_a_runtime_is_listed_a_page_at_a_time(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    other = run(service.create_runtime("other.ipynb")).runtime_id
    ids = checkpoints(service, rid, 7)
    checkpoints(service, other, 2)
    everything = run(service.list_checkpoints(rid))
    assert [c.checkpoint_id for c in everything.checkpoints] == ids
    assert everything.next_cursor is None
    seen: list[str] = []
    cursor = None
    while True:
        page = run(service.list_checkpoints(rid, limit=3, cursor=cursor))
        seen += [c.checkpoint_id for c in page.checkpoints]
        cursor = page.next_cursor
        if cursor is None:
            break
        assert cursor == seen[-1] and len(page.checkpoints) == 3
    assert seen == ids
    newest = run(service.list_checkpoints(rid, limit=2, newest_first=True))
    assert [c.checkpoint_id for c in newest.checkpoints] == ids[:-3:-1]
    after = run(
        service.list_checkpoints(rid, limit=2, cursor=newest.next_cursor, newest_first=True)
    )
    assert [c.checkpoint_id for c in after.checkpoints] == ids[-3:-5:-1]
    exact = run(service.list_checkpoints(rid, limit=7))
    assert len(exact.checkpoints) == 7 and exact.next_cursor is None


def test_bad_pages_are_refused(service: RuntimeService) -> None:
    rid = run(service.create_runtime("nb.ipynb")).runtime_id
    other = run(service.create_runtime("other.ipynb")).runtime_id
    (theirs,) = checkpoints(service, other, 1)
    with pytest.raises(InvalidRequest, match="limit must be at least 1, got 0"):
        run(service.list_checkpoints(rid, limit=0))
    for cursor in (theirs, "nope"):
        with pytest.raises(InvalidRequest, match=f"cursor '{cursor}' is not a checkpoint of"):
            run(service.list_checkpoints(rid, limit=2, cursor=cursor))
    with pytest.raises(RuntimeNotFound):
        run(service.list_checkpoints("missing", limit=2))

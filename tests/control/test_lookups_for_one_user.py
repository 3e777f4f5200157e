"""A user's lookups see only their own runtimes' checkpoints (issue 24 section 3).

Through RuntimeService on a real SQLite file with the test capture (no kernel): a runtime
belongs to its maker and a checkout to its source's owner, whatever sender it names;
resolving with a user's filter, another user's checkpoints match nothing and make no
name or id prefix ambiguous, and no error names them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ditto_jupyter.control.service import RuntimeService
from ditto_jupyter.core.errors import CheckpointNotFound, InvalidRequest
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


def owned_by(service: RuntimeService, user: str) -> Any:
    def visible(runtime_id: str) -> bool:
        found = service.find_session(runtime_id)
        return found is not None and found.belongs_to(user)

    return visible


def test_a_checkout_belongs_to_its_sources_owner_whatever_sender_it_names(
    service: RuntimeService,
) -> None:
    alice = run(service.create_runtime("a.ipynb", "alice")).runtime_id
    taken = run(service.checkpoint(alice)).checkpoint_id
    child = run(service.checkout(taken, sender_id="bob")).runtime.runtime_id
    record = service.session(child)
    assert record.sender_id == "bob"
    assert record.belongs_to("alice") and not record.belongs_to("bob")


def test_another_users_checkpoints_match_nothing_and_make_nothing_ambiguous(
    service: RuntimeService,
) -> None:
    alice = run(service.create_runtime("a.ipynb", "alice")).runtime_id
    bob = run(service.create_runtime("b.ipynb", "bob")).runtime_id
    hers = run(service.checkpoint(alice, name="shared")).checkpoint_id
    his = [run(service.checkpoint(bob, name="shared")).checkpoint_id]
    while not any(c[0] == hers[0] for c in his):  # one of his ids shares her first digit
        his.append(run(service.checkpoint(bob)).checkpoint_id)
    for_alice, for_bob = owned_by(service, "alice"), owned_by(service, "bob")

    # Unfiltered, both the name and the one-digit prefix are ambiguous...
    for reference in ("shared", hers[0]):
        with pytest.raises(InvalidRequest):
            service.resolve_checkpoint(reference)
    # ...for Alice each is hers alone, and Bob's rows are never counted or named.
    for reference in ("shared", hers[0], hers):
        assert service.resolve_checkpoint(reference, visible=for_alice).checkpoint_id == hers
    # For Bob, her full id and a prefix only she has find nothing, worded as for no id.
    only_hers = next(
        hers[:n] for n in range(1, len(hers) + 1) if not any(c.startswith(hers[:n]) for c in his)
    )
    for reference in (hers, only_hers):
        with pytest.raises(CheckpointNotFound) as refused:
            service.resolve_checkpoint(reference, visible=for_bob)
        assert str(refused.value.message) == (f"no checkpoint named or starting with {reference!r}")
        assert alice not in str(refused.value.message)
    # Within her runtime, Bob finds nothing either, not even by its name.
    with pytest.raises(CheckpointNotFound):
        service.resolve_checkpoint("shared", alice, visible=for_bob)
    # The list of runtimes a user gets is their own.
    listed = run(service.list_runtimes(lambda s: s.belongs_to("bob"))).runtimes
    assert [r.runtime_id for r in listed] == [bob]

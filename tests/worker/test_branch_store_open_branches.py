"""BranchStore.open_branches: what BranchStoreView lists (fork order, nested, weakly held)."""

from __future__ import annotations

import gc

import pytest

from ditto_jupyter.worker.branch_store import BranchStore
from ditto_jupyter.worker.errors import BranchConflictError


def serials(store: BranchStore) -> list[int]:
    return [branch.serial for branch in store.open_branches()]


def test_open_branches_in_fork_order_until_committed_or_discarded() -> None:
    store = BranchStore("s")
    a, b = store.fork(), store.fork()
    child = b.fork()
    assert serials(store) == [1, 2, 3]
    assert child.parent is b
    child.set("k", 1)
    child.commit()
    assert serials(store) == [1, 2]
    a.discard()
    assert serials(store) == [2]
    b.commit()
    assert serials(store) == [] and store.get("k") == 1


def test_a_refused_commit_leaves_the_branch_open() -> None:
    store = BranchStore("s")
    stale, fresh = store.fork(), store.fork()
    fresh.set("k", "fresh")
    fresh.commit()
    stale.set("k", "stale")
    with pytest.raises(BranchConflictError):
        stale.commit()
    assert store.open_branches() == [stale]


def test_a_branch_nobody_holds_is_forgotten() -> None:
    store = BranchStore("s")
    kept = store.fork()
    for _ in range(1000):  # dropped at once; the references are pruned as they pile up
        store.fork()
    gc.collect()
    assert store.open_branches() == [kept]
    assert len(store._open) < 200

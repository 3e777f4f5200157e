"""BranchStore and Branch: isolation, copying, optimistic commits, snapshots, atomic files."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
)

from ditto_jupyter.worker.branch_store import SNAPSHOT_FORMAT, Branch, BranchStore
from ditto_jupyter.worker.errors import (
    BranchClosedError,
    BranchConflictError,
    StateDigestError,
    StateError,
    StateScopeError,
    StateValidationError,
)

REPO = Path(__file__).resolve().parents[2]


def wire(value: object) -> Any:
    return json.loads(json.dumps(value))


def seeded(store_id: str = "session-1", **values: object) -> BranchStore:
    store = BranchStore(store_id)
    branch = store.fork()
    for name, value in values.items():
        branch.set(name, value)
    branch.commit()
    return store


# --- the seed's example and basic reads ---------------------------------------------------


def test_seed_example() -> None:
    store = BranchStore("session-1")
    branch = store.fork()
    branch.set("context", {"step": 3, "messages": []})
    branch.set("memory", {"note": "accepted result"})
    assert store.get("context") is None  # isolated until commit
    assert branch.commit() == 1
    assert store.revision == 1
    assert store.namespaces() == ["context", "memory"]
    assert store.get("memory") == {"note": "accepted result"}
    restored = BranchStore("session-1", wire(store.snapshot()))
    assert restored.revision == 1
    assert restored.get("context") == {"step": 3, "messages": []}


def test_get_default_and_membership() -> None:
    store = seeded(a=1)
    assert store.get("missing") is None
    assert store.get("missing", "fallback") == "fallback"
    assert "a" in store and "b" not in store
    assert len(store) == 1
    assert list(store) == ["a"]


# --- copying --------------------------------------------------------------------------------


def test_writes_copy_the_value() -> None:
    store = BranchStore("s")
    branch = store.fork()
    value: dict[str, Any] = {"items": [1, 2]}
    branch.set("ctx", value)
    value["items"].append(3)
    assert branch.get("ctx") == {"items": [1, 2]}
    branch.commit()
    assert store.get("ctx") == {"items": [1, 2]}


def test_reads_copy_the_value() -> None:
    store = seeded(ctx={"items": [1, 2]})
    first = store.get("ctx")
    first["items"].append(99)  # type: ignore[index]
    assert store.get("ctx") == {"items": [1, 2]}
    branch = store.fork()
    got = branch.get("ctx")
    got["items"].clear()  # type: ignore[index]
    assert branch.get("ctx") == {"items": [1, 2]}
    assert store.snapshot()["namespaces"] == {"ctx": {"items": [1, 2]}}


def test_values_are_validated_and_a_refused_write_changes_nothing() -> None:
    store = BranchStore("s")
    branch = store.fork()
    with pytest.raises(StateValidationError) as caught:
        branch.set("context", {"messages": [{"fn": print}]})
    assert caught.value.path == "$.context.messages[0].fn"
    assert branch.written == frozenset()
    assert branch.revision == 0
    assert branch.namespaces() == []


@pytest.mark.parametrize(("name", "error"), [(1, TypeError), ("", ValueError), (None, TypeError)])
def test_namespace_names_must_be_non_empty_strings(name: object, error: type[Exception]) -> None:
    branch = BranchStore("s").fork()
    with pytest.raises(error, match="namespace name"):
        branch.set(name, 1)  # type: ignore[arg-type]


# --- forks ----------------------------------------------------------------------------------


def test_fork_shares_the_immutable_base() -> None:
    store = seeded(**{f"ns{i}": {"i": i} for i in range(1000)})
    branch = store.fork()
    assert branch._map is store._map  # structural sharing: no copy at fork time
    child = branch.fork()
    assert child._map is branch._map


def test_discard_leaves_the_parent_unchanged() -> None:
    store = seeded(a=1)
    branch = store.fork()
    branch.set("a", 2)
    branch.delete("a")
    branch.set("b", 3)
    branch.discard()
    assert branch.closed
    assert store.revision == 1
    assert store.get("a") == 1 and store.get("b") is None


def test_delete_is_committed() -> None:
    store = seeded(memory={"x": 1}, context=2)
    branch = store.fork()
    assert branch.delete("memory") is True
    assert branch.delete("never") is False
    assert branch.get("memory") is None
    assert branch.written == {"memory", "never"}
    branch.commit()
    assert store.namespaces() == ["context"]


@pytest.mark.parametrize("how", ["commit", "discard"])
def test_closed_branch_refuses_every_use(how: str) -> None:
    store = BranchStore("s")
    branch = store.fork()
    branch.set("a", 1)
    getattr(branch, how)()
    assert branch.closed
    calls = [
        lambda: branch.get("a"),
        lambda: branch.set("a", 2),
        lambda: branch.delete("a"),
        branch.fork,
        branch.commit,
        branch.discard,
        branch.namespaces,
        lambda: "a" in branch,
    ]
    for call in calls:
        with pytest.raises(BranchClosedError):
            call()


def test_conflict_raises_with_revisions_and_names_and_changes_nothing() -> None:
    store = seeded(a=0)
    first, second = store.fork(), store.fork()
    first.set("a", 1)
    second.set("a", 2)
    second.set("b", 2)
    first.commit()
    with pytest.raises(BranchConflictError) as caught:
        second.commit()
    assert caught.value.expected_revision == 1
    assert caught.value.actual_revision == 2
    assert caught.value.namespaces == ("a", "b")
    assert store.get("a") == 1 and store.get("b") is None and store.revision == 2
    assert not second.closed  # a refused commit changes nothing; the caller may discard
    second.discard()


def test_read_only_branch_also_needs_its_revision() -> None:
    store = BranchStore("s")
    reader, writer = store.fork(), store.fork()
    writer.set("a", 1)
    writer.commit()
    with pytest.raises(BranchConflictError):
        reader.commit()
    fresh = store.fork()
    assert fresh.commit() == 1  # nothing written: no new revision
    assert store.revision == 1


def test_branch_of_branch_commits_into_its_parent_branch() -> None:
    store = seeded(a=0)
    parent = store.fork()
    child = parent.fork()
    child.set("a", 1)
    child.set("c", "child")
    assert child.commit() == 1
    assert parent.get("a") == 1 and parent.written == {"a", "c"}
    assert store.get("a") == 0  # not in the store until the parent commits
    parent.commit()
    assert store.get("a") == 1 and store.get("c") == "child"


def test_nested_siblings_conflict_and_parent_writes_move_the_parent() -> None:
    parent = BranchStore("s").fork()
    first, second = parent.fork(), parent.fork()
    first.set("x", 1)
    first.commit()
    with pytest.raises(BranchConflictError):
        second.commit()
    late = parent.fork()
    parent.set("y", 2)  # the parent moved after the fork
    late.set("x", 3)
    with pytest.raises(BranchConflictError) as caught:
        late.commit()
    assert caught.value.expected_revision == 1 and caught.value.actual_revision == 2
    assert parent.get("x") == 1


def test_commit_into_a_closed_parent_branch_is_refused() -> None:
    parent = BranchStore("s").fork()
    child = parent.fork()
    child.set("x", 1)
    parent.discard()
    with pytest.raises(BranchClosedError, match="parent"):
        child.commit()
    assert child.get("x") == 1  # the child itself is still readable


# --- threads --------------------------------------------------------------------------------


def _race(forks: list[Branch]) -> list[str]:
    """Start one thread per branch, release them together, return each commit's outcome."""
    barrier = threading.Barrier(len(forks))
    outcomes: list[str] = []
    lock = threading.Lock()

    def attempt(branch: Branch) -> None:
        barrier.wait()
        try:
            branch.commit()
            result = "won"
        except BranchConflictError:
            result = "conflict"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=attempt, args=(branch,)) for branch in forks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_racing_forks_of_one_revision_exactly_one_wins() -> None:
    store = BranchStore("race")
    threads_count = 16
    for round_number in range(20):
        base = store.revision
        forks = [store.fork() for _ in range(threads_count)]
        for index, branch in enumerate(forks):
            branch.set(f"r{round_number}-t{index}", index)
            branch.set("shared", index)
        outcomes = _race(forks)
        assert sorted(outcomes) == ["conflict"] * (threads_count - 1) + ["won"]
        assert store.revision == base + 1
        winner = store.get("shared")
        names = [n for n in store.namespaces() if n.startswith(f"r{round_number}-")]
        assert names == [f"r{round_number}-t{winner}"]  # all of the winner's writes, no other's


def test_racing_nested_forks_exactly_one_wins() -> None:
    parent = BranchStore("race").fork()
    forks = [parent.fork() for _ in range(8)]
    for index, branch in enumerate(forks):
        branch.set("who", index)
    assert sorted(_race(forks)) == ["conflict"] * 7 + ["won"]
    assert parent.revision == 1 and parent.written == {"who"}


def test_threads_that_retry_all_land_and_no_write_is_lost() -> None:
    store = BranchStore("counter")
    seed = store.fork()
    seed.set("count", 0)
    seed.commit()

    def increment(times: int) -> None:
        for _ in range(times):
            while True:
                branch = store.fork()
                branch.set("count", branch.get("count") + 1)  # type: ignore[operator]
                try:
                    branch.commit()
                    break
                except BranchConflictError:
                    branch.discard()

    threads = [threading.Thread(target=increment, args=(50,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get("count") == 400
    assert store.revision == 401


def test_readers_never_see_half_a_commit() -> None:
    store = BranchStore("atomic")
    rounds = 300
    failures: list[str] = []

    def writer() -> None:
        for number in range(1, rounds + 1):
            branch = store.fork()
            branch.set("left", number)
            branch.set("right", number)
            branch.commit()

    def reader() -> None:
        while store.revision < rounds:
            snapshot = store.snapshot()
            restored = BranchStore("atomic", snapshot)  # digest verifies: a consistent view
            if restored.get("left") != restored.get("right"):
                failures.append(f"torn snapshot {snapshot['namespaces']}")
            if store.get("left", 0) > store.revision:  # type: ignore[operator]
                failures.append("value visible before its revision")

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert store.get("left") == store.get("right") == rounds


# --- snapshots ------------------------------------------------------------------------------


def test_snapshot_is_json_with_id_revision_namespaces_and_jcs_digest() -> None:
    store = seeded("session-1", context={"w": 1.0, "\U0001f600": [None]}, memory="m")
    snapshot = store.snapshot()
    assert snapshot == wire(snapshot)
    assert snapshot["format"] == SNAPSHOT_FORMAT
    assert snapshot["store_id"] == "session-1"
    assert snapshot["revision"] == 1
    assert snapshot["namespaces"] == {"context": {"w": 1.0, "\U0001f600": [None]}, "memory": "m"}
    body = {"store_id": "session-1", "revision": 1, "namespaces": snapshot["namespaces"]}
    assert snapshot["digest"] == "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def test_snapshot_of_another_store_is_refused() -> None:
    snapshot = seeded("session-1", a=1).snapshot()
    with pytest.raises(StateScopeError, match="session-1"):
        BranchStore("session-2", snapshot)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda snap: snap["namespaces"].__setitem__("a", 2),
        lambda snap: snap["namespaces"].__setitem__("extra", 1),
        lambda snap: snap.__setitem__("revision", 7),
        lambda snap: snap.__setitem__("digest", "sha256:" + "f" * 64),
        lambda snap: snap.__setitem__("digest", "nope"),
    ],
)
def test_snapshot_with_a_wrong_digest_is_refused(tamper: Any) -> None:
    snapshot = wire(seeded("s", a=1).snapshot())
    tamper(snapshot)
    with pytest.raises(StateDigestError):
        BranchStore("s", snapshot)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda snap: snap.__setitem__("format", "other/v1"), "format"),
        (lambda snap: snap.pop("namespaces"), "lacks"),
        (lambda snap: snap.__setitem__("extra", 1), "unknown"),
        (lambda snap: snap.__setitem__("revision", -1), "revision"),
        (lambda snap: snap.__setitem__("revision", True), "revision"),
        (lambda snap: snap.__setitem__("namespaces", []), "namespaces"),
    ],
)
def test_malformed_snapshots_are_refused(change: Any, message: str) -> None:
    snapshot = wire(seeded("s", a=1).snapshot())
    change(snapshot)
    with pytest.raises(StateError, match=message):
        BranchStore("s", snapshot)


def test_snapshot_values_are_validated_with_their_path() -> None:
    snapshot = wire(seeded("s", ctx={"items": [1]}).snapshot())
    snapshot["namespaces"]["ctx"]["items"] = (1,)
    with pytest.raises(StateValidationError) as caught:
        BranchStore("s", snapshot)
    assert caught.value.path == "$.namespaces.ctx.items"


def test_restored_store_continues_from_the_snapshot_revision() -> None:
    store = seeded("s", a=1)
    branch = store.fork()
    branch.set("b", 2)
    branch.commit()
    restored = BranchStore("s", wire(store.snapshot()))
    assert restored.revision == 2
    stale = restored.fork()
    fresh = restored.fork()
    fresh.set("c", 3)
    assert fresh.commit() == 3
    with pytest.raises(BranchConflictError):
        stale.commit()


# --- files ----------------------------------------------------------------------------------


def test_save_and_load(tmp_path: Path) -> None:
    store = seeded("s", ctx={"messages": ["hi", 1.5, None]}, deep=[[[["x"]]]])
    path = tmp_path / "store.json"
    store.save(path)
    assert json.loads(path.read_text()) == store.snapshot()
    loaded = BranchStore.load(path)
    assert loaded.store_id == "s" and loaded.revision == 1
    assert loaded.get("ctx") == {"messages": ["hi", 1.5, None]}
    assert sorted(os.listdir(tmp_path)) == ["store.json"]  # no temp file left behind
    with pytest.raises(StateScopeError):
        BranchStore.load(path, store_id="other")


def test_load_of_a_deeply_nested_value(tmp_path: Path) -> None:
    deep: object = "leaf"
    for _ in range(250):
        deep = [deep]
    store = seeded("s", deep=deep)
    store.save(tmp_path / "deep.json")
    assert BranchStore.load(tmp_path / "deep.json").get("deep") == deep


def test_load_refuses_garbage(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"format": ')
    with pytest.raises(StateError, match="not a BranchStore snapshot"):
        BranchStore.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(StateError, match="not a BranchStore snapshot"):
        BranchStore.load(path)


def test_failed_save_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "store.json"
    seeded("s", a=1).save(path)
    before = path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        seeded("s", a=2, b=3).save(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["store.json"]


def test_a_killed_writer_never_leaves_a_half_written_file(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    writer = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from ditto_jupyter.worker.branch_store import BranchStore
        store = BranchStore("killed")
        payload = "x" * 20000
        while True:
            branch = store.fork()
            branch.set("n", store.revision)
            branch.set("payload", [payload] * 20)
            branch.commit()
            store.save({str(path)!r})
        """
    )
    process = subprocess.Popen([sys.executable, "-c", writer])
    try:
        seen = -1
        while seen < 30:  # read while the writer replaces the file: always a whole snapshot
            if process.poll() is not None:
                pytest.fail(f"writer exited early with status {process.returncode}")
            if path.exists():
                store = BranchStore.load(path)
                assert store.get("n") == store.revision - 1
                seen = store.revision
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    final = BranchStore.load(path)
    assert final.revision >= 30
    assert final.get("n") == final.revision - 1
    leftovers = [name for name in os.listdir(tmp_path) if name != "store.json"]
    assert all(name.startswith(".store.json.") for name in leftovers)  # at most a temp file


# --- model-based property test --------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "c", "\U0001f600"])
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.floats(-1e3, 1e3), st.text()),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children),
    max_leaves=6,
)


class Model:
    """Plain-dict model of one store or branch."""

    def __init__(self, parent: Model | None, data: dict[str, Any], base_revision: int) -> None:
        self.parent = parent
        self.data = data
        self.base_revision = base_revision
        self.revision = base_revision if parent is None else 0
        self.written: set[str] = set()
        self.closed = False


class BranchStoreMachine(RuleBasedStateMachine):
    """Random fork/set/delete/commit/discard sequences checked against the plain-dict model."""

    branches = Bundle("branches")

    def __init__(self) -> None:
        super().__init__()
        self.store = BranchStore("model")
        self.root = Model(None, {}, 0)
        self.all: list[tuple[Branch, Model]] = []

    def _track(self, branch: Branch, model: Model) -> tuple[Branch, Model]:
        self.all.append((branch, model))
        return branch, model

    @rule(target=branches)
    def fork_store(self) -> tuple[Branch, Model]:
        model = Model(self.root, dict(self.root.data), self.root.revision)
        return self._track(self.store.fork(), model)

    @rule(target=branches, pair=branches)
    def fork_branch(self, pair: tuple[Branch, Model]) -> Any:
        branch, model = pair
        if model.closed:
            with pytest.raises(BranchClosedError):
                branch.fork()
            return multiple()
        return self._track(branch.fork(), Model(model, dict(model.data), model.revision))

    @rule(pair=branches, name=NAMES, value=VALUES)
    def set_value(self, pair: tuple[Branch, Model], name: str, value: Any) -> None:
        branch, model = pair
        if model.closed:
            with pytest.raises(BranchClosedError):
                branch.set(name, value)
            return
        branch.set(name, value)
        model.data[name] = value
        model.written.add(name)
        model.revision += 1

    @rule(pair=branches, name=NAMES)
    def delete_value(self, pair: tuple[Branch, Model], name: str) -> None:
        branch, model = pair
        if model.closed:
            with pytest.raises(BranchClosedError):
                branch.delete(name)
            return
        assert branch.delete(name) is (name in model.data)
        model.data.pop(name, None)
        model.written.add(name)
        model.revision += 1

    @rule(pair=branches)
    def commit(self, pair: tuple[Branch, Model]) -> None:
        branch, model = pair
        parent = model.parent
        assert parent is not None
        if model.closed or parent.closed:
            with pytest.raises(BranchClosedError):
                branch.commit()
            return
        if parent.revision != model.base_revision:
            with pytest.raises(BranchConflictError) as caught:
                branch.commit()
            assert caught.value.expected_revision == model.base_revision
            assert caught.value.actual_revision == parent.revision
            assert set(caught.value.namespaces) == model.written
            return
        for name in model.written:
            if name in model.data:
                parent.data[name] = model.data[name]
            else:
                parent.data.pop(name, None)
        if model.written:
            parent.revision += 1
            parent.written |= model.written
        model.closed = True
        assert branch.commit() == parent.revision

    @rule(pair=branches)
    def discard(self, pair: tuple[Branch, Model]) -> None:
        branch, model = pair
        if model.closed:
            with pytest.raises(BranchClosedError):
                branch.discard()
            return
        branch.discard()
        model.closed = True

    @precondition(lambda self: self.store.revision > 0)
    @rule()
    def snapshot_round_trip(self) -> None:
        restored = BranchStore("model", wire(self.store.snapshot()))
        assert restored.revision == self.root.revision
        assert {n: restored.get(n) for n in restored.namespaces()} == self.root.data

    @invariant()
    def store_matches_model(self) -> None:
        assert self.store.revision == self.root.revision
        assert self.store.namespaces() == sorted(self.root.data)
        for name, value in self.root.data.items():
            assert self.store.get(name) == value

    @invariant()
    def branches_match_models(self) -> None:
        for branch, model in self.all:
            assert branch.closed == model.closed
            if not model.closed:
                assert branch.namespaces() == sorted(model.data)
                assert {n: branch.get(n) for n in model.data} == model.data
                assert branch.written == model.written


BranchStoreMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
TestBranchStoreModel = BranchStoreMachine.TestCase

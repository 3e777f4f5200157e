"""The spec of `CheckpointRecords` (`ditto_jupyter.control.store.interface`).

The checkpoints and the heads: whatever a checkpoint holds reads back as it was put, a
checkpoint stays the runtime's that took it, listings are oldest first (a page at a time,
either way), an id prefix is a range in code-point order and a name matches exactly, a head
must name stored records (checked when the transaction commits) and holds its checkpoint
against a prune wherever it was set from, and a prune's candidates are the old whole
automatic checkpoints.
"""

from __future__ import annotations

from typing import Any

import pytest

from ditto_jupyter.control.store.interface import CheckpointRecords, CheckpointStore
from ditto_jupyter.core.models import (
    AutoCheckpointCell,
    CheckpointDocument,
)
from ditto_jupyter.testing.contracts.store_data import (
    CONTEXT,
    DOCUMENT,
    SNAPSHOT,
    after_cell,
    checkpoint,
    populate,
    record,
    runtime,
    session,
    taken,
)


class CheckpointRecordsContract:
    """`CheckpointRecords`; a subclass provides a `store` fixture: a fresh, empty store per test."""

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, CheckpointRecords)

    def test_checkpoint_round_trip_and_upsert(self, store: CheckpointStore) -> None:
        store.insert_session(session("rt-1"))
        original = checkpoint("cp-1", "rt-1", name="before-cleaning")
        store.put_checkpoint(original)
        assert store.get_checkpoint("cp-1") == original
        assert store.get_checkpoint("cp-2") is None
        ref = original.backend_ref
        assert ref is not None
        cleared = original.model_copy(
            update={"backend_ref": ref.model_copy(update={"provider_snapshot_id": None})}
        )
        store.put_checkpoint(cleared)
        loaded = store.get_checkpoint("cp-1")
        assert loaded == cleared
        assert loaded is not None and not loaded.summary().has_provider_snapshot
        assert [c.checkpoint_id for c in store.list_checkpoints()] == ["cp-1"]

    def test_what_a_checkpoint_holds_reads_back_as_it_was_put(self, store: CheckpointStore) -> None:
        store.insert_session(runtime("r"))
        first = after_cell("c1", "r", 1, bytes_written=4096, name="start")
        rich = after_cell(
            "c2",
            "r",
            2,
            parent="c1",
            metadata={
                "tags": ["x", 1, None, True, 1.5, -0.0, 2**70, 1e300],
                "nested": {"é": {"z": "ü"}},
            },
            automatic=AutoCheckpointCell(execution_count=2, source="x = 1\n" * 40, failed=True),
            replication="local",
            document=CheckpointDocument(origin="request", manifest_id=DOCUMENT, cells=3),
        )
        later = after_cell(
            "c3", "r", 3, parent="c2", session=runtime("r", 3, metadata={"a": 1, "big": -(2**80)})
        )
        restarted = after_cell(
            "c4", "r", 4, parent="c3", session=runtime("r", 4, handle_state={"kernel_id": "n"})
        )
        made = [first, rich, later, restarted]
        for one in made:
            store.put_checkpoint(one)
        assert [store.get_checkpoint(c.checkpoint_id) for c in made] == made
        assert store.list_checkpoints("r") == made
        assert store.page_checkpoints("r", newest_first=True, limit=2) == made[:1:-1]
        assert store.find_checkpoints("c") == made
        assert store.newest_named("start", "r") == first
        assert store.checkpoints_with_snapshot(SNAPSHOT) == made
        assert store.referenced_manifests([CONTEXT, SNAPSHOT, DOCUMENT]) == {
            CONTEXT,
            SNAPSHOT,
            DOCUMENT,
        }
        store.put_checkpoint(rich)  # replaced as it is: still the same
        assert store.list_checkpoints() == made

    def test_a_checkpoint_stays_the_runtimes_that_took_it(self, store: CheckpointStore) -> None:
        store.insert_session(runtime("r"))
        store.insert_session(runtime("o"))
        store.put_checkpoint(after_cell("c1", "r", 1))
        with pytest.raises(ValueError, match="'c1' belongs to runtime 'r'; it cannot be stored"):
            store.put_checkpoint(after_cell("c1", "o", 1))
        assert store.get_checkpoint("c1") == after_cell("c1", "r", 1)

    def test_checkpoint_of_unknown_runtime_is_refused(self, store: CheckpointStore) -> None:
        with pytest.raises(ValueError, match="checkpoint 'cp-1' names runtime 'ghost', which is"):
            store.put_checkpoint(checkpoint("cp-1", "ghost"))
        assert store.get_checkpoint("cp-1") is None
        assert store.list_checkpoints() == []

    def test_list_checkpoints_oldest_first(self, store: CheckpointStore) -> None:
        store.insert_session(session("rt-1"))
        store.insert_session(session("rt-2"))
        # created_at_ms ties keep insertion order; ids sort the other way on purpose
        for cid, rid, created in [
            ("z", "rt-1", 300),
            ("y", "rt-2", 100),
            ("x", "rt-1", 100),
            ("w", "rt-1", 200),
        ]:
            store.put_checkpoint(checkpoint(cid, rid, created))
        assert [c.checkpoint_id for c in store.list_checkpoints()] == ["y", "x", "w", "z"]
        assert [c.checkpoint_id for c in store.list_checkpoints("rt-1")] == ["x", "w", "z"]
        assert store.list_checkpoints("nobody") == []
        # an upsert keeps a checkpoint's place among equal timestamps
        store.put_checkpoint(checkpoint("y", "rt-2", 100, name="renamed"))
        assert [c.checkpoint_id for c in store.list_checkpoints()] == ["y", "x", "w", "z"]

    def test_pages_of_one_runtime(self, store: CheckpointStore) -> None:
        store.insert_session(session("rt-p"))
        store.insert_session(session("rt-q"))
        expected = []
        for number in range(7):  # two share a creation time: the insertion order breaks it
            cid = f"cp-{6 - number}"
            store.put_checkpoint(checkpoint(cid, "rt-p", 100 + min(number, 5)))
            store.put_checkpoint(checkpoint(f"other-{number}", "rt-q", 100 + number))
            expected.append(cid)

        def page(**kwargs: Any) -> list[str]:
            return [c.checkpoint_id for c in store.page_checkpoints("rt-p", **kwargs)]

        assert page() == expected == [c.checkpoint_id for c in store.list_checkpoints("rt-p")]
        assert page(limit=3) == expected[:3]
        assert page(limit=3, after=expected[2]) == expected[3:6]
        assert page(after=expected[5]) == expected[6:]
        assert page(after=expected[6]) == []
        assert page(newest_first=True) == expected[::-1]
        assert page(newest_first=True, limit=2, after=expected[5]) == expected[4:2:-1]
        assert store.page_checkpoints("rt-none") == []
        for foreign in ("other-1", "missing"):
            with pytest.raises(ValueError, match="is not a checkpoint of runtime 'rt-p'"):
                store.page_checkpoints("rt-p", after=foreign)

    def test_find_by_prefix_or_exact_name(self, store: CheckpointStore) -> None:
        populate(store)
        store.put_checkpoint(checkpoint("CP-upper", "rt-a", 300))
        store.put_checkpoint(checkpoint("c%_x", "rt-b", 400, name="fir"))

        def ids(prefix: str, rid: str | None = None) -> list[str]:
            return [c.checkpoint_id for c in store.find_checkpoints(prefix, rid)]

        assert ids("cp-a") == ["cp-a1", "cp-a2"]
        assert ids("cp-") == ["cp-a1", "cp-b1", "cp-a2"]
        assert ids("cp-a1") == ["cp-a1"]
        assert ids("first") == ["cp-a1", "cp-b1"]  # exact name, every runtime
        assert ids("first", "rt-b") == ["cp-b1"]  # exact name within the runtime
        assert ids("fir") == ["c%_x"]  # names match exactly, never by prefix
        assert ids("cp", "rt-b") == ["cp-b1"]
        assert ids("CP") == ["CP-upper"]  # case-sensitive on every backend
        assert ids("c%") == ["c%_x"]  # % and _ are not wildcards
        assert ids("c_") == []
        assert ids("nothing") == []
        with pytest.raises(ValueError, match="prefix or name must be a non-empty string"):
            store.find_checkpoints("")

    def test_id_prefixes_are_ranges_in_code_point_order(self, store: CheckpointStore) -> None:
        populate(store)
        odd = ["cp-a1\U0010ffff", "cp-a\ud7ffz", "cp-a\ue000", "cp-\U0010ffff", "cp-b0"]
        for number, cid in enumerate(odd):
            store.put_checkpoint(checkpoint(cid, "rt-b", 500 + number))

        def ids(prefix: str, rid: str | None = None, limit: int | None = None) -> list[str]:
            return [c.checkpoint_id for c in store.find_by_id_prefix(prefix, rid, limit=limit)]

        everything = ["cp-a1", "cp-a2", "cp-b1", *odd]
        assert ids("cp-") == sorted(everything)  # id order (code points), not creation order
        assert ids("cp-a") == sorted(["cp-a1", "cp-a2", *odd[:3]])
        assert ids("cp-a1") == ["cp-a1", "cp-a1\U0010ffff"]
        assert ids("cp-a\ud7ff") == ["cp-a\ud7ffz"]  # the range's end skips the surrogates
        assert ids("cp-\U0010ffff") == ["cp-\U0010ffff"]  # no end: runs to the last id
        assert ids("cp-a", "rt-a") == ["cp-a1", "cp-a2"]
        assert ids("cp-a1", "rt-b") == ["cp-a1\U0010ffff"]
        assert ids("cp-", limit=2) == sorted(everything)[:2]
        assert ids("first") == [] and ids("CP") == []  # never a name, case-sensitive
        with pytest.raises(ValueError, match="prefix must be a non-empty string"):
            store.find_by_id_prefix("")

    def test_names_per_runtime(self, store: CheckpointStore) -> None:
        populate(store)  # "first" in rt-a and rt-b
        store.put_checkpoint(checkpoint("cp-a3", "rt-a", 300, name="first"))  # reused, newer
        store.put_checkpoint(checkpoint("cp-a0", "rt-a", 300, name="first"))  # same time, later
        newest = store.newest_named("first", "rt-a")
        assert newest is not None and newest.checkpoint_id == "cp-a0"
        assert store.newest_named("first", "rt-c") is None
        assert store.newest_named("firs", "rt-a") is None
        assert store.runtimes_naming("first", limit=10) == ["rt-a", "rt-b"]
        assert store.runtimes_naming("first", limit=1) == ["rt-a"]
        assert store.runtimes_naming("nothing", limit=10) == []

    def test_heads(self, store: CheckpointStore) -> None:
        populate(store)
        assert store.get_head("rt-a") == "cp-a2"
        store.set_head("rt-a", "cp-a1")
        assert store.get_head("rt-a") == "cp-a1"
        store.set_head("rt-a", "cp-b1")  # a child's head may be another runtime's checkpoint
        assert store.get_head("rt-a") == "cp-b1"
        store.set_head("rt-a", None)
        assert store.get_head("rt-a") is None
        store.set_head("rt-a", None)  # clearing twice is fine
        assert store.get_head("rt-b") == "cp-b1"
        assert store.get_head("missing") is None

    def test_dangling_heads_are_refused(self, store: CheckpointStore) -> None:
        populate(store)
        with pytest.raises(ValueError, match="names checkpoint 'nope', which is not in the store"):
            store.set_head("rt-a", "nope")
        with pytest.raises(ValueError, match="runtime 'ghost' is not in the store"):
            store.set_head("ghost", "cp-a1")
        with pytest.raises(ValueError, match="runtime_id must be a non-empty string"):
            store.set_head("", "cp-a1")
        assert store.get_head("rt-a") == "cp-a2"
        assert store.get_head("ghost") is None

    def test_a_head_holds_its_checkpoint_wherever_it_was_set_from(
        self, store: CheckpointStore
    ) -> None:
        store.insert_session(runtime("r"))
        store.insert_session(runtime("o"))
        for n in range(1, 6):
            cell = AutoCheckpointCell(execution_count=n)
            store.put_checkpoint(after_cell(f"a{n}", "r", n, automatic=cell))
        store.put_checkpoint(after_cell("o1", "o", 1))
        store.set_head("r", "a2")
        store.set_head("o", "a3")  # a checkpoint of r restored in o
        with store.transaction():  # set before the runtime's row and its checkpoint exist
            store.set_head("p", "a4")
            store.insert_session(runtime("p"))
        assert store.get_head("p") == "a4"
        assert store.prune_candidates("r", 0).held == {"a2", "a3", "a4"}
        store.set_head("o", "o1")  # back to its own
        store.set_head("p", None)
        store.set_head("r", "a5")
        assert store.prune_candidates("r", 0).held == {"a5"}
        with store.transaction():  # a head set then replaced before its row is there
            store.set_head("q", "a1")
            store.set_head("q", "o1")
            store.insert_session(runtime("q"))
        assert store.get_head("q") == "o1"
        assert store.prune_candidates("r", 0).held == {"a5"}

    def test_prune_candidates_are_the_old_whole_automatic_ones(
        self, store: CheckpointStore
    ) -> None:
        for rid, created in (("r", 1), ("o", 2), ("q", 3)):
            store.insert_session(record(rid, created))
        store.put_session(record("o", 2, source_runtime_id="r", source_checkpoint_id="a1"))
        for n in range(1, 7):
            store.put_checkpoint(taken(f"a{n}", "r", 100 + n, automatic=True))
        store.put_checkpoint(taken("named", "r", 100, name="cell-100"))  # on request
        store.put_checkpoint(taken("gone", "r", 99, automatic=True, pruned=True))
        store.put_checkpoint(taken("q1", "q", 200, parent_checkpoint_id="a3"))  # a branch
        store.set_head("r", "a2")
        store.put_checkpoint(taken("auto-of-q", "q", 201, automatic=True))

        found = store.prune_candidates("r", 2)
        assert [c.checkpoint_id for c in found.beyond] == ["a1", "a2", "a3", "a4"]
        assert found.held == {"a1", "a2", "a3"}  # a source, the head, a parent of q's
        assert found.whole == 6
        assert found.beyond[0] == store.get_checkpoint("a1")  # whole records
        assert store.prune_candidates("r", 6).beyond == []
        assert store.prune_candidates("r", 60).whole == 6

        store.put_checkpoint(taken("a4", "r", 104, automatic=True, pruned=True))  # thinned
        found = store.prune_candidates("r", 2)
        assert [c.checkpoint_id for c in found.beyond] == ["a1", "a2", "a3"]
        assert found.whole == 5
        assert [c.checkpoint_id for c in store.prune_candidates("q", 0).beyond] == ["auto-of-q"]

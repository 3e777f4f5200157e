"""The spec of `Leases` (`ditto_jupyter.control.store.interface`).

Leases: taken atomically, renewed, released, run out, taken from a holder found gone, and
listed by owner; of many takers at once exactly one gets a lease.
"""

from __future__ import annotations

import threading

from ditto_jupyter.control.store.interface import CheckpointStore, Leases
from ditto_jupyter.core.models import (
    RUNTIME_LEASE,
)
from ditto_jupyter.testing.contracts.store_data import (
    holder,
)


class LeasesContract:
    """`Leases`; a subclass provides a `store` fixture: a fresh, empty store per test."""

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, Leases)

    def test_a_free_lease_is_taken_and_read_back(self, store: CheckpointStore) -> None:
        assert store.get_lease(RUNTIME_LEASE, "rt-1") is None
        lease = store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1_000, ttl_ms=500)
        assert (lease.holder.owner_id, lease.acquired_at_ms, lease.expires_at_ms) == (
            "a",
            1_000,
            1_500,
        )
        assert store.get_lease(RUNTIME_LEASE, "rt-1") == lease
        assert store.get_lease("collector", "rt-1") is None  # kinds are apart

    def test_a_held_lease_is_refused_to_another_owner(self, store: CheckpointStore) -> None:
        store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1_000, ttl_ms=500)
        answer = store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("b"), now_ms=1_400, ttl_ms=500)
        assert answer.holder.owner_id == "a"  # the holder, for the refusal to name
        assert store.get_lease(RUNTIME_LEASE, "rt-1") == answer

    def test_the_holder_renews_and_keeps_its_start(self, store: CheckpointStore) -> None:
        store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1_000, ttl_ms=500)
        again = store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1_400, ttl_ms=500)
        assert (again.acquired_at_ms, again.expires_at_ms) == (1_000, 1_900)
        store.acquire_lease(RUNTIME_LEASE, "rt-2", holder("a"), now_ms=1_400, ttl_ms=500)
        store.acquire_lease(RUNTIME_LEASE, "rt-3", holder("b"), now_ms=1_400, ttl_ms=500)
        assert store.renew_leases("a", now_ms=1_800, ttl_ms=500) == 2
        expiries = {lease.key: lease.expires_at_ms for lease in store.list_leases(RUNTIME_LEASE)}
        assert expiries == {"rt-1": 2_300, "rt-2": 2_300, "rt-3": 1_900}

    def test_a_lease_that_ran_out_is_taken_over(self, store: CheckpointStore) -> None:
        store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1_000, ttl_ms=500)
        taken = store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("b"), now_ms=1_500, ttl_ms=500)
        assert (taken.holder.owner_id, taken.acquired_at_ms) == ("b", 1_500)
        assert store.renew_leases("a", now_ms=1_600, ttl_ms=500) == 0  # a lost it

    def test_a_holder_found_gone_is_taken_from(self, store: CheckpointStore) -> None:
        store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1_000, ttl_ms=None)
        held = store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("b"), now_ms=9_000, ttl_ms=500)
        assert held.holder.owner_id == "a" and held.expires_at_ms is None  # no expiry
        wrong = store.acquire_lease(
            RUNTIME_LEASE, "rt-1", holder("b"), now_ms=9_000, ttl_ms=500, take_from="c"
        )
        assert wrong.holder.owner_id == "a"  # only from the holder the caller found gone
        taken = store.acquire_lease(
            RUNTIME_LEASE, "rt-1", holder("b"), now_ms=9_000, ttl_ms=500, take_from="a"
        )
        assert taken.holder.owner_id == "b"

    def test_release_only_by_the_holder(self, store: CheckpointStore) -> None:
        store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1_000, ttl_ms=500)
        assert store.release_lease(RUNTIME_LEASE, "rt-1", "b") is False
        assert store.get_lease(RUNTIME_LEASE, "rt-1") is not None
        assert store.release_lease(RUNTIME_LEASE, "rt-1", "a") is True
        assert store.get_lease(RUNTIME_LEASE, "rt-1") is None
        assert store.release_lease(RUNTIME_LEASE, "rt-1", "a") is False

    def test_a_stopping_holder_lets_its_leases_run_out(self, store: CheckpointStore) -> None:
        store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1_000, ttl_ms=None)
        store.acquire_lease(RUNTIME_LEASE, "rt-2", holder("a"), now_ms=1_000, ttl_ms=60_000)
        assert store.expire_leases("a", now_ms=2_000) == 2
        for key in ("rt-1", "rt-2"):
            taken = store.acquire_lease(RUNTIME_LEASE, key, holder("b"), now_ms=2_000, ttl_ms=1)
            assert taken.holder.owner_id == "b"

    def test_leases_by_kind_and_owner(self, store: CheckpointStore) -> None:
        for key, owner in (("rt-2", "a"), ("rt-1", "b"), ("rt-3", "a")):
            store.acquire_lease(RUNTIME_LEASE, key, holder(owner), now_ms=1_000, ttl_ms=500)
        store.acquire_lease("collector", "gc", holder("a"), now_ms=1_000, ttl_ms=500)
        assert [lease.key for lease in store.list_leases(RUNTIME_LEASE)] == ["rt-1", "rt-2", "rt-3"]
        mine = store.list_leases(RUNTIME_LEASE, owner_id="a")
        assert [lease.key for lease in mine] == ["rt-2", "rt-3"]
        assert mine[0].holder == holder("a")

    def test_a_lease_is_part_of_the_transaction(self, store: CheckpointStore) -> None:
        try:
            with store.transaction():
                store.acquire_lease(RUNTIME_LEASE, "rt-1", holder("a"), now_ms=1, ttl_ms=5)
                raise RuntimeError("undo")
        except RuntimeError:
            pass
        assert store.get_lease(RUNTIME_LEASE, "rt-1") is None

    def test_of_many_takers_at_once_exactly_one_gets_it(self, store: CheckpointStore) -> None:
        winners: list[str] = []
        start = threading.Barrier(8)

        def take(owner: str) -> None:
            start.wait()
            lease = store.acquire_lease(
                RUNTIME_LEASE, "rt-1", holder(owner), now_ms=1_000, ttl_ms=60_000
            )
            if lease.holder.owner_id == owner:
                winners.append(owner)

        threads = [threading.Thread(target=take, args=(f"o{n}",)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(winners) == 1
        lease = store.get_lease(RUNTIME_LEASE, "rt-1")
        assert lease is not None and lease.holder.owner_id == winners[0]

"""The spec of `BucketGenerations` (`ditto_jupyter.control.store.interface`).

Each shared bucket counts the deletion phases garbage collection has begun on it: 0 for a
bucket never collected, one more for each advance (the new count is returned), each bucket
apart, and an advance inside a transaction that fails is undone with it.
"""

from __future__ import annotations

import pytest

from ditto_jupyter.control.store.interface import BucketGenerations, CheckpointStore

BUCKET = "s3://shared/prefix"
OTHER = "s3://shared/other"


class BucketGenerationsContract:
    """`BucketGenerations`; a subclass provides a `store` fixture: a fresh, empty store per
    test."""

    def test_implements_the_role(self, store: CheckpointStore) -> None:
        assert isinstance(store, BucketGenerations)

    def test_a_bucket_never_collected_is_at_generation_0(self, store: CheckpointStore) -> None:
        assert store.bucket_generation(BUCKET) == 0

    def test_each_advance_counts_one_more_and_says_so(self, store: CheckpointStore) -> None:
        assert store.advance_bucket_generation(BUCKET) == 1
        assert store.advance_bucket_generation(BUCKET) == 2
        assert store.bucket_generation(BUCKET) == 2
        assert store.bucket_generation(OTHER) == 0  # each bucket apart
        assert store.advance_bucket_generation(OTHER) == 1
        assert store.bucket_generation(BUCKET) == 2

    def test_an_advance_is_part_of_the_transaction(self, store: CheckpointStore) -> None:
        store.advance_bucket_generation(BUCKET)
        with pytest.raises(InterruptedError), store.transaction():
            assert store.advance_bucket_generation(BUCKET) == 2
            raise InterruptedError
        assert store.bucket_generation(BUCKET) == 1

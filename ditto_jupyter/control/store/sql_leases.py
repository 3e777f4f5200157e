"""Leases on SQL: the `leases` table (schema 6) of the checkpoint store, and the
generations of shared buckets (schema 9) that garbage collection's leases go with.

A lease is taken in one write transaction (SQLite `BEGIN IMMEDIATE`, PostgreSQL's write
lock): the current row is read and replaced only when `lease_free_for` allows, so of two
servers taking the same lease at once exactly one gets it. Times are the caller's clock
(milliseconds since the epoch), given as arguments.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ditto_jupyter.control.store.interface import lease_free_for, require_id, require_model
from ditto_jupyter.control.store.schema import BUCKET_GENERATIONS, LEASES
from ditto_jupyter.control.store.sql_database import SqlDatabase
from ditto_jupyter.core.models import Lease, LeaseHolder

_COLUMNS = (
    LEASES.c.kind,
    LEASES.c.key,
    LEASES.c.owner_id,
    LEASES.c.host,
    LEASES.c.boot_id,
    LEASES.c.pid,
    LEASES.c.pid_start,
    LEASES.c.url,
    LEASES.c.acquired_at_ms,
    LEASES.c.expires_at_ms,
)


def _lease_of(row: Any) -> Lease:
    holder = LeaseHolder(
        owner_id=row.owner_id,
        host=row.host,
        boot_id=row.boot_id,
        pid=int(row.pid),
        pid_start=int(row.pid_start),
        url=row.url,
    )
    expires = None if row.expires_at_ms is None else int(row.expires_at_ms)
    return Lease(
        kind=row.kind,
        key=row.key,
        holder=holder,
        acquired_at_ms=int(row.acquired_at_ms),
        expires_at_ms=expires,
    )


def _one(kind: str, key: str) -> Any:
    return sa.and_(LEASES.c.kind == kind, LEASES.c.key == key)


class SqlLeases(SqlDatabase):
    """The lease methods of the SQL checkpoint store."""

    def acquire_lease(
        self,
        kind: str,
        key: str,
        holder: LeaseHolder,
        *,
        now_ms: int,
        ttl_ms: int | None,
        take_from: str | None = None,
    ) -> Lease:
        """Take the lease for `holder` when `lease_free_for` allows; the lease as it stands."""
        require_id(kind, "a lease kind")
        require_id(key, "a lease key")
        require_model(holder, LeaseHolder, "acquire_lease")
        with self._write() as conn:
            row = conn.execute(sa.select(*_COLUMNS).where(_one(kind, key))).first()
            current = None if row is None else _lease_of(row)
            if not lease_free_for(current, holder.owner_id, now_ms, take_from):
                assert current is not None
                return current
            renewal = current is not None and current.holder.owner_id == holder.owner_id
            lease = Lease(
                kind=kind,
                key=key,
                holder=holder,
                acquired_at_ms=current.acquired_at_ms
                if current is not None and renewal
                else now_ms,
                expires_at_ms=None if ttl_ms is None else now_ms + ttl_ms,
            )
            values = {
                "kind": kind,
                "key": key,
                **holder.model_dump(),
                "acquired_at_ms": lease.acquired_at_ms,
                "expires_at_ms": lease.expires_at_ms,
            }
            statement = self.insert(LEASES).values(**values)
            updates = {
                name: statement.excluded[name] for name in values if name not in ("kind", "key")
            }
            conn.execute(
                statement.on_conflict_do_update(index_elements=["kind", "key"], set_=updates)
            )
        return lease

    def renew_leases(self, owner_id: str, *, now_ms: int, ttl_ms: int) -> int:
        """Extend every lease `owner_id` holds to `now_ms + ttl_ms`; how many."""
        with self._write() as conn:
            result = conn.execute(
                sa.update(LEASES)
                .where(LEASES.c.owner_id == owner_id)
                .values(expires_at_ms=now_ms + ttl_ms)
            )
        return int(result.rowcount)

    def release_lease(self, kind: str, key: str, owner_id: str) -> bool:
        """Drop the lease when `owner_id` holds it; whether it did."""
        with self._write() as conn:
            result = conn.execute(
                sa.delete(LEASES).where(_one(kind, key), LEASES.c.owner_id == owner_id)
            )
        return bool(result.rowcount)

    def expire_leases(self, owner_id: str, *, now_ms: int) -> int:
        """Make every lease `owner_id` holds run out at `now_ms`; how many."""
        with self._write() as conn:
            result = conn.execute(
                sa.update(LEASES).where(LEASES.c.owner_id == owner_id).values(expires_at_ms=now_ms)
            )
        return int(result.rowcount)

    def get_lease(self, kind: str, key: str) -> Lease | None:
        """The lease of (`kind`, `key`), or None."""
        with self._read() as conn:
            row = conn.execute(sa.select(*_COLUMNS).where(_one(kind, key))).first()
        return None if row is None else _lease_of(row)

    def list_leases(self, kind: str, *, owner_id: str | None = None) -> list[Lease]:
        """The leases of one kind (of one owner), by key."""
        query = sa.select(*_COLUMNS).where(LEASES.c.kind == kind)
        if owner_id is not None:
            query = query.where(LEASES.c.owner_id == owner_id)
        query = query.order_by(self._by_codepoint(LEASES.c.key))
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [_lease_of(row) for row in rows]

    def bucket_generation(self, url: str) -> int:
        """How many deletion phases garbage collection has begun on the bucket `url`."""
        require_id(url, "a bucket URL")
        query = sa.select(BUCKET_GENERATIONS.c.generation).where(BUCKET_GENERATIONS.c.url == url)
        with self._read() as conn:
            found = conn.execute(query).scalar_one_or_none()
        return 0 if found is None else int(found)

    def advance_bucket_generation(self, url: str) -> int:
        """Count one more deletion phase on the bucket `url`; the new generation."""
        require_id(url, "a bucket URL")
        with self._write() as conn:
            generation = self.bucket_generation(url) + 1
            statement = self.insert(BUCKET_GENERATIONS).values(url=url, generation=generation)
            conn.execute(
                statement.on_conflict_do_update(
                    index_elements=["url"], set_={"generation": statement.excluded.generation}
                )
            )
        return generation

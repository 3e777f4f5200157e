"""How the SQL store reads checkpoints back: its statements, and rows made into models.

A checkpoint is read from its row joined with its base (`checkpoint_rows`). Every statement
is built once, with bind parameters for what varies (one per shape a call can take): a
statement built per call costs SQLAlchemy more than the index lookup it runs, the more so
for a join of ten columns.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ditto_jupyter.control.store.checkpoint_rows import COLUMN_FIELDS, record_text
from ditto_jupyter.control.store.interface import DamagedRecord, load_model, skip_damaged
from ditto_jupyter.control.store.record_delta import DeltaError
from ditto_jupyter.control.store.schema import CHECKPOINT_BASES, CHECKPOINTS, KEY
from ditto_jupyter.core.models import RuntimeCheckpoint

_BASES = CHECKPOINT_BASES.c
_COL = CHECKPOINTS.c
_COLUMNS = len(COLUMN_FIELDS)
_RUNTIME: sa.BindParameter[str] = sa.bindparam("runtime", type_=sa.Text)
_LIMIT: sa.BindParameter[int] = sa.bindparam("limit", type_=sa.Integer)
_NEWEST = (_COL.created_at_ms.desc(), _COL.seq.desc())
_OLDEST = (_COL.created_at_ms, _COL.seq)


def _records(*, with_base: bool = False) -> sa.Select[Any]:
    """The rows a checkpoint is read from: its columns and JSON, its base's JSON and blob
    ids (`with_base`: only rows whose base is there, for a query that filters on it)."""
    on = _BASES.id == _COL.base_id
    joined = (
        CHECKPOINTS.join(CHECKPOINT_BASES, on)
        if with_base
        else CHECKPOINTS.outerjoin(CHECKPOINT_BASES, on)
    )
    return sa.select(
        *(_COL[name] for name in COLUMN_FIELDS),
        _COL.data,
        _BASES.data.label("base_data"),
        _BASES.context_manifest_id.label("base_context"),
        _BASES.backend_snapshot_id.label("base_snapshot"),
    ).select_from(joined)


RECORDS = _records()
GET_RECORD = RECORDS.where(_COL.checkpoint_id == KEY)
OF_RUNTIME = RECORDS.where(_COL.runtime_id == _RUNTIME).order_by(*_OLDEST)
WITH_SNAPSHOT = _records(with_base=True).where(_BASES.backend_snapshot_id == KEY).order_by(*_OLDEST)
NEWEST_NAMED = (
    RECORDS.where(_COL.name == KEY, _COL.runtime_id == _RUNTIME).order_by(*_NEWEST).limit(1)
)
RUNTIMES_NAMING = (
    sa.select(_COL.runtime_id)
    .where(_COL.name == KEY)
    .group_by(_COL.runtime_id)
    .order_by(_COL.runtime_id)
    .limit(_LIMIT)
)
PAGE_ANCHOR = sa.select(*_OLDEST).where(_COL.checkpoint_id == KEY, _COL.runtime_id == _RUNTIME)


@functools.cache
def page(*, newest_first: bool, after: bool, limited: bool) -> sa.Select[Any]:
    """A runtime's checkpoints in creation order (`after`: past the bound `created`, `seq`;
    `limited`: at most the bound `limit`)."""
    query = RECORDS.where(_COL.runtime_id == _RUNTIME)
    if after:
        key = sa.tuple_(*_OLDEST)
        mark = sa.tuple_(
            sa.bindparam("created", type_=sa.BigInteger), sa.bindparam("seq", type_=sa.Integer)
        )
        query = query.where(key < mark if newest_first else key > mark)
    query = query.order_by(*(_NEWEST if newest_first else _OLDEST))
    return query.limit(_LIMIT) if limited else query


@functools.cache
def id_prefix(
    *, postgresql: bool, bounded: bool, in_runtime: bool, short: bool
) -> sa.ColumnElement[bool]:
    """Ids starting with the bound `prefix` (of `length` characters): a range on the id
    index from it (`bounded`: below the bound `end`), then the exact check; `in_runtime`:
    of the bound `runtime` only."""
    ident: Any = _COL.checkpoint_id.collate("C") if postgresql else _COL.checkpoint_id
    prefix = sa.bindparam("prefix", type_=sa.Text)
    length = sa.bindparam("length", type_=sa.Integer)
    where = [ident >= prefix, sa.func.substr(_COL.checkpoint_id, 1, length) == prefix]
    if bounded:
        where.append(ident < sa.bindparam("end", type_=sa.Text))
    if in_runtime:
        # From 3 characters on the id range is the narrower one (1/4096 of the ids);
        # `runtime_id || ''` keeps the planner from walking the runtime's index instead.
        runtime = _COL.runtime_id if short else _COL.runtime_id + ""
        where.append(runtime == _RUNTIME)
    return sa.and_(*where)


@functools.cache
def by_id_prefix(
    *, postgresql: bool, bounded: bool, in_runtime: bool, short: bool, limited: bool
) -> sa.Select[Any]:
    """The checkpoints `id_prefix` selects, in id order (code points on every backend)."""
    ident: Any = _COL.checkpoint_id.collate("C") if postgresql else _COL.checkpoint_id
    where = id_prefix(postgresql=postgresql, bounded=bounded, in_runtime=in_runtime, short=short)
    query = RECORDS.where(where).order_by(ident)
    return query.limit(_LIMIT) if limited else query


def whole_text(row: Sequence[Any], parsed: dict[str, dict[str, Any]] | None = None) -> str:
    """The record's JSON from a row of these statements (`parsed`: the bases read for the
    rows before it); DamagedRecord when its parts do not make one."""
    data, base_data, base_context, base_snapshot = row[_COLUMNS:]
    if base_data is None:
        raise DamagedRecord(f"stored checkpoint {row[0]!r} is damaged: its base is gone")
    try:
        return record_text(row[:_COLUMNS], base_data, (base_context, base_snapshot), data, parsed)
    except DeltaError as error:
        raise DamagedRecord(
            f"stored checkpoint {row[0]!r} is damaged: {error}; run `ditto doctor`"
        ) from None


def stored_text(row: Sequence[Any]) -> str:
    """What a row holds, as text: its whole record, else its JSON and its base's (for
    `ditto doctor`, and for a collection that keeps alive what a damaged row names)."""
    try:
        return whole_text(row)
    except DamagedRecord:
        return f"{row[_COLUMNS]}\n{row[_COLUMNS + 1] or ''}"


def checkpoints_of(rows: Sequence[Any]) -> list[RuntimeCheckpoint]:
    """The checkpoints of these rows; a damaged one is skipped (see `load_rows`)."""
    loaded: list[RuntimeCheckpoint] = []
    parsed: dict[str, dict[str, Any]] = {}  # checkpoints after one another share a base
    for row in rows:
        values = tuple(row)
        try:
            text = whole_text(values, parsed)
            loaded.append(load_model(RuntimeCheckpoint, text, f"checkpoint {values[0]!r}"))
        except DamagedRecord as error:
            skip_damaged("checkpoint", str(values[0]), error, stored_text(values))
    return loaded

"""Finding checkpoints: by reference (id, id prefix, name) and a page at a time.

Every lookup is an index lookup in the store, so neither gets slower as the store grows:
an id prefix is a range on the id index (at most `PREFIX_MATCHES_COUNTED` rows read), a
name a range on the name index, a page a range on the runtime's creation-order index.
"""

from __future__ import annotations

from collections.abc import Callable

from ditto_jupyter.control.store import CheckpointStore
from ditto_jupyter.core.errors import CheckpointNotFound, InvalidRequest
from ditto_jupyter.core.models import CheckpointListResult, CheckpointSummary, RuntimeCheckpoint

#: How many runtimes an ambiguous name lists in its error.
NAMED_RUNTIMES_SHOWN = 10
#: How many checkpoints an ambiguous id prefix counts before saying "or more".
PREFIX_MATCHES_COUNTED = 100
#: How many rows (checkpoints of an id prefix, runtimes of a name) a lookup limited to
#: some runtimes reads at most before it keeps the visible ones.
_FILTERED_READ = 10_000


#: Whether the checkpoints of a runtime (by id) may be found at all (a user's own).
Visible = Callable[[str], bool]


def resolve_checkpoint(
    store: CheckpointStore,
    reference: str,
    runtime_id: str | None = None,
    *,
    visible: Visible | None = None,
) -> RuntimeCheckpoint:
    """A checkpoint named by id, unique id prefix, or name (within `runtime_id`).

    A full id wins, then a name, then an id prefix; a name reused within a runtime means
    its newest checkpoint. With no runtime given, a name that checkpoints of several
    runtimes share is ambiguous: InvalidRequest naming them. CheckpointNotFound when
    nothing matches; InvalidRequest when a prefix matches several.

    With `visible`, the checkpoints of runtimes it refuses do not exist for this lookup:
    they match nothing, make nothing ambiguous, and no error names them.
    """
    if not reference:
        raise InvalidRequest("a checkpoint reference must not be empty")
    shown = visible or _everything
    exact = store.get_checkpoint(reference)
    if exact is not None and shown(exact.runtime_id):
        return exact
    named = _newest_named(store, reference, runtime_id, shown)
    if named is not None:
        return named
    read = PREFIX_MATCHES_COUNTED if visible is None else _FILTERED_READ
    found = store.find_by_id_prefix(reference, runtime_id, limit=read)
    matches = [c for c in found if shown(c.runtime_id)][:PREFIX_MATCHES_COUNTED]
    if not matches:
        where = f" in runtime {runtime_id}" if runtime_id else ""
        raise CheckpointNotFound(f"no checkpoint named or starting with {reference!r}{where}")
    if len(matches) > 1:
        more = " or more" if len(matches) == PREFIX_MATCHES_COUNTED else ""
        raise InvalidRequest(
            f"{reference!r} matches {len(matches)}{more} checkpoints; give more of the id"
        )
    return matches[0]


def _everything(runtime_id: str) -> bool:
    return True


def _newest_named(
    store: CheckpointStore, name: str, runtime_id: str | None, visible: Visible
) -> RuntimeCheckpoint | None:
    """The newest checkpoint with that name, in `runtime_id` or else in the one visible
    runtime that has one (InvalidRequest when several have)."""
    if runtime_id is not None:
        return store.newest_named(name, runtime_id) if visible(runtime_id) else None
    if visible is _everything:
        runtimes = store.runtimes_naming(name, limit=NAMED_RUNTIMES_SHOWN + 1)
    else:  # the runtimes of others do not count: ask for all, keep the visible
        every = store.runtimes_naming(name, limit=_FILTERED_READ)
        runtimes = [r for r in every if visible(r)][: NAMED_RUNTIMES_SHOWN + 1]
    if len(runtimes) > 1:
        shown = ", ".join(runtimes[:NAMED_RUNTIMES_SHOWN])
        more = ", ..." if len(runtimes) > NAMED_RUNTIMES_SHOWN else ""
        raise InvalidRequest(
            f"{name!r} names checkpoints of several runtimes ({shown}{more}); "
            "say which: RUNTIME:NAME, or the checkpoint id"
        )
    return store.newest_named(name, runtimes[0]) if runtimes else None


def checkpoint_page(
    store: CheckpointStore,
    runtime_id: str,
    *,
    limit: int | None = None,
    cursor: str | None = None,
    newest_first: bool = False,
    summarise: Callable[[RuntimeCheckpoint], CheckpointSummary] | None = None,
) -> CheckpointListResult:
    """One page of a runtime's checkpoints, oldest (or newest) first (each as
    `summarise` makes it: its replication state now, under a service).

    With `limit`, at most that many, and `next_cursor` names the last one when more
    follow: pass it as `cursor` for the next page. Without, every checkpoint from
    `cursor` on. InvalidRequest for a limit below 1 or a cursor that is not a checkpoint
    of the runtime.
    """
    if limit is not None and limit < 1:
        raise InvalidRequest(f"limit must be at least 1, got {limit}")
    if cursor is not None:
        anchor = store.get_checkpoint(cursor)
        if anchor is None or anchor.runtime_id != runtime_id:
            raise InvalidRequest(f"cursor {cursor!r} is not a checkpoint of runtime {runtime_id}")
    page = store.page_checkpoints(
        runtime_id,
        limit=None if limit is None else limit + 1,
        after=cursor,
        newest_first=newest_first,
    )
    more = limit is not None and len(page) > limit
    page = page[:limit]
    return CheckpointListResult(
        checkpoints=[(summarise or RuntimeCheckpoint.summary)(c) for c in page],
        next_cursor=page[-1].checkpoint_id if more and page else None,
    )

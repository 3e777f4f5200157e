"""How the SQL store keeps a checkpoint: columns, a base it shares, and its own part.

- The columns of its `checkpoints` row hold what queries ask for (id, runtime, parent, name,
  creation time, pruned); its JSON never repeats them.
- A `checkpoint_bases` row holds what a run of checkpoints share (`SHARED_FIELDS`: the
  session they copied, the backend snapshot's ref, the namespace manifest and what it
  could not keep), with the two blob ids as columns. Every checkpoint of a base names
  exactly the base's blobs, so garbage collection finds each reference there.
- Its own JSON (`data`) holds its other fields where they differ from their defaults
  (metadata, the cell `%autocheckpoint` took it after, ...), and under `DELTA_KEY` how its
  shared part differs from the base's (`record_delta`).

A checkpoint after a cell that changed nothing differs from its parent by the run in its
session: it shares its parent's base and writes ~120 bytes of its own, so several rows fit
a page and none takes an overflow page (a whole record is ~1.5 KB).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ditto_jupyter.control.store.interface import blob_ids
from ditto_jupyter.control.store.record_delta import DeltaError, apply_delta, delta, same_json
from ditto_jupyter.core.models import RuntimeCheckpoint

#: The fields the `checkpoints` row keeps in columns of their own.
COLUMN_FIELDS = (
    "checkpoint_id",
    "runtime_id",
    "parent_checkpoint_id",
    "name",
    "created_at_ms",
    "pruned",
)
#: The fields a base holds for the checkpoints that share it.
SHARED_FIELDS = ("session", "backend_ref", "context_manifest_id", "unrestorable")
#: The key of a row's JSON under which its shared part's delta is kept.
DELTA_KEY = "delta"
#: The longest delta (characters of JSON) worth keeping against a base: past it, the
#: checkpoint makes a base of its own, which the next ones share.
MAX_DELTA = 512

_OWN_FIELDS = tuple(
    name for name in RuntimeCheckpoint.model_fields if name not in COLUMN_FIELDS + SHARED_FIELDS
)
assert DELTA_KEY not in RuntimeCheckpoint.model_fields
_DEFAULTS: dict[str, Any] = {
    name: orjson.loads(
        orjson.dumps(RuntimeCheckpoint.model_fields[name].get_default(call_default_factory=True))
    )
    for name in _OWN_FIELDS
}


@dataclass(frozen=True)
class CheckpointParts:
    """A checkpoint cut as the store keeps it (its columns are read off the model)."""

    shared: dict[str, Any]
    own: dict[str, Any]
    context_manifest_id: str | None
    backend_snapshot_id: str | None


def parts_of(checkpoint: RuntimeCheckpoint) -> CheckpointParts:
    """The shared part, the own fields that are not at their defaults, and the blob ids."""
    dumped = checkpoint.model_dump(mode="json", exclude=set(COLUMN_FIELDS))
    own = {
        name: dumped[name] for name in _OWN_FIELDS if not same_json(dumped[name], _DEFAULTS[name])
    }
    context, snapshot = blob_ids(checkpoint)
    return CheckpointParts({name: dumped[name] for name in SHARED_FIELDS}, own, context, snapshot)


def delta_against(base_text: str, shared: dict[str, Any]) -> dict[str, Any] | None:
    """How `shared` differs from a base's JSON, when that is worth keeping (short enough,
    and the base reads back); None when the checkpoint should not use that base."""
    try:
        base = orjson.loads(base_text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(base, dict):
        return None
    changes = delta(base, shared)
    if changes is None or len(orjson.dumps(changes)) > MAX_DELTA:
        return None
    return changes


def own_text(own: Mapping[str, Any], changes: Mapping[str, Any]) -> str:
    """The JSON of a checkpoint's row: its own fields, and its delta when there is one."""
    return orjson.dumps({**own, DELTA_KEY: changes} if changes else own).decode()


def record_text(
    columns: Mapping[str, Any],
    base_text: str,
    base_blobs: tuple[str | None, str | None],
    data: str,
) -> str:
    """The whole record's JSON from a row's columns, its base and its own JSON.

    DeltaError when they do not make one: a row or base that is not a JSON object, a delta
    that does not apply, or a record naming other blobs than its base holds (garbage
    collection would not see them). A row's own JSON wins over the columns and the base:
    a record migrated whole (one that did not read back) is kept as it was.
    """
    try:
        base, own = orjson.loads(base_text), orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise DeltaError(f"it is not JSON ({error})") from None
    if not isinstance(base, dict) or not isinstance(own, dict):
        raise DeltaError("it is not a JSON object")
    shared = apply_delta(base, own.pop(DELTA_KEY, {}))
    record = {**columns, **shared, **own}
    ref = record.get("backend_ref")
    named = (
        record.get("context_manifest_id"),
        ref.get("provider_snapshot_id") if isinstance(ref, dict) else None,
    )
    if named != base_blobs:
        raise DeltaError(f"it names the blobs {named}, its base {base_blobs}")
    return orjson.dumps(record).decode()

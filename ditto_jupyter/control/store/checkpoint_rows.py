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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pydantic_core

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
_OWN = frozenset(_OWN_FIELDS)
_BASE_START = '{"session":{'
_FIELDS = tuple(RuntimeCheckpoint.model_fields)
#: The fields before the shared ones (all columns), and the other columns.
_HEAD = _FIELDS[: _FIELDS.index(SHARED_FIELDS[0])]
_TAIL_COLUMNS = tuple(name for name in COLUMN_FIELDS if name not in _HEAD)
assert COLUMN_FIELDS[: len(_HEAD)] == _HEAD
assert _FIELDS[len(_HEAD) : len(_HEAD) + len(SHARED_FIELDS)] == SHARED_FIELDS
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


def _parsed(text: str) -> Any:
    """A JSON text's value, exactly (orjson reads an integer past 64 bits as a float)."""
    return pydantic_core.from_json(text)


def _text(value: object) -> str:
    """The JSON of a value as pydantic writes records (an integer of any size included)."""
    return pydantic_core.to_json(value).decode()


def delta_against(base_text: str, shared: dict[str, Any]) -> dict[str, Any] | None:
    """How `shared` differs from a base's JSON, when that is worth keeping (short enough,
    and the base reads back); None when the checkpoint should not use that base."""
    try:
        base = _parsed(base_text)
    except ValueError:
        return None
    if not isinstance(base, dict):
        return None
    changes = delta(base, shared)
    if changes is None or len(_text(changes)) > MAX_DELTA:
        return None
    return changes


def own_text(own: Mapping[str, Any], changes: Mapping[str, Any]) -> str:
    """The JSON of a checkpoint's row: its own fields, and its delta when there is one."""
    return _text({**own, DELTA_KEY: changes} if changes else own)


def record_text(
    columns: Sequence[Any],
    base_text: str,
    base_blobs: tuple[str | None, str | None],
    data: str,
    parsed: dict[str, dict[str, Any]] | None = None,
) -> str:
    """The whole record's JSON from a row's columns (in `COLUMN_FIELDS` order), its base
    and its own JSON (`parsed`: bases read already, by their text, for rows sharing them).

    DeltaError when they do not make one: a row or base that is not a JSON object, a delta
    that does not apply, or one that names other blobs than its base's columns (garbage
    collection would not see them; a base's JSON and columns are written together). A
    row's own JSON wins over the columns and the base: a record migrated whole (one that
    did not read back) is kept as it was.
    """
    try:  # read for its keys only: its text is what goes into the record
        own = orjson.loads(data)
    except orjson.JSONDecodeError as error:
        raise DeltaError(f"it is not JSON ({error})") from None
    if not isinstance(own, dict):
        raise DeltaError("it is not a JSON object")
    if DELTA_KEY not in own and own.keys() <= _OWN and base_text.startswith(_BASE_START):
        # The base as the store wrote it (`own_text` of the shared fields, beside the blob
        # columns made of the same checkpoint): its members go in as they are, unparsed,
        # after the fields before them (pydantic reads a record fastest in field order).
        head = orjson.dumps(dict(zip(_HEAD, columns, strict=False))).decode()
        tail = orjson.dumps(dict(zip(_TAIL_COLUMNS, columns[len(_HEAD) :], strict=True)))
        members = [head[:-1], base_text[1:-1], tail.decode()[1:-1]]
        if own:
            members.append(data.strip()[1:-1])
        return ",".join(members) + "}"
    own = _parsed(data)  # its values, exactly
    base = parsed.get(base_text) if parsed is not None else None
    if base is None:
        try:
            base = _parsed(base_text)
        except ValueError as error:
            raise DeltaError(f"its base is not JSON ({error})") from None
        if not isinstance(base, dict):
            raise DeltaError("its base is not a JSON object")
        if parsed is not None:
            parsed[base_text] = base
    shared = apply_delta(base, own.pop(DELTA_KEY, {}))
    merged = {**dict(zip(COLUMN_FIELDS, columns, strict=True)), **shared, **own}
    record = {name: merged.pop(name) for name in _FIELDS if name in merged}
    record.update(merged)  # what is no field: refused when read
    ref = record.get("backend_ref")
    named = (
        record.get("context_manifest_id"),
        ref.get("provider_snapshot_id") if isinstance(ref, dict) else None,
    )
    if named != base_blobs:
        raise DeltaError(f"it names the blobs {named}, its base {base_blobs}")
    return _text(record)

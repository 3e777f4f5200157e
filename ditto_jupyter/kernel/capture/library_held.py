"""Objects a library's module holds as a global, which code anywhere can change unnamed.

numpy's global random generator (`np.random.seed()` and `np.random.rand()` draw from it),
scipy's distribution objects (`scipy.stats.loguniform` is one shared instance, whose random
state is numpy's global one), a library's registry or configuration object: a notebook value
that holds one of them changes whenever any cell calls into the library, though no cell
names the value. So the change journal's word ("nothing named it") is not enough for them:
a capture digests each such object a kept component holds (one small pickle, not the
value's), and a component one of whose library objects digests differently from the last
capture is pickled again.

Which objects are a library's (every changeable global of every module but the notebook's,
less matplotlib's artists: a figure a component holds is watched already by `figure_watch`)
is `library_data`'s to say; this module digests them.
"""

from __future__ import annotations

import hashlib
import itertools
import pickle
from collections.abc import Iterable

import xxhash

from ditto_jupyter.kernel.capture.library_data import LIBRARY

#: The digest of an object that cannot be pickled alone: never equal to another.
_UNKNOWN = b""


def library_digest(obj: object) -> bytes:
    """A digest of one library object's state (its pickle), or `_UNKNOWN`."""
    try:
        data = pickle.dumps(obj, protocol=5)
    except Exception:  # unpicklable alone: always taken as changed
        return _UNKNOWN
    return hashlib.blake2b(data, digest_size=16).digest()


def shared_digest(obj: object) -> bytes:
    """A digest of an object's state whose big buffers (numpy arrays) are hashed in place
    (XXH3), not copied into the pickle; `_UNKNOWN` when it cannot be pickled alone."""
    buffers: list[pickle.PickleBuffer] = []
    try:
        data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        digest = hashlib.blake2b(data, digest_size=16)
        for buffer in buffers:
            digest.update(xxhash.xxh3_128_digest(buffer.raw()))
    except Exception:  # unpicklable alone, or a buffer that is not contiguous
        return _UNKNOWN
    return digest.digest()


#: The library objects each component's id set holds (id(set) -> (the set, their ids)), for
#: the library map they were looked up in: a kept component's set is the same object
#: capture after capture (never changed), so while no module came or went its look-up is
#: done once, not twice per capture. Only the last capture's sets are kept.
_hits: tuple[dict[int, object] | None, dict[int, tuple[set[int], list[int]]]] = (None, {})


def _library_hits(ids: set[int], library: dict[int, object]) -> list[int]:
    """The ids among `ids` of objects of `library` (`LibraryData.objects`)."""
    global _hits
    if _hits[0] is not library:
        _hits = (library, {})
    known = _hits[1]
    entry = known.get(id(ids))
    if entry is not None and entry[0] is ids:
        return entry[1]
    found = list(ids & library.keys())
    known[id(ids)] = (ids, found)
    return found


def library_digests(
    notebook: dict[str, object], id_sets: Iterable[set[int]], memo: dict[int, bytes]
) -> dict[int, tuple[object, bytes]]:
    """The library objects among the ids of `id_sets` (one set per component of a capture),
    each with its digest (from `memo`, the digests this capture took already, else taken
    now); the objects are kept, so the ids stay theirs."""
    global _hits
    library = LIBRARY.objects(notebook)
    sets = list(id_sets)
    found = [_library_hits(ids, library) for ids in sets]
    known = _hits[1]
    _hits = (library, {id(ids): known[id(ids)] for ids in sets})  # the next capture's base
    digests: dict[int, tuple[object, bytes]] = {}
    for object_id in itertools.chain.from_iterable(found):
        if object_id in digests:
            continue
        digest = memo.get(object_id)
        if digest is None:
            digest = memo[object_id] = library_digest(library[object_id])
        digests[object_id] = (library[object_id], digest)
    return digests


def changed_library_objects(
    notebook: dict[str, object],
    ids: set[int],
    before: dict[int, tuple[object, bytes]],
    memo: dict[int, bytes],
) -> bool:
    """Whether a kept component holding `ids` holds a library object that the last capture
    did not digest, or that digests differently now (`memo`: this capture's digests)."""
    library = LIBRARY.objects(notebook)
    for object_id in _library_hits(ids, library):
        obj = library[object_id]
        seen = before.get(object_id)
        if seen is None or seen[0] is not obj or seen[1] == _UNKNOWN:
            return True
        now = memo.get(object_id)
        if now is None:
            now = memo[object_id] = library_digest(obj)
        if now != seen[1]:
            return True
    return False

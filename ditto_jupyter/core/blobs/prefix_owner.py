"""Which deployment a bucket prefix belongs to, so that no deployment serves or collects
another's objects.

A deployment is the servers that share one checkpoint store and one signing secret. Only
they hold the secret, so it names the deployment: the key id (`BlobStore.key_id`, an HMAC
of a fixed label under the key, which does not reveal the key). The first server that
uses a prefix writes `<prefix>/deployment.json` create-only (`If-None-Match: *`), naming
that key id; every server reads it back before its first upload, fetch or collection
there, and refuses a prefix another deployment owns (`PrefixOwnedElsewhere`: one sentence
naming the prefix, both key ids and the setting to change). So a deployment whose
configuration was copied from another, and points at the other's prefix, never deletes
the other's objects, nor restores from them.

The object lies beside `chunks/` and `manifests/`, never inside them: collection lists
only those two, so it is never collected. Deleting it by hand gives the prefix up (the next
server to use it claims it again).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson

from ditto_jupyter.core.blobs.errors import BlobNotFound, PrefixOwnedElsewhere
from ditto_jupyter.core.blobs.object_store import ObjectStore

#: The object naming the deployment that owns a prefix (under the prefix).
OWNER_OBJECT = "deployment.json"
#: What the object says it is.
OWNER_FORMAT = "ditto-jupyter deployment"
#: Claims tried when the object is deleted between a refused create and its read.
_CLAIMS = 3
_log = logging.getLogger(__name__)


class PrefixOwner:
    """The claim of one deployment (its key id) on one bucket prefix (see the module)."""

    def __init__(self, bucket: ObjectStore, key_id: str) -> None:
        self.bucket = bucket
        self.key_id = key_id
        self._owned = False
        self._lock = threading.Lock()

    @property
    def owned(self) -> bool:
        """Whether this process has seen the prefix claimed by this deployment."""
        return self._owned

    def ensure(self) -> None:
        """Claim the prefix, or check that this deployment owns it (once per process):
        PrefixOwnedElsewhere when another does, ObjectStoreUnavailable when the object
        store cannot say."""
        if self._owned:
            return
        with self._lock:
            if not self._owned:
                self._claim()
                self._owned = True

    def _claim(self) -> None:
        document = orjson.dumps(
            {
                "format": OWNER_FORMAT,
                "deployment": self.key_id,
                "claimed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
        for _ in range(_CLAIMS):
            if self.bucket.put_new(OWNER_OBJECT, document):
                _log.info(
                    "ditto: the prefix %s is claimed for this deployment (signing key %s)",
                    self.bucket.location,
                    self.key_id,
                )
                return
            try:
                found = self.bucket.get(OWNER_OBJECT)
            except BlobNotFound:  # deleted between the two requests: claim it again
                continue
            owner, claimed_at = _owner_of(found)
            if owner == self.key_id:
                return
            raise PrefixOwnedElsewhere(self._refusal(owner, claimed_at))
        raise PrefixOwnedElsewhere(
            f"blob_store_url: the owner object {OWNER_OBJECT} of {self.bucket.location} "
            f"kept disappearing while this server claimed the prefix; another process "
            "deletes it: find it before using the prefix"
        )

    def _refusal(self, owner: str | None, claimed_at: str | None) -> str:
        where = self.bucket.location
        whose = (
            f"the deployment whose signing key is {owner}"
            + (f" (claimed {claimed_at})" if claimed_at else "")
            if owner
            else f"an owner object {OWNER_OBJECT} that ditto-jupyter cannot read"
        )
        return (
            f"blob_store_url: the prefix {where} belongs to {whose}, not to this deployment "
            f"(signing key {self.key_id}), so this server neither uploads, restores nor "
            "collects there. Give each deployment a prefix of its own in blob_store_url; if "
            "the prefix is this deployment's, blob_secret_file no longer holds the secret "
            "it used"
        )


def _owner_of(document: bytes) -> tuple[str | None, str | None]:
    """The key id and claim time an owner object names (None, None: unreadable)."""
    try:
        parsed: Any = orjson.loads(document)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(parsed, dict) or parsed.get("format") != OWNER_FORMAT:
        return None, None
    owner, claimed_at = parsed.get("deployment"), parsed.get("claimed_at")
    return (
        owner if isinstance(owner, str) else None,
        claimed_at if isinstance(claimed_at, str) else None,
    )

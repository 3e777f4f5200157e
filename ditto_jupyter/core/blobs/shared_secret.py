"""The manifest signing secret every server of a deployment shares.

Manifests are signed with HMAC-SHA256 (`store`). A store on one disk makes its own key
(`<root>/secret`); servers that share an object store must share the key too, or a
manifest one of them wrote fails its signature on the others. The deployment keeps it in
a secret file (a Kubernetes secret mounted read-only, say) named by `blob_secret_file` /
`DITTO_BLOB_SECRET_FILE`: 32 random bytes, or 64 hex digits. It is never put in the bucket:
the signature is what stops a writer of the bucket from making a restore load anything.

`install_secret` makes it the key of a data directory's blob store, where the server's
kernels read it as they read a local store's own. A data directory whose store already has
another key is refused: its manifests were signed with that one.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from ditto_jupyter.core.blobs.errors import BlobError, BlobSettingError, os_failure, place_of

#: Bytes of a signing key.
SECRET_BYTES = 32
#: How to make a secret file, for the error that finds a bad one.
MAKE_ONE = "python3 -c 'import secrets; print(secrets.token_hex(32))' > FILE"
#: The setting that names the file, as errors name it.
SETTING = "blob_secret_file (DITTO_BLOB_SECRET_FILE)"
_log = logging.getLogger(__name__)


def read_secret_file(path: Path) -> bytes:
    """The key in a secret file: 32 raw bytes, or 64 hex digits (with a newline or not);
    BlobSettingError naming the setting and what is wrong otherwise."""
    try:
        data = path.read_bytes()
        mode = path.stat().st_mode
    except OSError as exc:
        raise BlobSettingError(
            f"{SETTING} {str(path)!r} cannot be read: {exc.strerror} (it must name a file of "
            f"{SECRET_BYTES} random bytes or {2 * SECRET_BYTES} hex digits; make one with: "
            f"{MAKE_ONE})"
        ) from None
    if mode & 0o007:
        _log.warning(
            "the blob signing secret file %s can be read by any user of this machine", path
        )
    if len(data) == SECRET_BYTES:
        return data
    text = data.strip()
    if len(text) == 2 * SECRET_BYTES:
        with contextlib.suppress(ValueError):
            return bytes.fromhex(text.decode("ascii", errors="replace"))
    raise BlobSettingError(
        f"{SETTING} {str(path)!r} holds {len(data)} bytes: it must hold "
        f"{SECRET_BYTES} random bytes or {2 * SECRET_BYTES} hex digits (make one with: "
        f"{MAKE_ONE})"
    )


def install_secret(root: Path, secret: bytes) -> None:
    """Make `secret` the signing key of the blob store in `root` (created if missing)."""
    path = root / "secret"
    place = place_of(root)
    try:
        if path.exists():
            if not hmac.compare_digest(path.read_bytes(), secret):
                raise BlobSettingError(
                    f"{SETTING}: the blob store in {root} already has a signing secret of "
                    "its own, not the deployment's shared one: the manifests there were "
                    "signed with it. Make its file (secret) the shared secret of every "
                    "server, or start this server on an empty data directory"
                )
            return
        staged = root / f".secret-{secrets.token_hex(8)}.tmp"
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secret)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(staged, path)  # fails if another process installed it first
            except FileExistsError:
                if not hmac.compare_digest(path.read_bytes(), secret):
                    raise BlobError(
                        f"another signing secret appeared in {root} meanwhile"
                    ) from None
        finally:
            os.unlink(staged)
    except OSError as exc:
        raise os_failure(exc, place, "installing the blob signing secret") from None

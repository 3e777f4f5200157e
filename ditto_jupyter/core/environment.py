"""The `DITTO_*` environment variables: every name defined once, and the helpers that set
or strip them.

A server tells the kernels it starts where to call back (`DITTO_SERVER_URL`,
`DITTO_TOKEN`), where the data lives (`DITTO_DATA_DIR`) and which runtime they serve
(`DITTO_RUNTIME_ID`, `DITTO_RUNTIME_TOKEN`, `DITTO_WORKSPACE`). The CLI, the magics and
the hosts read the same names (and `default_data_dir` when none names the data directory).
Plain strings only: core imports nothing above it, so every layer can use this module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

#: The Jupyter server a kernel (or the `ditto` command) calls: URL with base_url.
SERVER_URL_ENV: Final = "DITTO_SERVER_URL"
#: That server's token.
TOKEN_ENV: Final = "DITTO_TOKEN"
#: The data directory: store, blob store, workspaces.
DATA_DIR_ENV: Final = "DITTO_DATA_DIR"
#: The runtime a kernel serves (its Jupyter session id).
RUNTIME_ID_ENV: Final = "DITTO_RUNTIME_ID"
#: Proof, for the server's `self/...` routes, that a request comes from that runtime's kernel.
RUNTIME_TOKEN_ENV: Final = "DITTO_RUNTIME_TOKEN"
#: The runtime's local workspace directory (what checkpoints version, where %%sandbox runs).
WORKSPACE_ENV: Final = "DITTO_WORKSPACE"
#: The conversation a kernel's magics register their runtime under, when no server did.
CONVERSATION_ID_ENV: Final = "DITTO_CONVERSATION_ID"

#: The checkpoint store as a SQLAlchemy URL (PostgreSQL, shared by a deployment's servers).
STORE_URL_ENV: Final = "DITTO_STORE_URL"

# A server's blob store replicated to an S3-compatible object store (the server reads
# these; its kernels never use them, and the credentials come from the AWS chain).
#: The object store, as `s3://bucket/prefix`.
BLOB_STORE_URL_ENV: Final = "DITTO_BLOB_STORE_URL"
#: Its endpoint URL, for S3-compatible servers other than AWS (Ceph, MinIO...).
BLOB_STORE_ENDPOINT_ENV: Final = "DITTO_BLOB_STORE_ENDPOINT"
#: Its region (else the AWS chain's, else us-east-1).
BLOB_STORE_REGION_ENV: Final = "DITTO_BLOB_STORE_REGION"
#: The file holding the manifest signing secret every server of the deployment shares.
BLOB_SECRET_FILE_ENV: Final = "DITTO_BLOB_SECRET_FILE"
#: Bytes of chunk files the local cache keeps (replicated ones beyond it are evicted).
BLOB_CACHE_BYTES_ENV: Final = "DITTO_BLOB_CACHE_BYTES"
#: Where a checkpoint's bytes must be before it returns: `local` or `replicated`.
CHECKPOINT_DURABILITY_ENV: Final = "DITTO_CHECKPOINT_DURABILITY"

#: The variables that say which runtime a kernel serves (never in a pooled kernel's env).
IDENTITY_ENV: Final = (RUNTIME_ID_ENV, RUNTIME_TOKEN_ENV, WORKSPACE_ENV)


def default_data_dir() -> Path:
    """`$DITTO_DATA_DIR`, else `$XDG_DATA_HOME/ditto-jupyter` (~/.local/share by default)."""
    explicit = os.environ.get(DATA_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "ditto-jupyter"


def workspace_env(path: Path | None) -> dict[str, str]:
    """The variables a kernel of a runtime with this workspace gets (none without one)."""
    return {WORKSPACE_ENV: str(path)} if path is not None else {}


def server_env(url: str, token: str, data_dir: Path) -> dict[str, str]:
    """What every kernel a server starts gets: where to call back, and the data directory."""
    return {SERVER_URL_ENV: url, TOKEN_ENV: token, DATA_DIR_ENV: str(data_dir)}


def runtime_identity_env(runtime_id: str, runtime_token: str | None = None) -> dict[str, str]:
    """The variables that make a kernel runtime `runtime_id`'s (its token, when known)."""
    env = {RUNTIME_ID_ENV: runtime_id}
    if runtime_token is not None:
        env[RUNTIME_TOKEN_ENV] = runtime_token
    return env


def without_workspace(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without an inherited workspace (a kernel must never get another's)."""
    return {name: value for name, value in environ.items() if name != WORKSPACE_ENV}


def without_runtime_identity(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without a runtime id, token or workspace (for a kernel of no runtime yet)."""
    return {name: value for name, value in environ.items() if name not in IDENTITY_ENV}

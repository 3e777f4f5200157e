"""Which runtime a `DittoSaver` serves and how it reaches its threads: this kernel's
runtime control, as the magics have it (`kernel.this_kernel`).

Under a Jupyter server (`ServerControl`) the saver talks to the server's REST API with the
kernel's runtime token and writes large values into the local blob store directly, as the
kernel's namespace captures do; it never holds the store's credentials. Without a server
(`LocalControl`) it calls the control plane the magics run in process, on the embedded
store.
"""

from __future__ import annotations

from ditto_jupyter.core.blobs import BlobStore
from ditto_jupyter.core.errors import InvalidRequest
from ditto_jupyter.langgraph.transports import LocalThreads, ServerThreads, ThreadsTransport


def connect(control: object | None) -> tuple[ThreadsTransport, BlobStore]:
    """The transport to `control`'s runtime (default: this kernel's) and its blob store."""
    from ditto_jupyter.kernel import this_kernel
    from ditto_jupyter.kernel.local_control import LocalControl
    from ditto_jupyter.kernel.server_control import ServerControl

    chosen = control if control is not None else this_kernel.control()
    if isinstance(chosen, ServerControl):
        from ditto_jupyter.kernel.capture.kernel_entry import open_blob_store

        client = chosen.client
        transport = ServerThreads(
            client.http, client.base_url, chosen.runtime_id, chosen.runtime_token
        )
        return transport, open_blob_store(chosen.blob_root)
    if isinstance(chosen, LocalControl):
        service = chosen.service
        return LocalThreads(service.langgraph, chosen.runtime_id), service.blobs
    raise InvalidRequest(
        f"DittoSaver needs this kernel's runtime control (a server's or the in-process one), "
        f"not a {type(chosen).__name__}"
    )

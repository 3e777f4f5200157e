"""Capture and restore a Python namespace (a kernel's `user_ns`) into the blob store.

Runs inside an IPython kernel, and in plain Python for tests. One checkpoint is one signed
kernel-namespace manifest (`manifest`):

- `rules`: which names are state. IPython's own names (`In`, `Out`, `_`, `_i3`, `_3`,
  `exit`, `get_ipython`, everything in `user_ns_hidden`, dunders) are not; a user's `_name` is;
- `pickling`: variables pickled alone, then grouped into alias-connected components pickled
  together (so `a is b` survives); notebook functions and classes by value; big buffers out
  of band; `atoms`: immutable values and singletons (dtypes, types, enum members, ...) tie
  no variables together; `counters`: counters pickling advances are wound back, so an
  unchanged value pickles to the same bytes;
- `manifest`: the manifest's format; a large namespace's components go in content-addressed
  parts, so a small change writes one part;
- `pyplot_state`: pyplot's open figures, their numbers and the current one; `pods`: each
  open figure pickled in a stream of its own, which other streams refer into, so an
  unchanged figure is kept as stored; `figure_watch`: which figures changed since a capture
  (matplotlib's stale marks);
- `chunks`: out-of-band buffers stored as fixed-size chunks by BLAKE3 name, an XXH3 memo so
  an unchanged buffer is never re-hashed or re-written, and one filesystem sync per capture;
- `capturing` / `restoring`: `capture_namespace` and `restore_namespace` (a restore checks
  everything before it touches the namespace, and patches big live arrays in place);
  `snapshot_namespace` is a capture's first half, which reads the live namespace, and can
  leave writing to another thread;
- `cell_effects` / `journal` / `incremental` / `planning` / `storing`: the names a cell's
  code can have touched (`trusted_code`: which modules are a library's, not the
  notebook's), the journal of everything that ran in the kernel since a capture, and a
  capture that pickles only what may have changed (with its components and pods) again,
  and stores its new components, for `%autocheckpoint`, `%checkpoint` and the server's
  captures alike;
- `library_data`: what is the libraries' (one walk of `sys.modules`: their changeable
  globals, matplotlib's containers), never tying notebook values together;
  `library_held`: digests of the library objects a kept value holds;
- `kernel_entry`: the one entry of every capture, `capture_following` (the server's
  call, `%checkpoint`, `%pause`, `%diff live`, the in-process control; `%autocheckpoint`
  takes the same base through `take_base` / `keep_base`), the functions a kernel host calls
  inside a kernel (`kernel_capture`, `kernel_restore`, `warm_up`, `last_timing`) and the
  kernel's own `open_blob_store`.

Hosts call `ditto_jupyter.kernel.capture:<function>`, and pickled notebook functions name
`ditto_jupyter.kernel.capture._make_function` and its two siblings (see
`pickling.PICKLE_MODULE`): those names stay here, whatever module defines them.
"""

from __future__ import annotations

from ditto_jupyter.core.blobs import CHUNK_SIZE
from ditto_jupyter.kernel.capture.capturing import capture_namespace
from ditto_jupyter.kernel.capture.kernel_entry import (
    capture_following,
    kernel_capture,
    kernel_restore,
    last_timing,
    open_blob_store,
    warm_up,
)
from ditto_jupyter.kernel.capture.manifest import (
    BUFFER_BYTEARRAY,
    BUFFER_BYTES,
    BUFFER_PICKLE,
    MANIFEST_KIND,
    MANIFEST_VERSION,
    load_manifest,
)
from ditto_jupyter.kernel.capture.pickling import LARGE_STREAM, OUT_OF_BAND_MIN
from ditto_jupyter.kernel.capture.pickling import _live_namespace as _live_namespace
from ditto_jupyter.kernel.capture.pickling import _make_function as _make_function
from ditto_jupyter.kernel.capture.pickling import _pod_object as _pod_object
from ditto_jupyter.kernel.capture.pickling import _set_function_state as _set_function_state
from ditto_jupyter.kernel.capture.restoring import MMAP_MIN, restore_namespace
from ditto_jupyter.kernel.capture.rules import IPYTHON_NAMES, is_state_name

__all__ = [
    "BUFFER_BYTEARRAY",
    "BUFFER_BYTES",
    "BUFFER_PICKLE",
    "CHUNK_SIZE",
    "IPYTHON_NAMES",
    "LARGE_STREAM",
    "MANIFEST_KIND",
    "MANIFEST_VERSION",
    "MMAP_MIN",
    "OUT_OF_BAND_MIN",
    "capture_following",
    "capture_namespace",
    "is_state_name",
    "kernel_capture",
    "kernel_restore",
    "last_timing",
    "load_manifest",
    "open_blob_store",
    "restore_namespace",
    "warm_up",
]

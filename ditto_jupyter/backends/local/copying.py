"""Copy a stored chunk into a checkout file inside the kernel where it can.

A chunk stored raw is a file `R` + payload: its payload is copied with `copy_file_range`
(no trip through user space; on filesystems that share extents it can even share blocks)
after its BLAKE3 name has been checked over a read-only mapping of the chunk file, so a
damaged chunk is never written into a workspace. The payload sits one byte into the chunk
file, so whole-block clones (FICLONERANGE) cannot apply. Compressed chunks, chunks kept
inline in an object index, and systems without `copy_file_range` (or filesystem pairs
that refuse it) go through `BlobStore.get_chunk` and `pwrite`.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os

import blake3

from ditto_jupyter.core.blobs import CODEC_RAW, BlobIntegrityError, BlobStore

#: Errors that mean "this kernel or filesystem pair cannot copy_file_range": use pwrite.
_UNSUPPORTED = {errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF}
_kernel_copy = hasattr(os, "copy_file_range")
_refusals_logged: set[int] = set()  # errnos of refusals already logged (one line each)
_log = logging.getLogger(__name__)


def write_all(fd: int, data: bytes | memoryview, position: int) -> None:
    """pwrite all of `data` at `position`."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def copy_chunk(blobs: BlobStore, digest: str, target: int, position: int) -> int:
    """Write the chunk `digest` into the open file `target` at `position`; its size."""
    if _kernel_copy:
        copied = _copy_raw_chunk(blobs, digest, target, position)
        if copied is not None:
            return copied
    data = blobs.get_chunk(digest)
    write_all(target, data, position)
    return len(data)


def _copy_raw_chunk(blobs: BlobStore, digest: str, target: int, position: int) -> int | None:
    """Kernel-copy a raw chunk file's payload after checking it; None to use the fallback."""
    global _kernel_copy
    try:
        source = os.open(blobs.chunk_file(digest), os.O_RDONLY)
    except FileNotFoundError:
        return None  # inline in the object index, or missing: get_chunk says which
    try:
        size = os.fstat(source).st_size - 1
        if size <= 0 or os.pread(source, 1, 0) != CODEC_RAW:
            return None
        with (
            blobs.checking(digest),
            mmap.mmap(source, 0, prot=mmap.PROT_READ) as mapped,
            memoryview(mapped) as view,
        ):
            if blake3.blake3(view[1:]).hexdigest() != digest:
                raise BlobIntegrityError(f"chunk {digest} does not match its content hash")
        done = 0
        while done < size:
            try:
                n = os.copy_file_range(source, target, size - done, 1 + done, position + done)
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED or done:
                    raise
                if exc.errno not in _refusals_logged:
                    _refusals_logged.add(exc.errno)
                    _log.info("copy_file_range refused (%s): copying through user space", exc)
                if exc.errno == errno.ENOSYS:  # this kernel has none: stop asking
                    _kernel_copy = False
                return None
            if n == 0:
                raise BlobIntegrityError(f"chunk {digest} ended early while being copied")
            done += n
        return size
    finally:
        os.close(source)

"""`%autocheckpoint`: a checkpoint after every cell that ran, named `cell-<execution count>`.

A post_run_cell hook captures the kernel's namespace after each cell and records it through
the magics' `RuntimeControl` (the `self/checkpoint` route under a server, the in-process
service without one), with the cell in the checkpoint's own `automatic` field
(`AutoCheckpointCell`: execution count, source, failed), never in the user's metadata. A
failed cell is checkpointed like any other, marked failed. After a
checkpoint, the runtime's automatic checkpoints beyond the newest `keep` are pruned
(`RuntimeService.prune_automatic`: rows stay, their state goes).

The usual cell takes the fast path:
- the capture is incremental: only the names the cell's code can have reached
  (`cell_effects`) are pickled again, the rest keep their stored form (`incremental`);
- a cell that changed nothing is skipped: its capture's signature is the last one's (the
  workspace is compared by a stat fingerprint of its entries; a `%%sandbox` command counts
  as a change, since a remote sandbox has no local files to look at);
- writing and recording happen on a write-behind thread (`write_behind`), started once the
  cell's reply is sent; every magic waits for it first.
A whole, synchronous capture is taken instead for the first cell, after a restore, after a
write-behind failed, for a cell that could reach anything (a magic, `globals()`, `exec`),
and for a cell that changed the workspace.

A cell whose checkpoint could not be recorded is remembered (the first one, until a
checkpoint holds the kernel's state again): every capture says so, and the next checkpoint
recorded carries it (`unrecorded_before`), so that undo refuses rather than go back two
cells (`control.undo`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ditto_jupyter.core.environment import WORKSPACE_ENV
from ditto_jupyter.core.errors import CaptureLost, DittoError, UnsupportedBackend
from ditto_jupyter.kernel.capture import kernel_hooks
from ditto_jupyter.kernel.write_behind import WriteBehind

# The magics make an AutoCheckpointer when they load, in every kernel: the capture and the
# models are imported by the hook's first checkpoint, not then.
if TYPE_CHECKING:
    from ditto_jupyter.core.models import AutoCheckpointCell, ContextCapture
    from ditto_jupyter.kernel.capture.capturing import NamespaceSnapshot
    from ditto_jupyter.kernel.capture.journal import ChangeJournal
    from ditto_jupyter.kernel.runtime_control import RuntimeControl, UndoPlan

#: How many automatic checkpoints stay whole when `--keep` is not given.
DEFAULT_KEEP = 50
#: The name of the automatic checkpoint of cell `n`.
NAME_PREFIX = "cell-"
#: The most UTF-8 bytes of a cell's source an automatic checkpoint records.
MAX_SOURCE_BYTES = 64 * 1024


class MagicsHost(Protocol):
    """What the hook needs from the magics: the namespace, the control, the last capture."""

    @property
    def namespace(self) -> dict[str, Any]: ...

    @property
    def control(self) -> RuntimeControl: ...

    last_manifest: str | None


def checkpoint_name(execution_count: int) -> str:
    """`cell-12` for cell 12."""
    return f"{NAME_PREFIX}{execution_count}"


def automatic_cell(execution_count: int, source: str, failed: bool) -> AutoCheckpointCell:
    """The cell record of cell `execution_count`'s checkpoint; the source is cut to at most
    `MAX_SOURCE_BYTES` of UTF-8."""
    from ditto_jupyter.core.models import AutoCheckpointCell

    source = source.encode("utf-8", "replace")[:MAX_SOURCE_BYTES].decode("utf-8", "ignore")
    return AutoCheckpointCell(execution_count=execution_count, source=source, failed=failed)


def workspace_fingerprint(root: Path) -> bytes:
    """A digest of every entry's path, type, size, times and inode under `root`.

    Equal digests mean no file was written, created, removed or renamed in between.
    """
    digest = hashlib.blake2b(digest_size=16)
    for folder, folders, files in os.walk(root):
        folders.sort()
        for name in sorted([*folders, *files]):
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:  # removed while we walked: the next fingerprint differs
                continue
            line = (
                f"{path}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0"
                f"{st.st_ctime_ns}\0{st.st_ino}\n"
            )
            digest.update(line.encode("utf-8", "surrogateescape"))
    return digest.digest()


def _detail(error: Exception) -> str:
    """An error as one line: a DittoError's code and message, else its type and text."""
    if isinstance(error, DittoError):
        return f"{error.code}: {error.message}"
    return f"{type(error).__name__}: {error}"


def _stored_count(result: Any) -> int | None:
    """The execution count of a cell run with history; None for one run without."""
    info = getattr(result, "info", None)
    count = getattr(result, "execution_count", None)
    stored = info is not None and getattr(info, "store_history", False)
    return count if stored and isinstance(count, int) else None


class AutoCheckpointer:
    """The post_run_cell hook of one kernel and its state (on/off, keep, counts)."""

    def __init__(self, host: MagicsHost, shell: Any) -> None:
        self.host = host
        self.shell = shell
        self.enabled = False
        self.keep = DEFAULT_KEEP
        self.taken = 0
        self.skipped = 0
        self.last_name: str | None = None
        self.sandbox_ran = False  # a %%sandbox command since the last checkpoint
        self._whole = 0  # the runtime's whole automatic checkpoints, as last counted
        self._held = 0
        self._workspace: Path | None = None
        self._workspace_known = False
        self._last_fingerprint: bytes | None = None
        self._unstored = 0  # cells run without history (nbval) since the last stored one
        self._write_failed = False  # a write-behind failed: the next capture is whole
        self.writer = WriteBehind("ditto-autocheckpoint")
        self._undetached: NamespaceSnapshot | None = None  # the last one, maybe not copied
        self._undone = False  # `%undo` ran in this cell: its state is a checkpoint already
        # The cell (`cells_run`) after which the namespace was last known to be the state of
        # the runtime's head (recorded, unchanged, undone, restored); None: unknown.
        self._followed: int | None = None
        # The first cell whose checkpoint was not recorded since then (its execution count):
        # the next one recorded says so (`unrecorded_before`), and undo refuses meanwhile.
        self._unrecorded: int | None = None
        self._chosen = False  # the user turned it on or off in this kernel
        kernel_hooks.register_event(shell, "post_run_cell", self._count_cell)

    # ---- on, off, state --------------------------------------------------------------

    def turn_on(self, keep: int, *, prune: bool = True) -> str:
        """Start checkpointing after every cell; prune to `keep` now (unless not `prune`:
        a resume takes the setting up while the server's operation holds the runtime).
        Returns the line."""
        self._chosen = True
        self.keep = keep
        if not self.enabled:
            self.shell.events.register("pre_run_cell", self._before_cell)
            self.shell.events.register("post_run_cell", self.after_cell)
            self.enabled = True
        if prune:
            self._prune()
        return f"autocheckpoint on: {self.describe()}"

    def turn_off(self) -> str:
        """Stop checkpointing after cells (existing checkpoints stay). Returns the line."""
        self._chosen = True
        self.flush()
        from ditto_jupyter.kernel.capture.kernel_entry import keep_base

        keep_base(self.host.namespace, None)  # cells run while off are not followed: afresh
        cells = self._cells()
        if cells is not None and self._followed == cells - 1:
            self._followed = cells  # this cell changes no variable: still at the head
        if self.enabled:
            self.shell.events.unregister("pre_run_cell", self._before_cell)
            self.shell.events.unregister("post_run_cell", self.after_cell)
            self.enabled = False
        return "autocheckpoint off"

    def describe(self) -> str:
        """What it does and has done: one line."""
        last = f", last {self.last_name}" if self.last_name else ""
        return (
            f"a checkpoint cell-<n> after every cell that changes variables or workspace, "
            f"the newest {self.keep} kept; {self.taken} taken, {self.skipped} skipped "
            f"(unchanged){last}"
        )

    def undo_refusal(self, plan: UndoPlan) -> str | None:
        """Why `%undo` (running in the current cell) must not undo the head: a cell ran
        after it that no checkpoint holds (`%autocheckpoint` off, a restart, a checkpoint
        not recorded: named), so going back would lose that cell's work. None: the head is
        the last cell that ran (or the cells since changed nothing)."""
        cells = self._cells()
        if cells is not None and self._followed is not None and self._followed == cells - 1:
            return None
        from ditto_jupyter.control.undo import TURN_ON_HINT, last_cell_unrecorded

        notebook = plan.notebook or "this notebook"
        if self._unrecorded is not None:
            head = plan.head_name or plan.head_id[:12]
            return last_cell_unrecorded(self._unrecorded, plan.cell, head, notebook)
        return (
            f"{TURN_ON_HINT}, or %checkpoint first: {notebook} ran cells since its last "
            "automatic checkpoint that no checkpoint holds, and undo would lose them; "
            "nothing was undone"
        )

    def _cells(self) -> int | None:
        from ditto_jupyter.kernel.cell_runs import cells_run

        return cells_run(self.shell)

    def _follow(self) -> None:
        """After the cell running now, the namespace is the state of the runtime's head."""
        self._followed = self._cells()
        self._unrecorded = None

    def _not_recorded(self, count: int) -> None:
        """Cell `count`'s checkpoint could not be recorded: the namespace is no longer known
        to be the head's state, and the first such cell is remembered."""
        self._followed = None
        if self._unrecorded is None:
            self._unrecorded = count

    def unrecorded_cell(self) -> int | None:
        """The first cell whose automatic checkpoint was not recorded, when no checkpoint
        holds this kernel's state since (every capture says so: an undo would lose it)."""
        return self._unrecorded

    def state(self) -> str:
        """`%autocheckpoint` with no argument: on or off, and the counts."""
        return f"autocheckpoint {'on' if self.enabled else 'off'}: {self.describe()}"

    # ---- the hook --------------------------------------------------------------------

    def _count_cell(self, result: Any) -> None:
        """post_run_cell, from load on: count the cells run without history."""
        self._unstored = 0 if _stored_count(result) is not None else self._unstored + 1

    def cell_number(self, result: Any) -> int:
        """The cell's execution count; for a cell run without history (nbval runs every
        cell so), the count it would have had: the next count plus the unstored cells
        before it (silent requests trigger no post_run_cell, so they never count)."""
        stored = _stored_count(result)
        if stored is not None:
            return stored
        return int(getattr(self.shell, "execution_count", 1)) - 1 + self._unstored

    def after_cell(self, result: Any) -> None:
        """post_run_cell: checkpoint the cell that just ran, unless it changed nothing.

        An error prints one line to stderr; the cell's own outcome is left alone.
        """
        info = getattr(result, "info", None)
        if info is None or not self.enabled:  # turned off during the cell (%pause)
            return
        if self._undone:  # back at the head's checkpoint: nothing new to record
            self._undone = False
            self._last_fingerprint = self._fingerprint(self.host.control)
            self._follow()
            return
        from ditto_jupyter.kernel.capture.kernel_entry import collection_paused

        count = self.cell_number(result)
        source = info.raw_cell if isinstance(info.raw_cell, str) else ""
        try:
            with collection_paused():
                self._checkpoint_cell(count, source, result, failed=not result.success)
        except DittoError as error:
            self._failed(count)
            print(f"ditto: autocheckpoint: {error.code}: {error.message}", file=sys.stderr)
        except Exception as error:  # the hook never turns a cell into a traceback
            self._failed(count)
            print(
                f"ditto: autocheckpoint of cell {count} failed: {type(error).__name__}: {error}",
                file=sys.stderr,
            )

    def _failed(self, count: int) -> None:
        """The hook of cell `count` raised: unless the cell was recorded (or found unchanged)
        first, no checkpoint holds it."""
        if self._followed is None or self._followed != self._cells():
            self._not_recorded(count)

    def _checkpoint_cell(self, count: int, source: str, result: Any, *, failed: bool) -> None:
        from ditto_jupyter.kernel.capture import open_blob_store
        from ditto_jupyter.kernel.capture.capturing import capture_with_snapshot, snapshot_namespace
        from ditto_jupyter.kernel.capture.kernel_entry import changes_since, keep_base, take_base
        from ditto_jupyter.kernel.capture_again import record_own_capture

        control = self.host.control
        fingerprint = self._fingerprint(control)
        workspace_changed = self.sandbox_ran or fingerprint != self._last_fingerprint
        namespace = self.host.namespace
        base = take_base(namespace)  # the one base of every capture path, used once
        blobs = open_blob_store(control.blob_root)
        journal = self._journal(namespace)
        if base is not None and not base.usable():  # restored since: values changed in place
            journal.effects.expect_unseen_code()  # and notebook code no cell showed may be back
            base = None
        if self._write_failed:
            base = None
        # every cell is journaled, even one captured whole: what it defines is known later
        journal.take_cell(result)
        touched, reached, foreign, fresh = changes_since(journal, base)
        mark = journal.serial
        name = checkpoint_name(count)
        cell = automatic_cell(count, source, failed)
        if base is not None and touched is not None and not workspace_changed:
            snapshot = snapshot_namespace(
                namespace,
                blobs,
                runtime_id=control.runtime_id,
                base=base,
                touched=touched,
                figures_reached=reached,
                fresh=fresh,
                mark=mark,
                defer=True,
            )
            if snapshot.base is not None and snapshot.base.signature == base.signature:
                # Unchanged: nothing of it will be written, so it cannot be the next base
                # (a value pickled again while its chunks were still being written names
                # them only once this snapshot's own write would have).
                snapshot.discard()
                keep_base(namespace, base)
                self.skipped += 1
                self._follow()
                return
            keep_base(namespace, snapshot.base)
            if snapshot.base is not None:
                snapshot.base.foreign = foreign
            self._taken(name, fingerprint)
            self._undetached = snapshot
            cells = self._cells()
            self.writer.submit_when_idle(
                lambda: self._record_in_background(snapshot, name, cell, cells)
            )
            return
        self.flush()  # in order: the checkpoints before this one are recorded first
        self._write_failed = False
        previous = self.host.last_manifest

        def take(whole: bool) -> tuple[NamespaceSnapshot, ContextCapture]:
            snapshot, capture = capture_with_snapshot(
                namespace,
                blobs,
                previous_manifest_id=None if whole else previous,
                runtime_id=control.runtime_id,
                base=None if whole else base,
                touched=None if whole else touched,
                figures_reached=None if whole else reached,
                fresh=None if whole else fresh,
                mark=mark,
            )
            if snapshot.base is not None:
                snapshot.base.foreign = foreign
            return snapshot, capture

        def record(taken: tuple[NamespaceSnapshot, ContextCapture]) -> bool:
            capture = taken[1]
            if capture.manifest_id == previous and not workspace_changed:
                return False  # unchanged: nothing to record
            control.checkpoint(capture, name, None, self._after_unrecorded(cell))
            self._follow()
            return True

        (snapshot, capture), recorded = record_own_capture(take, record)
        if not recorded:
            keep_base(namespace, snapshot.base)
            self.skipped += 1
            self._follow()
            return
        keep_base(namespace, snapshot.base)  # only once recorded: an unrecorded one is no base
        self.host.last_manifest = capture.manifest_id
        self._taken(name, fingerprint)
        self._recorded(name)

    def _taken(self, name: str, fingerprint: bytes | None) -> None:
        self._last_fingerprint = fingerprint
        self.sandbox_ran = False
        self.taken += 1
        self.last_name = name

    def _recorded(self, name: str) -> None:
        """One more whole automatic checkpoint: prune when there are more than kept. A prune
        that fails says so in one line; the checkpoint stays recorded, the next one prunes."""
        self._whole += 1
        if self._whole > self.keep + self._held:
            try:
                self._prune()
            except Exception as error:
                print(
                    f"ditto: autocheckpoint {name} was recorded, but pruning the automatic "
                    f"checkpoints beyond the newest {self.keep} failed: {_detail(error)}",
                    file=sys.stderr,
                )

    def _record_in_background(
        self,
        snapshot: NamespaceSnapshot,
        name: str,
        cell: AutoCheckpointCell,
        cells: int | None,
    ) -> None:
        """The write-behind half: copy what the snapshot still reads from live memory (then
        the next cell may start), store the snapshot and record it. An error prints one
        line, and the next cell captures everything again, synchronously."""
        recorded = False
        try:
            capture = snapshot.finish()  # copies first, unless the next cell did
            self.host.control.checkpoint(capture, name, None, self._after_unrecorded(cell))
            recorded = True
            self._followed, self._unrecorded = cells, None
            self.host.last_manifest = capture.manifest_id
        except Exception as error:
            from ditto_jupyter.core.blobs import BlobNotFound
            from ditto_jupyter.kernel.capture.chunks import forget_chunks
            from ditto_jupyter.kernel.capture.kernel_entry import keep_base

            if not recorded:
                self._not_recorded(cell.execution_count)
            self._write_failed = True
            keep_base(self.host.namespace, None)  # no path follows an unwritten state
            if isinstance(error, (BlobNotFound, CaptureLost)):
                forget_chunks()  # and the next cell captures everything again
            print(
                f"ditto: autocheckpoint {name} was not recorded: {_detail(error)}",
                file=sys.stderr,
            )
            return
        self._recorded(name)

    def _after_unrecorded(self, cell: AutoCheckpointCell) -> AutoCheckpointCell:
        """`cell`, saying which cell before it had its checkpoint not recorded, if one did:
        the checkpoint recorded now is then no undo of this cell alone."""
        if self._unrecorded is None:
            return cell
        return cell.model_copy(update={"unrecorded_before": self._unrecorded})

    def setting(self) -> int | None:
        """How many automatic checkpoints are kept while on; None while off (every capture
        records it: `this_kernel.autocheckpoint_keep`)."""
        return self.keep if self.enabled else None

    def restored_elsewhere(self, keep: int | None = None) -> None:
        """A host restored this kernel from outside (a restore or undo over REST, a resume,
        a checkout): the next capture is whole, and the workspace as it is now is the last
        one checkpointed. `keep`: the capture was taken with `%autocheckpoint` on; a kernel
        where nobody turned it on or off yet (a resumed or checked-out one) turns it on."""
        from ditto_jupyter.kernel.capture.kernel_entry import keep_base

        if keep is not None and not self._chosen:
            self.turn_on(keep, prune=False)
        keep_base(self.host.namespace, None)
        self._followed = self._cells()  # at the restored checkpoint, the head now
        self._unrecorded = None
        if self.enabled:
            self._last_fingerprint = self._fingerprint(self.host.control)

    def undone(self) -> None:
        """`%undo` made the checkpoint before the last cell the head again (variables and
        files): the cell running it records nothing, and the next cell is captured whole."""
        from ditto_jupyter.kernel.capture.kernel_entry import keep_base

        self._undone = self.enabled  # only the hook of this very cell reads it
        self._unrecorded = None
        keep_base(self.host.namespace, None)
        if not self.enabled:  # no hook follows this cell: it is at the head after it
            self._follow()

    def flush(self) -> None:
        """Wait until every automatic checkpoint taken so far is recorded."""
        self.writer.flush()

    def _before_cell(self, info: Any) -> None:
        """pre_run_cell: a cell may change what the last snapshot still reads from live
        memory; copy it now, unless the write-behind has (usually long done). Not left to
        the write-behind: it may still be writing an earlier cell's checkpoint. A buffer
        found changed is the write-behind's to report."""
        snapshot, self._undetached = self._undetached, None
        if snapshot is not None:
            from ditto_jupyter.kernel.capture.chunks import LiveBufferChanged

            with contextlib.suppress(LiveBufferChanged):
                snapshot.detach()
        self.writer.start_waiting()

    def _journal(self, namespace: dict[str, Any]) -> ChangeJournal:
        """The change journal of this kernel's shell (attached on first use)."""
        from ditto_jupyter.kernel.capture.journal import journal_of

        journal = journal_of(namespace)
        if journal is None:
            raise RuntimeError("autocheckpoint runs only in the shell whose namespace it saves")
        return journal

    def _prune(self) -> None:
        result = self.host.control.prune_automatic(self.keep)
        self._whole = result.whole
        self._held = len(result.held)

    def _fingerprint(self, control: RuntimeControl) -> bytes | None:
        """The workspace's fingerprint; None when it has no local files (a remote sandbox)."""
        if not self._workspace_known:
            path = os.environ.get(WORKSPACE_ENV)
            if path:
                self._workspace = Path(path)
            else:
                try:
                    self._workspace = control.workspace_path()
                except UnsupportedBackend:
                    self._workspace = None
            self._workspace_known = True
        if self._workspace is None or not self._workspace.is_dir():
            return None
        return workspace_fingerprint(self._workspace)

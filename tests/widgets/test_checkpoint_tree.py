"""CheckpointTree driven in Python: the state it syncs to its view, its one-line summary,
the messages its view sends when a node is clicked (restore, checkout, and bad ones), and
its polling. Real parts: IPython's shell, the magics, an in-process RuntimeService on a
real SQLite store, and a real kernel for the checked-out runtime."""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from ditto_jupyter.core.errors import RuntimeNotFound
from ditto_jupyter.core.models import AutoCheckpointCell
from ditto_jupyter.kernel.capture import capture_namespace, open_blob_store
from ditto_jupyter.kernel.local_control import LocalControl
from ditto_jupyter.kernel.magics import DittoMagics
from ditto_jupyter.widgets import CheckpointTree
from tests.fakes.forwarding_control import ForwardingControl


def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for the poller to catch up (a functional wait: generous, not a speed check)."""
    for _ in range(600):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


class Kernel:
    """An IPython shell with the ditto magics over a LocalControl on `data_dir`."""

    def __init__(
        self, data_dir: Path, wrap: Callable[[Any], Any] = lambda control: control
    ) -> None:
        self.shell = InteractiveShell.instance()
        self.namespace: dict[str, Any] = self.shell.user_ns
        self.control = LocalControl(self.namespace, data_dir=data_dir, conversation_id="tree.ipynb")
        # Loaded as `%load_ext` would: registered with the shell, its control installed as
        # this kernel's (`this_kernel`), which is where the tree finds it.
        seen = wrap(self.control)
        self.magics = DittoMagics(self.shell, control_factory=lambda: seen)
        self.shell.register_magics(self.magics)

    def magic(self, name: str, line: str = "") -> None:
        getattr(self.magics, name)(line)

    def auto_checkpoint(self, count: int, source: str, *, failed: bool = False) -> str:
        """A checkpoint as %autocheckpoint writes it (its cell in the `automatic` field)."""
        capture = capture_namespace(
            self.namespace, open_blob_store(self.control.blob_root), **self.bound_to_runtime()
        )
        cell = AutoCheckpointCell(execution_count=count, source=source, failed=failed)
        result = self.control.checkpoint(capture, f"cell-{count}", None, cell)
        return result.checkpoint_id

    def bound_to_runtime(self) -> dict[str, str]:
        """`runtime_id=` where captures are signed for their runtime (the scale work)."""
        if "runtime_id" in inspect.signature(capture_namespace).parameters:
            return {"runtime_id": self.control.runtime_id}
        return {}

    def ids(self) -> list[str]:
        return [c.checkpoint_id for c in self.control.checkpoints(self.control.runtime_id)]


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    k = Kernel(tmp_path / "data")
    yield k
    k.control.shutdown()


@pytest.fixture
def trees() -> Iterator[list[CheckpointTree]]:
    made: list[CheckpointTree] = []
    yield made
    for tree in made:
        tree.close()


def click(tree: CheckpointTree, content: Any) -> None:
    """Deliver a message exactly as the view's `this.send(...)` arrives over the comm."""
    tree._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})


def test_state_and_summary(kernel: Kernel, trees: list[CheckpointTree]) -> None:
    kernel.namespace["x"] = 1
    kernel.magic("checkpoint", "start")
    kernel.namespace["x"] = 2
    auto_ok = kernel.auto_checkpoint(3, "x = 2\nprint(x)")
    auto_failed = kernel.auto_checkpoint(4, "1 / 0", failed=True)
    tree = CheckpointTree(poll_interval=None)
    trees.append(tree)
    assert tree.runtime_id == kernel.control.runtime_id and tree.restorable
    assert [n["name"] for n in tree.nodes] == ["start", "cell-3", "cell-4"]
    by_id = {n["id"]: n for n in tree.nodes}
    assert by_id[auto_ok]["auto"] == {
        "execution_count": 3,
        "failed": False,
        "source": "x = 2\nprint(x)",
    }
    assert by_id[auto_failed]["auto"]["failed"] is True
    assert by_id[auto_failed]["parent"] == auto_ok
    assert tree.nodes[0]["auto"] is None and tree.nodes[0]["parent"] is None
    assert tree.head_id == auto_failed and tree.branches == []
    assert repr(tree) == (
        f"CheckpointTree {kernel.control.runtime_id[:12]}: 3 checkpoints (2 automatic), "
        f"0 branches, head {auto_failed[:12]} 'cell-4'"
    )
    state = tree.get_state()
    assert state["_view_module"] == "ditto-jupyter" and state["_view_name"] == "CheckpointTreeView"
    assert state["nodes"] == tree.nodes


def test_click_restore_rolls_the_kernel_back(kernel: Kernel, trees: list[CheckpointTree]) -> None:
    kernel.namespace["data"] = [1, 2]
    kernel.magic("checkpoint", "before")
    kernel.namespace["data"].append(3)
    kernel.namespace["later"] = "gone after restore"
    kernel.magic("checkpoint", "after")
    before, after = kernel.ids()
    tree = CheckpointTree(poll_interval=None)
    trees.append(tree)
    assert tree.head_id == after
    click(tree, {"action": "restore", "checkpoint_id": before})
    assert kernel.namespace["data"] == [1, 2] and "later" not in kernel.namespace
    assert re.match(rf"restored {before[:12]} 'before' in \d+ ms$", tree.message)
    assert not tree.message_is_error and not tree.busy
    assert tree.head_id == before  # redrawn after the action


def test_click_checkout_branches_a_new_runtime(
    kernel: Kernel, trees: list[CheckpointTree], tmp_path: Path
) -> None:
    kernel.namespace["model"] = {"weights": [0.5]}
    kernel.magic("checkpoint", "trained")
    (trained,) = kernel.ids()
    tree = CheckpointTree(poll_interval=None)
    trees.append(tree)
    click(tree, {"action": "checkout", "checkpoint_id": trained})
    assert not tree.message_is_error, tree.message
    match = re.match(rf"checked out {trained[:12]} into runtime (\S+)$", tree.message)
    assert match, tree.message
    child = match.group(1)
    assert [(b["runtime_id"], b["checkpoint_id"]) for b in tree.branches] == [(child, trained)]
    assert repr(tree).endswith(f"1 branch, head {trained[:12]} 'trained'")
    # The child's own checkpoints join the tree under the checkpoint it came from.
    service = kernel.control.service
    kernel.control._run(service.checkpoint(child, "child-work", None))
    assert tree.refresh()
    child_nodes = [n for n in tree.nodes if n["runtime_id"] == child]
    assert [(n["name"], n["parent"]) for n in child_nodes] == [("child-work", trained)]
    # A branch's checkpoint cannot be restored into this kernel in place: it says so.
    click(tree, {"action": "restore", "checkpoint_id": child_nodes[0]["id"]})
    assert tree.message_is_error and "check this one out" in tree.message
    assert tree.head_id == trained


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ({"action": "delete", "checkpoint_id": "x"}, "unknown request from the view"),
        ({"action": "restore"}, "unknown request from the view"),
        ("restore", "unknown request from the view"),
        ({"action": "restore", "checkpoint_id": "f" * 32}, "is not in this tree"),
        ({"action": "checkout", "checkpoint_id": "f" * 32}, "is not in this tree"),
    ],
)
def test_bad_messages_say_why_and_change_nothing(
    kernel: Kernel, trees: list[CheckpointTree], content: Any, says: str
) -> None:
    kernel.namespace["x"] = 1
    kernel.magic("checkpoint")
    tree = CheckpointTree(poll_interval=None)
    trees.append(tree)
    nodes, head = list(tree.nodes), tree.head_id
    kernel.namespace["x"] = 2
    click(tree, content)
    assert tree.message_is_error and says in tree.message
    assert "\n" not in tree.message
    assert kernel.namespace["x"] == 2
    assert tree.refresh() and tree.nodes == nodes and tree.head_id == head


def test_restore_error_from_the_control_plane_is_one_line(
    kernel: Kernel, trees: list[CheckpointTree], tmp_path: Path
) -> None:
    kernel.magic("checkpoint", "a")
    (first,) = kernel.ids()
    tree = CheckpointTree(poll_interval=None)
    trees.append(tree)
    # The control plane refuses: the runtime is closed behind the tree's back.
    kernel.control._run(kernel.control.service.close(kernel.control.runtime_id))
    click(tree, {"action": "restore", "checkpoint_id": first})
    assert tree.message_is_error and tree.message.startswith("ditto: ")
    assert "\n" not in tree.message and not tree.busy


def test_polling_shows_new_checkpoints(kernel: Kernel, trees: list[CheckpointTree]) -> None:
    tree = CheckpointTree(poll_interval=0.05)
    trees.append(tree)
    assert tree.nodes == [] and tree.head_id is None and tree.polling
    assert repr(tree).endswith(": 0 checkpoints, 0 branches, no head yet")
    kernel.magic("checkpoint", "one")
    kernel.auto_checkpoint(2, "y = 1")
    eventually(lambda: len(tree.nodes) == 2, "the poller saw both checkpoints")
    eventually(lambda: tree.head_id == kernel.ids()[-1], "the poller moved the head")
    tree.close()
    assert not tree.polling


def test_unknown_runtime_and_bad_arguments_are_refused(kernel: Kernel, tmp_path: Path) -> None:
    with pytest.raises(RuntimeNotFound, match=r"no runtime with id .f{32}."):
        CheckpointTree("f" * 32, poll_interval=None)
    with pytest.raises(ValueError, match="runtime must be a runtime id"):
        CheckpointTree("  ", poll_interval=None)
    with pytest.raises(ValueError, match="poll_interval"):
        CheckpointTree(poll_interval=0)
    # Another runtime's tree: drawn, but restore in place is not offered.
    other = kernel.control._run(
        kernel.control.service.create_runtime("other.ipynb", "ana", handle_state={})
    )
    tree = CheckpointTree(other.runtime_id, poll_interval=None)
    try:
        assert not tree.restorable and tree.runtime_id == other.runtime_id
        assert repr(tree).startswith(f"CheckpointTree {other.runtime_id[:12]}: 0 ")
    finally:
        tree.close()


def test_summary_fits_one_text_plain_line(kernel: Kernel, trees: list[CheckpointTree]) -> None:
    kernel.magic("checkpoint", "a-checkpoint-with-a-rather-long-descriptive-name")
    tree = CheckpointTree(poll_interval=None)
    trees.append(tree)
    summary = tree._repr_mimebundle_()["text/plain"]
    assert summary == repr(tree) and len(summary) <= 110 and "\n" not in summary
    assert summary.endswith(
        "1 checkpoint, 0 branches, head " + kernel.ids()[0][:12] + " 'a-checkpoint-with-a…'"
    )


def test_the_tree_reads_any_control_through_its_protocol(tmp_path: Path) -> None:
    """Neither LocalControl nor ServerControl: the tree asks the protocol, nothing else."""
    forwarding: list[ForwardingControl] = []

    def wrap(control: Any) -> ForwardingControl:
        forwarding.append(ForwardingControl(control))
        return forwarding[-1]

    kernel = Kernel(tmp_path / "data", wrap)
    try:
        kernel.namespace["x"] = 1
        kernel.magic("checkpoint", "start")
        (start,) = kernel.ids()
        tree = CheckpointTree(poll_interval=None)
        try:
            click(tree, {"action": "checkout", "checkpoint_id": start})
            assert not tree.message_is_error, tree.message
            assert [b["checkpoint_id"] for b in tree.branches] == [start]
            assert tree.head_id == start
            assert {"checkpoints", "lineage", "checkout"} <= set(forwarding[0].asked)
        finally:
            tree.close()
    finally:
        kernel.control.shutdown()

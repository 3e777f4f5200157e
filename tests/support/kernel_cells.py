"""Run cells in a real kernel through its client and collect what a notebook would show."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jupyter_client.blocking.client import BlockingKernelClient


@dataclass
class CellOutput:
    """stdout, stderr, rich results and the error traceback of one cell."""

    stdout: str = ""
    stderr: str = ""
    results: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def run_cell(client: BlockingKernelClient, code: str) -> CellOutput:
    """Execute `code` and gather its outputs."""
    out = CellOutput()

    def hook(msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            if content["name"] == "stdout":
                out.stdout += content["text"]
            else:
                out.stderr += content["text"]
        elif kind in ("execute_result", "display_data"):
            out.results.append(content["data"])
        elif kind == "error":
            out.error = "\n".join(content["traceback"])

    client.execute_interactive(code, output_hook=hook, timeout=180)
    return out


def value(client: BlockingKernelClient, expression: str) -> Any:
    """A JSON value computed in the kernel."""
    out = run_cell(client, f"import json as _j; print(_j.dumps({expression}))")
    assert out.error is None, out.error
    return json.loads(out.stdout.strip().splitlines()[-1])


def wait_for_autocheckpoints(client: BlockingKernelClient) -> None:
    """Wait until the kernel's `%autocheckpoint` write-behind has recorded every automatic
    checkpoint taken so far (silently: the request is no cell, and takes no checkpoint)."""
    flush = "get_ipython().magics_manager.registry['DittoMagics'].autocheckpointer.flush()"
    reply = client.execute(flush, silent=True, reply=True, timeout=180)
    assert reply["content"]["status"] == "ok", reply["content"]


def run_in_kernel(runtime_dir: str, kernel_id: str, code: str) -> str:
    """Run a cell in a kernel of a Jupyter server whose runtime directory (connection
    files) is `runtime_dir`; its stdout (RuntimeError naming the error if it failed)."""
    import textwrap

    from jupyter_client import find_connection_file

    client = BlockingKernelClient()
    client.load_connection_file(find_connection_file(kernel_id, path=[runtime_dir]))
    client.start_channels(hb=False)  # a slow first heartbeat reads as a dead kernel
    try:
        client.wait_for_ready(timeout=60)
        out = run_cell(client, textwrap.dedent(code))
    finally:
        client.stop_channels()
    if out.error is not None:
        raise RuntimeError(f"cell failed: {out.error}")
    return out.stdout


def clean(out: CellOutput) -> CellOutput:
    """`out`, asserted to have run with no error and nothing on stderr."""
    assert out.error is None, out.error
    assert out.stderr == "", out.stderr
    return out

"""LangGraph's checkpoints in ditto-jupyter's store: `DittoSaver`.

```python
from ditto_jupyter.langgraph import DittoSaver

graph = builder.compile(checkpointer=DittoSaver())
graph.invoke(inputs, {"configurable": {"thread_id": "plan-a"}})
```

A thread belongs to the runtime of the kernel the graph runs in: its checkpoints land in
the runtime's database (SQLite, or PostgreSQL in a deployment) and large values in its
blob store; pause and resume keep them, a checkout's child gets a copy of them as they
stood at the checkpoint, and only the runtime's owner sees them. See docs/langgraph.md.

Needs LangGraph's checkpoint package: `pip install 'ditto-jupyter[langgraph]'`.

Modules: `saver` (`DittoSaver`), `values` (how a value is kept: inline or in the blob
store), `transports` (in process, or the server's `self/langgraph/...` routes), `connect`
(which of the two this kernel has).
"""

from __future__ import annotations

try:
    from ditto_jupyter.langgraph.saver import DittoSaver
except ModuleNotFoundError as error:  # LangGraph's checkpoint package is an extra
    if not (error.name or "").startswith(("langgraph", "langchain_core")):
        raise
    raise ModuleNotFoundError(
        f"ditto_jupyter.langgraph needs LangGraph's checkpoint package ({error}): "
        "pip install 'ditto-jupyter[langgraph]'"
    ) from error

__all__ = ["DittoSaver"]

"""Benchmark: portable state and BranchStore, each beside its anchor in the same run.

1. `checkpoint_state` + `restore_state` of ~1 MB JSON documents, beside the pure-Python
   `rfc8785.dumps` + `hashlib.sha256` path and `json.dumps(sort_keys=True)` + sha256 (each
   anchor done twice, once for the checkpoint and once for the restore, like ours; the
   anchors neither validate nor copy). Target: at least 5x faster than the rfc8785 path.
   Two documents: an agent/chat state (text, ints, bools, nulls, some fractional floats)
   and a numeric one where most numbers are integral floats (`1.0`), which orjson and
   RFC 8785 print differently, so the slower rewrite path runs.
2. `fork()` on stores of 10, 10,000 and 100,000 namespaces (target: flat, under 10 us).
3. `commit()` of 1 and of 100 written namespaces on stores of 10 and 100,000 namespaces
   (target: cost grows with the write set, not with the store), with the `set()` calls'
   own cost beside it.

Run from the repo root (takes well under a minute):

    .venv/bin/python -m benchmarks.bench_state
"""

from __future__ import annotations

import gc
import hashlib
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import orjson  # noqa: E402
import rfc8785  # noqa: E402

from benchmarks.results_table import markdown_table, write_section  # noqa: E402
from ditto_jupyter.worker.branch_store import BranchStore  # noqa: E402
from ditto_jupyter.worker.state import checkpoint_state, restore_state  # noqa: E402

WORDS = [
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "model",
    "tool",
    "call",
    "result",
    "user",
    "assistant",
    "state",
    "branch",
    "checkpoint",
    "restore",
    "kernel",
    "notebook",
    "value",
    "error",
    "retry",
    "token",
    "budget",
    "context",
    "memory",
    "plan",
    "step",
    "naïve",
    "café",
    "😀",
    "✓",
    "東京",
]


def chat_document(target: int = 1_000_000) -> dict[str, Any]:
    """An agent's state: a transcript with tool calls, usage counters and a few scores."""
    rng = random.Random(7)
    messages: list[dict[str, Any]] = []
    doc: dict[str, Any] = {"session": "bench", "step": 0, "messages": messages, "memory": {}}
    size = 0
    while size < target:
        index = len(messages)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
        message: dict[str, Any] = {
            "id": f"msg-{index:06d}",
            "role": rng.choice(["user", "assistant", "tool"]),
            "content": text,
            "tokens": {"input": rng.randint(10, 4000), "output": rng.randint(1, 800)},
            "cached": rng.random() < 0.3,
            "parent": None if index == 0 else f"msg-{index - 1:06d}",
        }
        if rng.random() < 0.3:
            message["tool_call"] = {
                "name": rng.choice(["search", "read_file", "run_cell"]),
                "arguments": {"query": text[:40], "limit": rng.randint(1, 50)},
                "score": round(rng.random(), 4),
            }
        messages.append(message)
        size += len(orjson.dumps(message))
    doc["step"] = len(messages)
    return doc


def numeric_document(target: int = 1_000_000) -> dict[str, Any]:
    """Metric records whose numbers are mostly integral floats (the float rewrite path)."""
    rng = random.Random(11)
    rows: list[dict[str, Any]] = []
    size = 0
    while size < target:
        row = {
            "epoch": float(len(rows)),
            "loss": rng.random(),
            "accuracy": float(rng.randint(0, 100)),
            "lr": 0.001,
            "batch": float(rng.choice([32, 64, 128])),
            "tags": ["train", "gpu"],
        }
        rows.append(row)
        size += len(orjson.dumps(row))
    return {"run": "bench", "rows": rows}


REPEATS = 15


def best_ms(functions: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Interleave the candidates `repeats` times; the best CPU time of each, in milliseconds.

    CPU time of this process (not wall time): the machine is shared, and time spent waiting
    for a core says nothing about either side.
    """
    best = {name: float("inf") for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            gc.collect()
            start = time.process_time()
            function()
            best[name] = min(best[name], (time.process_time() - start) * 1000)
    return best


def state_rows() -> list[list[object]]:
    rows: list[list[object]] = []
    for label, document in (
        ("agent chat", chat_document()),
        ("numeric, integral floats", numeric_document()),
    ):
        size = len(orjson.dumps(document))
        wire = json.loads(json.dumps(checkpoint_state("bench", "v1", document)))
        assert restore_state(wire, "bench", "v1") == document

        def ours(doc: object = document, saved: object = wire) -> None:
            checkpoint_state("bench", "v1", doc)
            restore_state(saved, "bench", "v1")

        def jcs_twice(doc: object = document) -> None:
            for _ in range(2):
                hashlib.sha256(rfc8785.dumps(doc)).hexdigest()  # type: ignore[arg-type]

        def json_twice(doc: object = document) -> None:
            for _ in range(2):
                hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

        times = best_ms(
            {
                "ours": ours,
                "checkpoint": lambda doc=document: checkpoint_state("bench", "v1", doc),
                "restore": lambda saved=wire: restore_state(saved, "bench", "v1"),
                "jcs": jcs_twice,
                "json": json_twice,
            },
            repeats=REPEATS,
        )
        ratio = times["jcs"] / times["ours"]
        rows.append(
            [
                label,
                f"{size / 1e6:.2f} MB",
                f"{times['checkpoint']:.1f} + {times['restore']:.1f} = {times['ours']:.1f}",
                f"{times['jcs']:.1f}",
                f"{times['json']:.1f}",
                f"**{ratio:.1f}x**",
                f"{times['json'] / times['ours']:.1f}x",
                "yes" if ratio >= 5 else "**no**",
            ]
        )
    return rows


def build_store(size: int) -> BranchStore:
    store = BranchStore(f"bench-{size}")
    branch = store.fork()
    for index in range(size):
        branch.set(f"ns-{index:06d}", {"i": index, "note": "value"})
    branch.commit()
    return store


def fork_us(store: BranchStore, count: int = 20_000) -> float:
    """Median per-fork time over batches of 1,000 forks (each fork discarded unused)."""
    samples = []
    for _ in range(count // 1000):
        start = time.perf_counter_ns()
        for _ in range(1000):
            store.fork()
        samples.append((time.perf_counter_ns() - start) / 1000 / 1000)
    return statistics.median(samples)


def commit_us(store: BranchStore, written: int, repeats: int = 200) -> tuple[float, float]:
    """Median time of `commit()` alone, and of one `set()`, for a branch writing `written`."""
    commits, sets = [], []
    value = {"v": 1}
    for round_number in range(repeats):
        branch = store.fork()
        start = time.perf_counter_ns()
        for index in range(written):
            # half overwrite existing namespaces, half create new ones
            name = f"ns-{index:06d}" if index % 2 == 0 else f"new-{round_number}-{index}"
            branch.set(name, value)
        sets.append((time.perf_counter_ns() - start) / 1000 / written)
        start = time.perf_counter_ns()
        branch.commit()
        commits.append((time.perf_counter_ns() - start) / 1000)
    return statistics.median(commits), statistics.median(sets)


def main() -> None:
    state = state_rows()
    stores = {size: build_store(size) for size in (10, 10_000, 100_000)}
    forks = [[f"{size:,}", f"{fork_us(store):.2f}"] for size, store in stores.items()]
    flat = max(float(row[1]) for row in forks)
    commits = []
    for size in (10, 100_000):
        for written in (1, 100):
            commit, one_set = commit_us(stores[size], written)
            commits.append([f"{size:,}", written, f"{commit:.1f}", f"{one_set:.1f}"])
    body = "\n\n".join(
        [
            f"### `checkpoint_state` + `restore_state`, ~1 MB documents "
            f"(ms of CPU time, best of {REPEATS}, interleaved)",
            markdown_table(
                [
                    "document",
                    "size",
                    "ours: checkpoint + restore",
                    "anchor: (`rfc8785.dumps` + sha256) x2",
                    "anchor: (`json.dumps(sort_keys=True)` + sha256) x2",
                    "ratio vs rfc8785",
                    "ratio vs json.dumps",
                    "target >= 5x met",
                ],
                state,
            ),
            "Ours validates the whole value, copies it (the saved form and the restored value "
            "share nothing with their sources; the copy's containers also cost the cyclic GC, "
            "left enabled) and hashes RFC 8785 bytes identical to `rfc8785.dumps` "
            "(property-tested); the anchors only serialise and hash. The machine is shared: "
            "figures are CPU time of this process, and the chat ratio moved between about 4x "
            "and 6.5x across runs while other jobs ran.",
            f"### `fork()` (us per fork, median of 20 batches of 1,000; flat target < 10 us, "
            f"worst here {flat:.2f} us)",
            markdown_table(["namespaces in store", "us / fork"], forks),
            "### `commit()` alone, and the `set()` calls before it (us, median of 200; half the "
            "writes replace a namespace, half add one)",
            markdown_table(
                ["namespaces in store", "namespaces written", "us / commit", "us / set()"],
                commits,
            ),
            "A branch keeps its own persistent map (base + writes), so `commit()` checks the "
            "revision and installs that map in the parent; what grows with the write set is "
            "freeing the parent's superseded HAMT nodes and values. The writes themselves are "
            "paid by `set()` (validation, JSON encoding, one HAMT insert, O(log32 n)).",
        ]
    )
    print(body)
    write_section("bench_state", "Portable state and BranchStore", body)


if __name__ == "__main__":
    main()

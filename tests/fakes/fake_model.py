"""A FAKE model provider for budget tests: each call sleeps a random latency, then answers
with a random usage no larger than `max_tokens`, as a provider's response reports it.

It is a plain callable (`budgeted_provider` wraps it like any provider) and thread-safe;
`seed` makes its latencies and usages repeat from run to run.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any


class FakeModel:
    """`model(request)` -> `{"text": ..., "usage": {"input_tokens": i, "output_tokens": o}}`."""

    def __init__(
        self,
        *,
        seed: int = 0,
        min_latency_s: float = 0.005,
        max_latency_s: float = 0.08,
        min_tokens: int = 50,
        max_tokens: int = 400,
    ) -> None:
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.latency = (min_latency_s, max_latency_s)
        self.tokens = (min_tokens, max_tokens)
        self.calls = 0

    def __call__(self, request: Any) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            latency = self._random.uniform(*self.latency)
            total = self._random.randint(*self.tokens)
        time.sleep(latency)
        output = total // 3
        return {
            "text": f"answer to {request!r}",
            "usage": {"input_tokens": total - output, "output_tokens": output},
        }

"""Token budgets: every admission and accounting rule of the seed's "Shared accounting and
admission" section, checked on the in-process TokenBudget and, where the rule belongs to
the shared interface, on the SQLite-backed SharedTokenBudget too."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ditto_jupyter.worker.budget import (
    BudgetAuthority,
    BudgetExceededError,
    BudgetRecord,
    CallAbortedError,
    InvalidUsageError,
    Scope,
    TokenBudget,
    budgeted_provider,
    response_usage,
    usage_snapshot,
    usage_tokens,
)
from ditto_jupyter.worker.shared_budget import SharedTokenBudget

# --------------------------------------------------------------------------- helpers


class Boom(RuntimeError):
    """A provider failure that carries no usage."""


class BoomWithUsage(RuntimeError):
    """A provider failure that reports what it consumed before failing."""

    def __init__(self, usage: Any) -> None:
        super().__init__("failed after streaming part of the answer")
        self.usage = usage


class ScriptedProvider:
    """A sync provider whose answer for each request is given by the request itself:
    `{"usage": ...}` returns that usage, `{"raise": exc}` raises it."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def invoke(self, request: dict[str, Any]) -> Any:
        self.calls.append(request)
        if "raise" in request:
            raise request["raise"]
        if "response" in request:
            return request["response"]
        return {"output": "ok", "usage": request.get("usage")}


class AsyncScriptedProvider:
    """The async twin of ScriptedProvider (an `ainvoke` coroutine); `{"wait": event}`
    blocks until the event is set, so a test can cancel the call mid-flight."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.started = asyncio.Event()

    async def ainvoke(self, request: dict[str, Any]) -> Any:
        self.calls.append(request)
        self.started.set()
        if "wait" in request:
            await request["wait"].wait()
        await asyncio.sleep(0)
        if "raise" in request:
            raise request["raise"]
        return {"output": "ok", "usage": request.get("usage")}


def chat_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": prompt // 2, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": completion // 3},
    }


@pytest.fixture(params=["memory", "sqlite"])
def make_budget(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[int], Any]]:
    """Budgets of either authority: the rules hold for both."""
    made: list[SharedTokenBudget] = []

    def factory(limit: int) -> BudgetAuthority:
        if request.param == "memory":
            return TokenBudget(limit)
        budget = SharedTokenBudget(tmp_path / f"budget-{len(made)}.sqlite", limit)
        made.append(budget)
        return budget

    yield factory
    for budget in made:
        budget.close_connection()


def assert_ledger_adds_up(budget: BudgetAuthority) -> None:
    """Counters equal the sums over reservations and records."""
    snap = budget.snapshot()
    held, charged, replayed = budget.ledger_totals()
    assert (held, charged, replayed) == (snap.reserved, snap.charged, snap.replayed)
    records = budget.records
    assert sum(r.charge for r in records) == snap.charged
    assert sum(r.replayed_tokens for r in records) == snap.replayed


# --------------------------------------------------------------------------- construction


@pytest.mark.parametrize(
    ("limit", "error"), [(-1, ValueError), (True, TypeError), (1.5, TypeError), ("9", TypeError)]
)
def test_limit_must_be_a_non_negative_integer(limit: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="limit"):
        TokenBudget(limit)


def test_new_budget_reads_as_empty() -> None:
    budget = TokenBudget(1000)
    assert (budget.limit, budget.reserved, budget.charged, budget.remaining) == (1000, 0, 0, 1000)
    assert (budget.replayed, budget.closed, budget.records) == (0, False, [])


@pytest.mark.parametrize(
    ("provider", "message"),
    [(object(), "neither invoke"), (SimpleNamespace(invoke=3), "not callable")],
)
def test_provider_without_invoke_is_refused(provider: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        budgeted_provider(provider, TokenBudget(10), reserve_tokens=5)


def test_budget_must_be_an_authority() -> None:
    with pytest.raises(TypeError, match="budget must be"):
        budgeted_provider(ScriptedProvider(), 1000, reserve_tokens=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ({1: "x"}, "scope key 1 is not a string"),
        ({"run": object()}, "not a JSON scalar"),
        ({"run": float("nan")}, "not finite"),
        (["run"], "must be a mapping"),
    ],
)
def test_bad_scope_is_refused_at_wrap_time(scope: Any, message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        budgeted_provider(ScriptedProvider(), TokenBudget(10), reserve_tokens=5, scope=scope)


def test_scope_is_immutable_and_compares_as_a_mapping() -> None:
    scope = Scope({"run_id": "r1", "n": 2})
    assert scope == {"run_id": "r1", "n": 2}
    assert hash(scope) == hash(Scope({"n": 2, "run_id": "r1"}))
    with pytest.raises(AttributeError):
        scope.extra = 1  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- admission


def test_successful_call_settles_to_actual_usage(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(1000)
    provider = ScriptedProvider()
    scope = {"run_id": "run-1", "branch_id": "candidate-2", "label": "inference"}
    metered = budgeted_provider(
        provider, budget, reserve_tokens=lambda r: r["bound"], scope=scope, require_usage=True
    )
    response = metered.invoke({"bound": 300, "usage": chat_usage(100, 20)})
    assert response["output"] == "ok"
    assert (budget.charged, budget.reserved, budget.remaining) == (120, 0, 880)
    [record] = budget.records
    assert (record.status, record.reservation, record.charge) == ("settled", 300, 120)
    assert record.scope == scope
    assert record.usage == chat_usage(100, 20)  # as given, details included
    assert_ledger_adds_up(budget)


def test_reservation_that_does_not_fit_is_refused_before_the_call(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(500)
    provider = ScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=lambda r: r["bound"])
    metered.invoke({"bound": 400, "usage": chat_usage(300, 50)})
    with pytest.raises(BudgetExceededError, match="does not fit") as refused:
        metered.invoke({"bound": 200, "usage": chat_usage(1, 1)})
    assert (refused.value.requested, refused.value.available) == (200, 150)
    assert len(provider.calls) == 1  # the refused call never reached the provider
    assert (budget.charged, budget.reserved, budget.closed) == (350, 0, False)
    assert len(budget.records) == 1
    metered.invoke({"bound": 150, "usage": chat_usage(100, 50)})  # exactly fits
    assert budget.charged == 500 and budget.remaining == 0
    assert_ledger_adds_up(budget)


def test_reservation_is_held_while_the_call_runs(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(1000)
    seen: list[tuple[int, int]] = []

    def provider(request: Any) -> Any:
        seen.append((budget.reserved, budget.remaining))
        return {"usage": {"input_tokens": 10, "output_tokens": 5}}

    budgeted_provider(provider, budget, reserve_tokens=700).invoke("hi")
    assert seen == [(700, 300)]
    assert (budget.reserved, budget.charged) == (0, 15)


def test_failure_without_usage_charges_the_whole_reservation(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=250)
    with pytest.raises(Boom):
        metered.invoke({"raise": Boom("connection reset")})
    [record] = budget.records
    assert (record.status, record.charge, record.usage) == ("unknown", 250, None)
    assert record.detail == "Boom: connection reset"
    assert (budget.charged, budget.reserved, budget.closed) == (250, 0, False)
    assert_ledger_adds_up(budget)


def test_failure_that_reports_usage_charges_that_usage(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(1000)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=250)
    with pytest.raises(BoomWithUsage):
        metered.invoke({"raise": BoomWithUsage({"input_tokens": 40, "output_tokens": 2})})
    [record] = budget.records
    assert (record.status, record.charge) == ("failed", 42)
    assert record.usage == {"input_tokens": 40, "output_tokens": 2}


def test_failure_with_invalid_usage_charges_the_reservation(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=250)
    with pytest.raises(BoomWithUsage):
        metered.invoke({"raise": BoomWithUsage({"input_tokens": -4})})
    [record] = budget.records
    assert (record.status, record.charge, record.usage) == ("unknown", 250, {"input_tokens": -4})


def test_keyboard_interrupt_during_a_call_charges_the_reservation() -> None:
    budget = TokenBudget(1000)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=300)
    with pytest.raises(KeyboardInterrupt):
        metered.invoke({"raise": KeyboardInterrupt()})
    [record] = budget.records
    assert (record.status, record.charge) == ("unknown", 300)


def test_pre_aborted_call_is_not_admitted_and_costs_nothing(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    provider = ScriptedProvider()
    estimates: list[Any] = []

    def estimate(request: Any) -> int:
        estimates.append(request)
        return 100

    metered = budgeted_provider(provider, budget, reserve_tokens=estimate)
    signal = threading.Event()
    signal.set()
    with pytest.raises(CallAbortedError, match="before admission"):
        metered.invoke({"usage": chat_usage(1, 1)}, signal=signal)
    assert provider.calls == [] and estimates == []
    assert (budget.charged, budget.reserved, budget.records) == (0, 0, [])


def test_unset_signal_is_forwarded_to_a_provider_that_accepts_it() -> None:
    received: list[Any] = []

    class SignalAware:
        def invoke(self, request: Any, *, signal: Any = None) -> Any:
            received.append(signal)
            return {"usage": {"total_tokens": 3}}

    budget = TokenBudget(100)
    signal = threading.Event()
    metered = budgeted_provider(SignalAware(), budget, reserve_tokens=10)
    metered.invoke("x", signal=signal)
    metered.invoke("x")
    assert received == [signal, None]
    assert budget.charged == 6


# --------------------------------------------------------------------------- invalid usage


@pytest.mark.parametrize(
    "response",
    [
        {"output": "no usage at all"},
        {"usage": None},
        {"usage": {}},
        {"usage": {"prompt_tokens": "12"}},
        {"usage": {"prompt_tokens": -1, "completion_tokens": 3}},
        {"usage": {"input_tokens": 1.5}},
        {"usage": {"output_tokens": True}},
        {"usage": 42},
        SimpleNamespace(text="no usage attribute"),
    ],
)
def test_invalid_or_missing_usage_charges_the_reservation(
    make_budget: Callable[[int], Any], response: Any
) -> None:
    budget = make_budget(1000)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=200)
    assert metered.invoke({"response": response}) is response
    [record] = budget.records
    assert (record.status, record.reservation, record.charge) == ("invalid_usage", 200, 200)
    assert record.detail and "usage" in record.detail
    assert record.usage == usage_snapshot(response_usage(response))  # kept as given
    assert not budget.closed
    assert_ledger_adds_up(budget)


def test_require_usage_rejects_invalid_usage_after_charging(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=200, require_usage=True)
    response = {"output": "paid for", "usage": {"prompt_tokens": -5}}
    with pytest.raises(InvalidUsageError, match="prompt_tokens=-5 is negative") as rejected:
        metered.invoke({"response": response})
    assert rejected.value.response is response
    assert rejected.value.record is not None and rejected.value.record.status == "invalid_usage"
    assert (budget.charged, budget.reserved, budget.closed) == (200, 0, False)
    with pytest.raises(InvalidUsageError, match="usage is missing"):
        metered.invoke({"response": {"output": "x"}})
    assert budget.charged == 400
    metered.invoke({"usage": chat_usage(10, 10)})  # admission stays open
    assert budget.charged == 420


# --------------------------------------------------------------------------- exceeding


def test_usage_above_reservation_is_charged_raises_and_closes_admission(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    provider = ScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=100, scope={"label": "a"})
    other = budgeted_provider(provider, budget, reserve_tokens=10, scope={"label": "b"})
    metered.invoke({"usage": chat_usage(30, 20)})
    with pytest.raises(BudgetExceededError, match="more than its reservation") as exceeded:
        metered.invoke({"usage": chat_usage(150, 30)})
    assert exceeded.value.response == {"output": "ok", "usage": chat_usage(150, 30)}
    assert exceeded.value.record is not None
    assert (exceeded.value.record.status, exceeded.value.record.charge) == ("exceeded", 180)
    assert (budget.charged, budget.reserved, budget.closed) == (230, 0, True)
    calls = len(provider.calls)
    for wrapper in (metered, other):  # every later call, through any wrapper
        with pytest.raises(BudgetExceededError, match="admission is closed"):
            wrapper.invoke({"usage": chat_usage(1, 1)})
    assert len(provider.calls) == calls
    assert budget.charged == 230  # nothing already charged is undone
    assert [r.status for r in budget.records] == ["settled", "exceeded"]
    assert_ledger_adds_up(budget)


def test_exceeding_can_take_charged_past_the_limit_but_nothing_more_is_admitted(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(100)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=90)
    with pytest.raises(BudgetExceededError):
        metered.invoke({"usage": {"input_tokens": 150, "output_tokens": 0}})
    assert (budget.charged, budget.remaining, budget.closed) == (150, 0, True)
    with pytest.raises(BudgetExceededError, match="closed"):
        budget.reserve(1)


def test_manual_close_stops_admission(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(100)
    budget.close("notebook interrupted")
    budget.close("second reason is ignored")
    with pytest.raises(BudgetExceededError, match="notebook interrupted"):
        budget.reserve(1)
    assert budget.snapshot().closed_reason == "notebook interrupted"


# --------------------------------------------------------------------------- primitives


def test_settling_twice_is_refused_and_changes_nothing(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(100)
    reservation = budget.reserve(40, {"label": "x"})
    budget.settle(reservation, 30)
    before = (budget.snapshot(), budget.records)
    with pytest.raises(ValueError, match="not open"):
        budget.settle(reservation, 5)
    with pytest.raises(ValueError, match="not open"):
        budget.release(reservation)
    assert (budget.snapshot(), budget.records) == before


def test_reservation_of_another_budget_is_refused(make_budget: Callable[[int], Any]) -> None:
    first, second = make_budget(100), make_budget(100)
    reservation = first.reserve(10)
    held = second.reserve(10)
    with pytest.raises(ValueError, match="another budget"):
        second.settle(reservation, 5)
    assert (second.reserved, second.charged, first.reserved) == (10, 0, 10)
    second.settle(held, 10)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"charge": -1}, "at least 0"),
        ({"charge": "3"}, "integer"),
        ({"charge": 5, "status": "unknown"}, "whole reservation"),
        ({"charge": 5, "status": "replayed"}, "settle status"),
    ],
)
def test_bad_settlement_is_refused_and_changes_nothing(
    make_budget: Callable[[int], Any], kwargs: dict[str, Any], message: str
) -> None:
    budget = make_budget(100)
    reservation = budget.reserve(40)
    with pytest.raises((TypeError, ValueError), match=message):
        budget.settle(reservation, **kwargs)
    assert (budget.reserved, budget.charged, budget.records) == (40, 0, [])
    assert budget.settle(reservation, status="unknown").charge == 40


def test_release_returns_the_reservation_uncharged(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(100)
    reservation = budget.reserve(60)
    assert budget.remaining == 40
    record = budget.release(reservation, detail="provider never called")
    assert (record.status, record.charge, budget.remaining) == ("released", 0, 100)
    assert_ledger_adds_up(budget)


@pytest.mark.parametrize("estimate", [0, -3, "12", 2.0, True, None])
def test_bad_estimate_is_refused_before_anything_is_held(
    make_budget: Callable[[int], Any], estimate: Any
) -> None:
    budget = make_budget(100)
    provider = ScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=lambda _r: estimate)
    with pytest.raises((TypeError, ValueError), match=r"reserve_tokens\(request\)"):
        metered.invoke({"usage": chat_usage(1, 1)})
    assert (provider.calls, budget.reserved, budget.records) == ([], 0, [])


def test_fixed_estimate_is_validated_when_wrapping() -> None:
    with pytest.raises(ValueError, match="reserve_tokens must be at least 1"):
        budgeted_provider(ScriptedProvider(), TokenBudget(10), reserve_tokens=0)


def test_sync_invoke_returning_a_coroutine_is_released_not_charged() -> None:
    class Sneaky:
        def invoke(self, request: Any) -> Any:
            return AsyncScriptedProvider().ainvoke(request)

    budget = TokenBudget(100)
    with pytest.raises(TypeError, match="returned an awaitable"):
        budgeted_provider(Sneaky(), budget, reserve_tokens=50).invoke({})
    assert (budget.charged, budget.reserved) == (0, 0)
    assert [r.status for r in budget.records] == ["released"]


# --------------------------------------------------------------------------- usage shapes


class PromptDetails(pydantic.BaseModel):
    cached_tokens: int | None = None
    audio_tokens: int | None = None


class CompletionUsage(pydantic.BaseModel):
    """The shape of openai.types.CompletionUsage."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptDetails | None = None


class AnthropicUsage(pydantic.BaseModel):
    """The shape of anthropic.types.Usage (cache fields may be None)."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    service_tier: str | None = None


@dataclasses.dataclass
class ResponsesUsage:
    """The shape of the OpenAI Responses API usage."""

    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: dict[str, int]


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        (chat_usage(100, 20), 120),
        ({"prompt_tokens": 7, "total_tokens": 7}, 7),  # embeddings: no completion_tokens
        (CompletionUsage(prompt_tokens=9, completion_tokens=4, total_tokens=13), 13),
        (SimpleNamespace(prompt_tokens=9, completion_tokens=4), 13),
        ({"input_tokens": 50, "output_tokens": 8, "total_tokens": 58}, 58),
        (ResponsesUsage(50, 8, 58, {"cached_tokens": 40}), 58),
        (
            {
                "input_tokens": 12,
                "cache_creation_input_tokens": 300,
                "cache_read_input_tokens": 4000,
                "output_tokens": 90,
            },
            4402,
        ),
        (AnthropicUsage(input_tokens=12, output_tokens=90, cache_read_input_tokens=4000), 4102),
        (AnthropicUsage(input_tokens=12, output_tokens=90), 102),
        ({"total_tokens": 77}, 77),
        ({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 20}, 20),  # larger wins
        ({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 3}, 15),
        ({"input_tokens": 3.0, "output_tokens": 2}, 5),
    ],
)
def test_usage_shapes_from_attributes_or_keys(usage: Any, tokens: int) -> None:
    assert usage_tokens(usage) == tokens


def test_records_keep_provider_usage_as_given_including_cache_fields(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(100_000)
    usage = AnthropicUsage(
        input_tokens=12,
        output_tokens=90,
        cache_creation_input_tokens=300,
        cache_read_input_tokens=4000,
        service_tier="standard",
    )
    response = SimpleNamespace(content="hello", usage=usage)
    metered = budgeted_provider(
        ScriptedProvider(), budget, reserve_tokens=10_000, scope={"run_id": "r"}
    )
    metered.invoke({"response": response})
    [record] = budget.records
    assert record.charge == 4402
    assert record.usage == {
        "input_tokens": 12,
        "output_tokens": 90,
        "cache_creation_input_tokens": 300,
        "cache_read_input_tokens": 4000,
        "service_tier": "standard",
    }
    assert record.to_dict()["usage"] == record.usage
    assert record.to_dict()["scope"] == {"run_id": "r"}


def test_record_usage_is_a_copy_not_a_view() -> None:
    usage = chat_usage(5, 5)
    budget = TokenBudget(100)
    reservation = budget.reserve(20)
    record = budget.settle(reservation, 10, usage=usage)
    usage["prompt_tokens"] = 999
    usage["prompt_tokens_details"]["cached_tokens"] = 999
    assert record.usage == chat_usage(5, 5)


def test_custom_usage_location() -> None:
    budget = TokenBudget(100)
    metered = budgeted_provider(
        lambda request: ("text", {"input_tokens": 4, "output_tokens": 1}),
        budget,
        reserve_tokens=10,
        usage_of=lambda response: response[1],
        require_usage=True,
    )
    assert metered.invoke("x")[0] == "text"
    assert budget.charged == 5


token_counts = st.integers(min_value=0, max_value=10**9)


@settings(max_examples=150, deadline=None)
@given(
    prompt=st.none() | token_counts,
    completion=st.none() | token_counts,
    total=st.none() | token_counts,
    as_object=st.booleans(),
)
def test_chat_usage_is_never_charged_below_what_was_reported(
    prompt: int | None, completion: int | None, total: int | None, as_object: bool
) -> None:
    fields = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    usage: Any = SimpleNamespace(**fields) if as_object else fields
    if prompt is None and completion is None and total is None:
        with pytest.raises(InvalidUsageError):
            usage_tokens(usage)
        return
    charged = usage_tokens(usage)
    assert charged >= (prompt or 0) + (completion or 0)
    assert charged >= (total or 0)
    assert charged == max((prompt or 0) + (completion or 0), total or 0)


@settings(max_examples=100, deadline=None)
@given(
    field=st.sampled_from(
        ["prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "total_tokens"]
    ),
    bad=st.one_of(
        st.integers(max_value=-1),
        st.booleans(),
        st.text(),
        st.floats().filter(lambda f: not f.is_integer() if f == f else True),
    ),
)
def test_malformed_counter_is_named_in_the_error(field: str, bad: Any) -> None:
    with pytest.raises(InvalidUsageError, match=field):
        usage_tokens({field: bad})


# --------------------------------------------------------------------------- replays


def test_replays_are_recorded_separately_and_consume_nothing(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(100)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=60)
    metered.invoke({"usage": chat_usage(40, 10)})
    record = budget.record_replay(
        5000, scope={"run_id": "run-1", "node": "summarise"}, usage=chat_usage(4000, 1000)
    )
    assert (record.status, record.charge, record.reservation, record.replayed_tokens) == (
        "replayed",
        0,
        0,
        5000,
    )
    assert (budget.replayed, budget.charged, budget.remaining) == (5000, 50, 50)
    budget.close()
    budget.record_replay(7, scope={"node": "load"})  # still recorded when admission is closed
    assert budget.replayed == 5007
    assert [r.status for r in budget.records] == ["settled", "replayed", "replayed"]
    assert_ledger_adds_up(budget)


@pytest.mark.parametrize("tokens", [-1, 1.0, "5"])
def test_bad_replay_is_refused(make_budget: Callable[[int], Any], tokens: Any) -> None:
    budget = make_budget(100)
    with pytest.raises((TypeError, ValueError), match="replayed tokens"):
        budget.record_replay(tokens)
    assert (budget.replayed, budget.records) == (0, [])


# --------------------------------------------------------------------------- async


def test_async_provider_settles_actual_usage(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(1000)
    provider = AsyncScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=100)
    response = asyncio.run(metered.ainvoke({"usage": {"input_tokens": 30, "output_tokens": 3}}))
    assert response["output"] == "ok"
    assert (budget.charged, budget.reserved) == (33, 0)
    with pytest.raises(TypeError, match="async only"):
        metered.invoke({})


def test_async_invoke_and_sync_invoke_in_a_thread_are_both_supported() -> None:
    class AsyncInvoke:
        async def invoke(self, request: Any) -> Any:
            await asyncio.sleep(0)
            return {"usage": {"total_tokens": 11}}

    sync_thread: list[str] = []

    class SyncOnly:
        def invoke(self, request: Any) -> Any:
            sync_thread.append(threading.current_thread().name)
            return {"usage": {"total_tokens": 7}}

    budget = TokenBudget(100)

    async def main() -> None:
        await budgeted_provider(AsyncInvoke(), budget, reserve_tokens=20).ainvoke("a")
        await budgeted_provider(SyncOnly(), budget, reserve_tokens=20).ainvoke("b")

    asyncio.run(main())
    assert budget.charged == 18
    assert sync_thread and sync_thread[0] != threading.main_thread().name


def test_cancellation_during_an_async_call_charges_the_reservation(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    provider = AsyncScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=400)

    async def main() -> None:
        never = asyncio.Event()
        task = asyncio.create_task(metered.ainvoke({"wait": never, "usage": chat_usage(1, 1)}))
        await provider.started.wait()
        assert budget.reserved == 400
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    [record] = budget.records
    assert (record.status, record.charge) == ("unknown", 400)
    assert (budget.reserved, budget.charged) == (0, 400)


def test_already_cancelled_task_is_not_admitted(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(1000)
    provider = AsyncScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=400)

    async def cancelled_then_call() -> Any:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # cancellation requested before the metered call
        return await metered.ainvoke({"usage": chat_usage(1, 1)})

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(cancelled_then_call())

    asyncio.run(main())
    assert provider.calls == []
    assert (budget.reserved, budget.charged, budget.records) == (0, 0, [])


def test_pre_aborted_async_call_is_not_admitted(make_budget: Callable[[int], Any]) -> None:
    budget = make_budget(1000)
    provider = AsyncScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=400)

    async def main() -> None:
        signal = asyncio.Event()
        signal.set()
        with pytest.raises(CallAbortedError):
            await metered.ainvoke({"usage": chat_usage(1, 1)}, signal=signal)

    asyncio.run(main())
    assert (provider.calls, budget.charged, budget.records) == ([], 0, [])


def test_abort_signal_set_during_an_async_call_cancels_and_charges(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    provider = AsyncScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=300)

    async def main() -> None:
        signal, never = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            metered.ainvoke({"wait": never, "usage": chat_usage(1, 1)}, signal=signal)
        )
        await provider.started.wait()
        signal.set()
        with pytest.raises(CallAbortedError, match="during the call"):
            await task

    asyncio.run(main())
    [record] = budget.records
    assert (record.status, record.charge, record.detail) == (
        "unknown",
        300,
        "CallAbortedError: abort signal was set during the call",
    )


def test_call_that_finishes_before_the_signal_settles_normally() -> None:
    budget = TokenBudget(1000)
    metered = budgeted_provider(AsyncScriptedProvider(), budget, reserve_tokens=300)

    async def main() -> Any:
        return await metered.ainvoke({"usage": chat_usage(5, 5)}, signal=asyncio.Event())

    assert asyncio.run(main())["output"] == "ok"
    assert [(r.status, r.charge) for r in budget.records] == [("settled", 10)]


# --------------------------------------------------------------------------- concurrency


def test_threads_sharing_a_budget_never_overspend() -> None:
    limit = 20_000
    budget = TokenBudget(limit)
    overspent: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            snap = budget.snapshot()
            if snap.reserved + snap.charged > limit:
                overspent.append(snap.reserved + snap.charged)

    def worker(seed: int) -> tuple[int, int]:
        rng = random.Random(seed)
        metered = budgeted_provider(
            ScriptedProvider(), budget, reserve_tokens=lambda r: r["bound"], scope={"t": seed}
        )
        admitted = refused = 0
        for _ in range(300):
            bound = rng.randint(10, 200)
            request: dict[str, Any] = {"bound": bound}
            if rng.random() < 0.2:
                request["raise"] = Boom("flaky")
            else:
                used = rng.randint(0, bound)
                request["usage"] = {"input_tokens": used, "output_tokens": 0}
            try:
                metered.invoke(request)
                admitted += 1
            except BudgetExceededError:
                refused += 1
            except Boom:
                admitted += 1
        return admitted, refused

    watcher = threading.Thread(target=watch)
    watcher.start()
    results: list[tuple[int, int]] = []
    threads = [
        threading.Thread(target=lambda s=seed: results.append(worker(s))) for seed in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    watcher.join()
    assert overspent == []
    assert budget.charged <= limit and budget.reserved == 0
    assert sum(a for a, _ in results) == len(budget.records)
    assert sum(r for _, r in results) > 0  # the limit was actually contended
    assert_ledger_adds_up(budget)


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(min_value=0, max_value=500),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["reserve", "settle", "unknown", "release", "replay", "over"]),
            st.integers(min_value=1, max_value=120),
            st.integers(min_value=0, max_value=10**6),
        ),
        max_size=40,
    ),
)
def test_any_sequence_of_operations_keeps_the_invariants(
    limit: int, steps: list[tuple[str, int, int]]
) -> None:
    budget = TokenBudget(limit)
    held: list[Any] = []
    for op, tokens, pick in steps:
        charged_before = budget.charged
        if op == "reserve":
            try:
                held.append(budget.reserve(tokens))
            except BudgetExceededError:
                assert budget.closed or budget.reserved + budget.charged + tokens > limit
        elif op == "replay":
            budget.record_replay(tokens)
        elif held:
            reservation = held.pop(pick % len(held))
            if op == "settle":
                budget.settle(reservation, pick % (reservation.tokens + 1))
            elif op == "unknown":
                budget.settle(reservation, status="unknown")
            elif op == "release":
                budget.release(reservation)
            else:
                with pytest.raises(BudgetExceededError):
                    budget.settle(reservation, reservation.tokens + 1 + pick % 50)
                assert budget.closed
        assert budget.charged >= charged_before  # nothing charged is undone
        if not budget.closed:
            assert budget.reserved + budget.charged <= limit
        assert budget.reserved == sum(r.tokens for r in held)
        assert_ledger_adds_up(budget)


# --------------------------------------------------------------------------- display


def test_repr_and_html_show_the_counters() -> None:
    budget = TokenBudget(200_000)
    budget.settle(budget.reserve(5000), 1234)
    budget.close("<script>alert(1)</script>")
    text = repr(budget)
    assert "limit=200000" in text and "charged=1234" in text and "closed" in text
    page = budget._repr_html_()
    assert "200,000" in page and "1,234" in page and "198,766" in page
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_records_are_frozen() -> None:
    budget = TokenBudget(10)
    record = budget.settle(budget.reserve(5), 5)
    assert isinstance(record, BudgetRecord)
    with pytest.raises(AttributeError):
        record.charge = 0  # type: ignore[misc]
    assert record._replace(charge=0).charge == 0 and record.charge == 5  # copies, never edits


# --------------------------------------------------------------------------- more edges


def test_failure_reporting_usage_above_its_reservation_closes_admission(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=100)
    original = BoomWithUsage({"input_tokens": 400, "output_tokens": 50})
    with pytest.raises(BudgetExceededError, match="used 450 tokens") as exceeded:
        metered.invoke({"raise": original})
    assert exceeded.value.__context__ is original  # the provider's failure is kept
    [record] = budget.records
    assert (record.status, record.charge, budget.closed) == ("exceeded", 450, True)


def test_cancelling_a_sync_provider_run_in_a_thread_charges_the_reservation() -> None:
    release = threading.Event()
    entered = threading.Event()

    def slow(request: Any) -> Any:
        entered.set()
        release.wait(60)  # bounded: a broken test fails instead of hanging the suite
        return {"usage": {"total_tokens": 1}}

    budget = TokenBudget(1000)
    metered = budgeted_provider(slow, budget, reserve_tokens=250)

    async def main() -> None:
        task = asyncio.create_task(metered.ainvoke("x"))
        while not entered.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        try:
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            release.set()  # let the worker thread finish before the loop shuts down

    asyncio.run(main())
    [record] = budget.records
    assert (record.status, record.charge, budget.reserved) == ("unknown", 250, 0)


def test_async_provider_receives_the_signal_when_it_accepts_one() -> None:
    received: list[Any] = []

    class SignalAware:
        async def ainvoke(self, request: Any, signal: Any = None) -> Any:
            received.append(signal)
            return {"usage": {"total_tokens": 2}}

    budget = TokenBudget(100)
    metered = budgeted_provider(SignalAware(), budget, reserve_tokens=10)
    signal = threading.Event()  # not awaitable: forwarded, checked, but not raced
    asyncio.run(metered.ainvoke("x", signal=signal))
    assert received == [signal] and budget.charged == 2


def test_many_tasks_share_one_budget_without_overspending(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(5_000)
    provider = AsyncScriptedProvider()
    metered = budgeted_provider(provider, budget, reserve_tokens=lambda r: r["bound"])

    async def one(i: int) -> str:
        try:
            await metered.ainvoke({"bound": 100 + i % 50, "usage": {"total_tokens": 60}})
        except BudgetExceededError:
            return "refused"
        return "admitted"

    async def main() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(200)))

    outcomes = asyncio.run(main())
    admitted = outcomes.count("admitted")
    assert admitted == len(provider.calls) == len(budget.records)
    assert outcomes.count("refused") > 0
    assert budget.charged == 60 * admitted <= 5_000
    assert_ledger_adds_up(budget)


class ExplodingUsage:
    """A usage object whose counters fail to read (a broken SDK object)."""

    @property
    def prompt_tokens(self) -> int:
        raise RuntimeError("lazy field failed to load")

    def __repr__(self) -> str:
        return "ExplodingUsage()"


def test_usage_that_cannot_be_read_is_invalid_not_a_leaked_reservation(
    make_budget: Callable[[int], Any],
) -> None:
    budget = make_budget(1000)
    with pytest.raises(InvalidUsageError, match="usage could not be read: RuntimeError"):
        usage_tokens(ExplodingUsage())
    metered = budgeted_provider(ScriptedProvider(), budget, reserve_tokens=100, require_usage=True)
    with pytest.raises(InvalidUsageError, match="could not be read"):
        metered.invoke({"response": {"usage": ExplodingUsage()}})

    def broken_usage_of(response: Any) -> Any:
        raise KeyError("usage")

    lenient = budgeted_provider(
        ScriptedProvider(), budget, reserve_tokens=100, usage_of=broken_usage_of
    )
    assert lenient.invoke({"usage": chat_usage(1, 1)})["output"] == "ok"
    assert [(r.status, r.charge) for r in budget.records] == [
        ("invalid_usage", 100),
        ("invalid_usage", 100),
    ]
    assert budget.records[1].detail == "usage could not be read: KeyError: 'usage'"
    assert (budget.reserved, budget.charged) == (0, 200)

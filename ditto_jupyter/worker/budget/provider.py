"""The provider wrapper: every `invoke` / `ainvoke` admitted by a budget, then settled.

The reservation estimate must bound the entire request (input, maximum output, protocol
overhead, hidden reasoning). An estimator without that guarantee gives conservative
admission, not a physical hard limit.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeAlias, cast

from ditto_jupyter.worker.budget.authority import BudgetAuthority
from ditto_jupyter.worker.budget.errors import (
    BudgetExceededError,
    CallAbortedError,
    InvalidUsageError,
    describe_error,
)
from ditto_jupyter.worker.budget.records import (
    FAILED,
    INVALID_USAGE,
    SETTLED,
    UNKNOWN,
    Reservation,
    Scope,
    ScopeValue,
    check_count,
)
from ditto_jupyter.worker.budget.usage import UsageSource, response_usage, usage_tokens


class AbortSignal(Protocol):
    """Anything with `is_set()`: a threading.Event, an asyncio.Event, ..."""

    def is_set(self) -> bool: ...


Estimator: TypeAlias = "int | Callable[[Any], int]"


def _accepts_signal(function: Callable[..., Any] | None) -> bool:
    """Whether `function` takes a `signal` keyword, so an abort signal can be forwarded."""
    if function is None:
        return False
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    parameter = parameters.get("signal")
    return parameter is not None and parameter.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    )


def _cancel_requested(task: asyncio.Task[Any] | None) -> bool:
    """True if `task` has a pending cancellation request (Python 3.11+)."""
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling()) if cancelling is not None else False


class BudgetedProvider:
    """A provider whose every `invoke` / `ainvoke` is admitted by a budget, then settled.

    Only `invoke` and `ainvoke` are metered; streaming is deliberately not wrapped (call
    the non-streaming invoke), and no other attribute of the provider is forwarded, so
    nothing can bypass the budget by accident."""

    def __init__(
        self,
        provider: object,
        budget: BudgetAuthority,
        *,
        reserve_tokens: Estimator,
        scope: Mapping[str, ScopeValue] | None = None,
        require_usage: bool = False,
        usage_of: Callable[[Any], UsageSource] | None = None,
    ) -> None:
        if not isinstance(budget, BudgetAuthority):
            raise TypeError(
                f"budget must be a TokenBudget or SharedTokenBudget, not {type(budget).__name__}"
            )
        if callable(reserve_tokens):
            self._estimate: Callable[[Any], int] = reserve_tokens
        else:
            fixed = check_count(reserve_tokens, "reserve_tokens", minimum=1)
            self._estimate = lambda _request: fixed
        if not isinstance(require_usage, bool):
            raise TypeError("require_usage must be a bool")
        sync_call = getattr(provider, "invoke", None)
        async_call = getattr(provider, "ainvoke", None)
        if sync_call is None and async_call is None and callable(provider):
            sync_call = provider
        if sync_call is not None and not callable(sync_call):
            raise TypeError("provider.invoke is not callable")
        if async_call is not None and not callable(async_call):
            raise TypeError("provider.ainvoke is not callable")
        if sync_call is not None and inspect.iscoroutinefunction(sync_call):
            async_call = async_call or sync_call
            sync_call = None
        if sync_call is None and async_call is None:
            raise TypeError(
                f"provider {type(provider).__name__} has neither invoke(request) nor "
                f"ainvoke(request) and is not callable"
            )
        self.provider = provider
        self.budget = budget
        self.scope = Scope.of(scope)
        self.require_usage = require_usage
        self._usage_of = usage_of or response_usage
        self._sync: Callable[..., Any] | None = sync_call
        self._async: Callable[..., Any] | None = async_call
        self._sync_signal = _accepts_signal(sync_call)
        self._async_signal = _accepts_signal(async_call)

    def __repr__(self) -> str:
        return f"<BudgetedProvider {type(self.provider).__name__} scope={self.scope.to_dict()}>"

    # -- admission

    def _admit(self, request: Any, signal: AbortSignal | None) -> Reservation:
        """Check the abort signal, estimate, reserve. Raises before anything is held."""
        if signal is not None and signal.is_set():
            raise CallAbortedError("abort signal was set before admission; nothing charged")
        tokens = check_count(self._estimate(request), "reserve_tokens(request)", minimum=1)
        return self.budget.reserve(tokens, self.scope)

    # -- settlement

    def _settle_response(self, reservation: Reservation, response: Any) -> Any:
        usage: UsageSource = None
        try:
            usage = self._usage_of(response)
            tokens = usage_tokens(usage)
        except Exception as exc:  # even a failing usage_of must not leak the reservation
            problem = (
                exc
                if isinstance(exc, InvalidUsageError)
                else InvalidUsageError(f"usage could not be read: {describe_error(exc)}")
            )
            record = self.budget.settle(
                reservation, status=INVALID_USAGE, usage=usage, detail=str(problem)
            )
            if self.require_usage:
                error = InvalidUsageError(
                    f"{problem}; the whole reservation of {reservation.tokens} tokens was "
                    f"charged and require_usage rejects the response"
                )
                error.record = record
                error.response = response
                raise error from None
            return response
        try:
            self.budget.settle(reservation, tokens, status=SETTLED, usage=usage)
        except BudgetExceededError as exceeded:
            exceeded.response = response
            raise
        return response

    def _settle_failure(self, reservation: Reservation, exc: BaseException) -> None:
        """Charge a failed or cancelled call: its reported usage if the exception carries
        valid usage (`exc.usage`), else the whole reservation as `unknown`."""
        usage = getattr(exc, "usage", None)
        if usage is not None:
            try:
                tokens = usage_tokens(usage)
            except InvalidUsageError:
                pass
            else:
                self.budget.settle(
                    reservation, tokens, status=FAILED, usage=usage, detail=describe_error(exc)
                )
                return
        self.budget.settle(reservation, status=UNKNOWN, usage=usage, detail=describe_error(exc))

    # -- calls

    def invoke(self, request: Any, *, signal: AbortSignal | None = None) -> Any:
        """Admit, call `provider.invoke(request)`, settle. A KeyboardInterrupt or any
        failure without usage charges the whole reservation (`unknown`) and is re-raised.
        `signal` is checked before admission and forwarded if the provider accepts it."""
        if self._sync is None:
            raise TypeError("provider is async only; use `await metered.ainvoke(request)`")
        reservation = self._admit(request, signal)
        try:
            if self._sync_signal and signal is not None:
                response = self._sync(request, signal=signal)
            else:
                response = self._sync(request)
        except BaseException as exc:
            self._settle_failure(reservation, exc)
            raise
        if type(response) is not dict and inspect.isawaitable(response):
            if inspect.iscoroutine(response):
                response.close()  # never started: the provider did no work
            self.budget.release(reservation, detail="provider.invoke returned an awaitable")
            raise TypeError(
                "provider.invoke returned an awaitable; use `await metered.ainvoke(request)`"
            )
        return self._settle_response(reservation, response)

    async def ainvoke(self, request: Any, *, signal: AbortSignal | None = None) -> Any:
        """Admit, await the provider (`ainvoke`, an async `invoke`, or a sync `invoke` in a
        worker thread), settle. A task already cancelled or a signal already set is not
        admitted. Cancellation during the call charges the whole reservation (`unknown`)
        and re-raises. An asyncio.Event signal set during the call cancels it the same way
        and raises CallAbortedError."""
        if signal is not None and signal.is_set():
            raise CallAbortedError("abort signal was set before admission; nothing charged")
        task = asyncio.current_task()
        if sys.version_info < (3, 11):  # pragma: no cover - no Task.cancelling() before 3.11
            await asyncio.sleep(0)  # let a pending cancellation surface before admission
        elif _cancel_requested(task):
            raise asyncio.CancelledError("task was cancelled before admission; nothing charged")
        reservation = self._admit(request, signal)
        try:
            response = await self._call_async(request, signal)
        except BaseException as exc:
            self._settle_failure(reservation, exc)
            raise
        return self._settle_response(reservation, response)

    def _start_async(self, request: Any, signal: AbortSignal | None) -> Awaitable[Any]:
        if self._async is not None:
            if self._async_signal and signal is not None:
                return cast(Awaitable[Any], self._async(request, signal=signal))
            return cast(Awaitable[Any], self._async(request))
        assert self._sync is not None
        if self._sync_signal and signal is not None:
            return asyncio.to_thread(self._sync, request, signal=signal)
        return asyncio.to_thread(self._sync, request)

    async def _call_async(self, request: Any, signal: AbortSignal | None) -> Any:
        waiter_factory = getattr(signal, "wait", None)
        if signal is None or not inspect.iscoroutinefunction(waiter_factory):
            response = await self._start_async(request, signal)
            if inspect.isawaitable(response):  # a sync invoke that returned a coroutine
                response = await response
            return response
        call = asyncio.ensure_future(self._start_async(request, signal))
        waiter = asyncio.ensure_future(cast(Callable[[], Awaitable[Any]], waiter_factory)())
        try:
            await asyncio.wait({call, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            call.cancel()
            raise
        finally:
            waiter.cancel()
        if not call.done():
            call.cancel()
            try:
                await call
            except asyncio.CancelledError:
                if _cancel_requested(asyncio.current_task()):
                    raise  # this task itself was cancelled meanwhile
            if call.cancelled():
                raise CallAbortedError("abort signal was set during the call")
        response = call.result()
        if inspect.isawaitable(response):
            response = await response
        return response


def budgeted_provider(
    provider: object,
    budget: BudgetAuthority,
    *,
    reserve_tokens: Estimator,
    scope: Mapping[str, ScopeValue] | None = None,
    require_usage: bool = False,
    usage_of: Callable[[Any], UsageSource] | None = None,
) -> BudgetedProvider:
    """Wrap `provider` (an object with `invoke(request)` and/or `ainvoke(request)`, or a
    plain callable) so every call reserves `reserve_tokens(request)` (or a fixed int) on
    `budget` first and settles its actual usage after. `scope` is recorded on every
    record; `require_usage` rejects responses whose usage is invalid or missing (after
    charging the reservation); `usage_of(response)` overrides where usage is read from
    (default: `response.usage` or `response["usage"]`)."""
    return BudgetedProvider(
        provider,
        budget,
        reserve_tokens=reserve_tokens,
        scope=scope,
        require_usage=require_usage,
        usage_of=usage_of,
    )

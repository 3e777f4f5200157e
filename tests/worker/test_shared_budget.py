"""SharedTokenBudget: one admission authority for many processes, on a real SQLite file.

The central test runs 8 spawned processes, each with 4 threads making 50 metered calls
(1600 calls, many in flight at once) against one limit, with random provider failures,
interrupts, invalid usage and partial usage; it checks that nothing is ever overspent and
that the ledger adds up exactly, to the call and to the token."""

from __future__ import annotations

import collections
import json
import multiprocessing
import os
import pickle
import random
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ditto_jupyter.worker.budget import (
    BudgetExceededError,
    budgeted_provider,
)
from ditto_jupyter.worker.shared_budget import SharedTokenBudget

PROCESSES = 8
THREADS = 4
CALLS_PER_PROCESS = 200
LIMIT = 100_000

# --------------------------------------------------------------------------- worker process


class FlakyProvider:
    """A provider whose outcome is chosen by the request: it sleeps a little (so calls
    overlap across threads and processes), then answers or fails."""

    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, request: dict[str, Any]) -> Any:
        self.calls += 1
        time.sleep(request["sleep"])
        outcome, used = request["outcome"], request["used"]
        if outcome == "fail":
            raise ConnectionError("provider dropped the connection")
        if outcome == "interrupted":  # a cancellation (Ctrl-C in a notebook) mid-call
            raise KeyboardInterrupt("simulated interrupt")
        if outcome == "fail_with_usage":
            error = TimeoutError("timed out after partial output")
            error.usage = {"input_tokens": used, "output_tokens": 0}  # type: ignore[attr-defined]
            raise error
        if outcome == "invalid":
            return {"text": "?", "usage": {"prompt_tokens": -1}}
        return {
            "text": "ok",
            "usage": {"prompt_tokens": used // 2, "completion_tokens": used - used // 2},
        }


EXPECTED_STATUS = {
    "ok": "settled",
    "fail": "unknown",
    "interrupted": "unknown",
    "fail_with_usage": "failed",
    "invalid": "invalid_usage",
}


def run_thread(budget: SharedTokenBudget, worker: int, thread: int, calls: int) -> dict[str, Any]:
    """Make `calls` metered calls; return what this thread expects the ledger to hold."""
    rng = random.Random(worker * 1000 + thread)
    provider = FlakyProvider()
    metered = budgeted_provider(
        provider,
        budget,
        reserve_tokens=lambda request: request["reserve"],
        scope={"worker": worker, "thread": thread},
    )
    tally: dict[str, Any] = {
        "key": (worker, thread),
        "admitted": 0,
        "refused": 0,
        "charge": 0,
        "statuses": collections.Counter(),
    }
    for call in range(calls):
        reserve = rng.randint(50, 450)
        used = rng.randint(0, reserve)
        outcome = rng.choices(
            ["ok", "fail", "interrupted", "fail_with_usage", "invalid"], [65, 12, 5, 8, 10]
        )[0]
        request = {
            "reserve": reserve,
            "used": used,
            "outcome": outcome,
            # every thread's first call lasts long enough to overlap the others' whatever
            # the machine's load (the check that calls were in flight together relies on it)
            "sleep": 0.25 if call == 0 else rng.uniform(0, 0.002),
        }
        before = provider.calls
        try:
            metered.invoke(request)
        except BudgetExceededError:
            assert provider.calls == before, "a refused call reached the provider"
            tally["refused"] += 1
            continue
        except (ConnectionError, TimeoutError, KeyboardInterrupt):
            pass
        tally["admitted"] += 1
        tally["charge"] += used if outcome in ("ok", "fail_with_usage") else reserve
        tally["statuses"][EXPECTED_STATUS[outcome]] += 1
    return tally


def run_process(path: str, worker: int, start: Any, results: Any) -> None:
    """One process: open the shared budget, wait for the common start, run threads."""
    budget = SharedTokenBudget(path)
    start.wait()
    tallies: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def target(thread: int) -> None:
        try:
            tallies.append(run_thread(budget, worker, thread, CALLS_PER_PROCESS // THREADS))
        except BaseException as exc:  # reported to the parent, which fails the test
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put((worker, tallies, [repr(e) for e in errors]))


def max_in_flight_across_processes(path: Path) -> int:
    """The most reservations of different processes that the ledger shows open at once
    (a sweep over reserved/settled times, in ms)."""
    raw = sqlite3.connect(path)
    rows = raw.execute(
        "SELECT reserved_at_ms, settled_at_ms, owner_pid FROM token_budget_ledger"
    ).fetchall()
    raw.close()
    best = 0
    for start, _, pid in rows:
        owners = {p for s, e, p in rows if s <= start <= e}
        best = max(best, len(owners | {pid}))
    return best


@pytest.mark.slow
def test_eight_processes_never_overspend_and_the_ledger_adds_up(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    budget = SharedTokenBudget(path, LIMIT)
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    processes = [
        context.Process(target=run_process, args=(str(path), worker, start, results))
        for worker in range(PROCESSES)
    ]
    for process in processes:
        process.start()

    samples: list[tuple[int, int]] = []
    stop = threading.Event()

    def watch() -> None:  # an independent reader sampling the counters throughout
        observer = SharedTokenBudget(path)
        while not stop.is_set():
            snap = observer.snapshot()
            samples.append((snap.reserved, snap.charged))
            time.sleep(0.002)
        observer.close_connection()

    watcher = threading.Thread(target=watch)
    watcher.start()
    start.set()
    outputs = [results.get(timeout=300) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    stop.set()
    watcher.join()
    assert [process.exitcode for process in processes] == [0] * PROCESSES
    assert [errors for _, _, errors in outputs] == [[]] * PROCESSES

    tallies = [tally for _, per_thread, _ in outputs for tally in per_thread]
    assert len(tallies) == PROCESSES * THREADS
    admitted = sum(t["admitted"] for t in tallies)
    refused = sum(t["refused"] for t in tallies)
    assert admitted + refused == PROCESSES * CALLS_PER_PROCESS
    assert admitted > 0 and refused > 0  # the limit really was contended

    # Never overspent: not at the end, not at any sampled moment.
    snap = budget.snapshot()
    assert snap.charged <= LIMIT and snap.reserved == 0 and not snap.closed
    assert all(reserved + charged <= LIMIT for reserved, charged in samples)
    assert samples  # the watcher did sample throughout
    assert max_in_flight_across_processes(path) >= 2  # calls really were in flight together

    # The ledger adds up exactly: counters, per-call rows, per-thread sums, statuses.
    assert budget.ledger_totals() == (0, snap.charged, 0)
    assert snap.charged == sum(t["charge"] for t in tallies)
    records = budget.records
    assert len(records) == admitted
    assert budget.open_reservations() == []
    statuses: collections.Counter[str] = collections.Counter()
    for tally in tallies:
        statuses.update(tally["statuses"])
    assert collections.Counter(r.status for r in records) == statuses
    per_thread: collections.Counter[tuple[Any, Any]] = collections.Counter()
    for record in records:
        per_thread[(record.scope["worker"], record.scope["thread"])] += record.charge
    expected = {tally["key"]: tally["charge"] for tally in tallies}
    assert set(per_thread) <= set(expected)
    assert {key: per_thread.get(key, 0) for key in expected} == expected
    for record in records:
        if record.status in ("unknown", "invalid_usage"):
            assert record.charge == record.reservation
        else:
            assert record.charge <= record.reservation
    budget.close_connection()


# --------------------------------------------------------------------------- across processes


EXCEED_SCRIPT = """
import sys
from ditto_jupyter.worker.budget import BudgetExceededError, budgeted_provider
from ditto_jupyter.worker.shared_budget import SharedTokenBudget
budget = SharedTokenBudget(sys.argv[1])
metered = budgeted_provider(
    lambda request: {"usage": {"input_tokens": 900, "output_tokens": 0}},
    budget, reserve_tokens=100, scope={"process": "greedy"})
try:
    metered.invoke("a long answer")
except BudgetExceededError as exc:
    print("exceeded", exc.record.charge)
"""


def test_exceeding_in_one_process_closes_admission_for_all(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    budget = SharedTokenBudget(path, 10_000)
    result = subprocess.run(
        [sys.executable, "-c", EXCEED_SCRIPT, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == ["exceeded", "900"]
    snap = budget.snapshot()
    assert (snap.charged, snap.closed) == (900, True)
    assert snap.closed_reason is not None and "exceeded" in snap.closed_reason
    with pytest.raises(BudgetExceededError, match="admission is closed"):
        budget.reserve(1)
    [record] = budget.records
    assert (record.status, record.reservation, record.charge) == ("exceeded", 100, 900)
    assert record.scope == {"process": "greedy"}


RESERVE_AND_DIE = """
import os, sys
from ditto_jupyter.worker.shared_budget import SharedTokenBudget
budget = SharedTokenBudget(sys.argv[1])
budget.reserve(int(sys.argv[2]), {"who": "doomed"})
os._exit(9)  # dies mid-call: no settlement, no cleanup
"""


def test_reservation_of_a_dead_process_is_held_until_recovered_as_unknown(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.sqlite"
    budget = SharedTokenBudget(path, 1000)
    live = budget.reserve(100, {"who": "alive"})
    died = subprocess.run([sys.executable, "-c", RESERVE_AND_DIE, str(path), "600"], check=False)
    assert died.returncode == 9
    assert (budget.reserved, budget.remaining) == (700, 300)  # still held: never overspent
    with pytest.raises(BudgetExceededError):
        budget.reserve(400)
    recovered = budget.recover_abandoned()
    assert [(r.status, r.charge, r.scope) for r in recovered] == [
        ("unknown", 600, {"who": "doomed"})
    ]
    assert recovered[0].detail is not None and "exited before settling" in recovered[0].detail
    assert (budget.reserved, budget.charged) == (100, 600)  # the live reservation untouched
    assert budget.recover_abandoned() == []
    budget.settle(live, 50)
    assert budget.ledger_totals() == (0, 650, 0)


def test_budget_travels_to_a_spawned_process_by_pickle(tmp_path: Path) -> None:
    budget = SharedTokenBudget(tmp_path / "shared.sqlite", 500, name="team")
    copy = pickle.loads(pickle.dumps(budget))
    copy.settle(copy.reserve(10), 7)
    assert (copy.name, copy.path, budget.charged) == ("team", budget.path, 7)


def test_forked_child_uses_its_own_connection(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    budget = SharedTokenBudget(tmp_path / "shared.sqlite", 500)
    budget.settle(budget.reserve(10), 10)  # the parent's connection is open
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_settle_in_child, args=(budget,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert budget.charged == 30
    budget.settle(budget.reserve(5), 5)  # the parent's connection still works
    assert budget.ledger_totals() == (0, 35, 0)


def _settle_in_child(budget: SharedTokenBudget) -> None:
    budget.settle(budget.reserve(20), 20)


def test_fork_while_a_thread_holds_the_budget_lock(tmp_path: Path) -> None:
    """A child forked while the parent's lock is held (by some thread mid-transaction)
    still works: it takes a lock and a connection of its own."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    budget = SharedTokenBudget(tmp_path / "shared.sqlite", 500)
    context = multiprocessing.get_context("fork")
    with budget._process_lock():  # as if another thread were inside a transaction
        child = context.Process(target=_settle_in_child, args=(budget,))
        child.start()
        child.join(timeout=120)
        if child.exitcode is None:  # stuck on the inherited lock: the bug this guards
            child.kill()
            child.join()
    assert child.exitcode == 0
    assert (budget.charged, budget.reserved) == (20, 0)


# --------------------------------------------------------------------------- opening


def test_opening_rules(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    with pytest.raises(ValueError, match="pass a limit to create it"):
        SharedTokenBudget(path)
    budget = SharedTokenBudget(path, 1000)
    assert SharedTokenBudget(path).limit == 1000
    assert SharedTokenBudget(path, 1000).limit == 1000
    with pytest.raises(ValueError, match="already has limit 1000, not 5"):
        SharedTokenBudget(path, 5)
    assert budget.limit == 1000  # the refused open changed nothing
    other = SharedTokenBudget(path, 50, name="other-team")
    other.settle(other.reserve(50), 50)
    assert (budget.remaining, other.remaining) == (1000, 0)


@pytest.mark.parametrize(
    ("path", "kwargs", "message"),
    [
        (":memory:", {}, "needs a file path"),
        ("", {}, "needs a file path"),
        (3, {}, "must be a file path"),
        ("x.sqlite", {"name": ""}, "non-empty"),
        ("x.sqlite", {"synchronous": "SOMETIMES"}, "synchronous must be"),
        ("x.sqlite", {"busy_timeout_s": 0}, "must be positive"),
    ],
)
def test_bad_arguments_are_refused(
    tmp_path: Path, path: Any, kwargs: dict[str, Any], message: str
) -> None:
    if path == "x.sqlite":
        path = tmp_path / path
    with pytest.raises((TypeError, ValueError), match=message):
        SharedTokenBudget(path, 10, **kwargs)


def test_file_uses_wal_and_the_database_itself_refuses_overspending(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    budget = SharedTokenBudget(path, 100, synchronous="full")
    budget.settle(budget.reserve(60), 60)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        raw.execute("UPDATE token_budget SET reserved = 41 WHERE name = 'default'")
    raw.execute("UPDATE token_budget SET reserved = 40 WHERE name = 'default'")  # fits: allowed
    raw.rollback()
    raw.close()
    assert (budget.reserved, budget.charged) == (0, 60)


def test_ledger_rows_hold_reservations_charges_usage_and_scope(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    budget = SharedTokenBudget(path, 10_000)
    metered = budgeted_provider(
        lambda request: {
            "usage": {
                "input_tokens": 3,
                "cache_read_input_tokens": 200,
                "cache_creation_input_tokens": None,
                "output_tokens": 7,
            }
        },
        budget,
        reserve_tokens=500,
        scope={"run_id": "run-1", "label": "inference"},
    )
    held = budget.reserve(40, {"label": "in flight"})
    metered.invoke("hi")
    budget.record_replay(321, {"node": "summarise"})
    raw = sqlite3.connect(path)
    rows = raw.execute(
        "SELECT reservation, charge, replayed, status, usage, scope FROM token_budget_ledger "
        "ORDER BY id"
    ).fetchall()
    raw.close()
    assert rows[0] == (
        40,
        None,
        0,
        None,
        None,
        json.dumps({"label": "in flight"}, separators=(",", ":")),
    )
    assert rows[1][:4] == (500, 210, 0, "settled")
    assert json.loads(rows[1][4]) == {
        "input_tokens": 3,
        "cache_read_input_tokens": 200,
        "cache_creation_input_tokens": None,
        "output_tokens": 7,
    }
    assert json.loads(rows[1][5]) == {"run_id": "run-1", "label": "inference"}
    assert rows[2][:4] == (0, 0, 321, "replayed")
    assert budget.ledger_totals() == (40, 210, 321)
    assert budget.snapshot().replayed == 321
    budget.release(held)
    assert [r.status for r in budget.records] == ["settled", "replayed", "released"]


def test_a_failed_transaction_changes_nothing(tmp_path: Path) -> None:
    budget = SharedTokenBudget(tmp_path / "shared.sqlite", 100)
    reservation = budget.reserve(30)
    budget.settle(reservation, 20)
    before = (budget.snapshot(), budget.records, budget.ledger_totals())
    with pytest.raises(ValueError, match="not open"):
        budget.settle(reservation, 20)
    with pytest.raises(BudgetExceededError, match="does not fit"):
        budget.reserve(81)
    assert (budget.snapshot(), budget.records, budget.ledger_totals()) == before


def _open_fresh_and_spend(path: str, start: Any, results: Any) -> None:
    start.wait()
    try:
        budget = SharedTokenBudget(path, 1000)
        budget.settle(budget.reserve(10), 10)
        results.put("ok")
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put(repr(exc))


def test_many_processes_can_create_the_same_budget_at_once(tmp_path: Path) -> None:
    """Kernels starting together all open (and create) one fresh file without errors."""
    path = tmp_path / "fresh.sqlite"
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=_open_fresh_and_spend, args=(str(path), start, results))
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    start.set()
    outcomes = [results.get(timeout=300) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert outcomes == ["ok"] * PROCESSES
    budget = SharedTokenBudget(path)
    assert (budget.limit, budget.charged, len(budget.records)) == (1000, 80, PROCESSES)

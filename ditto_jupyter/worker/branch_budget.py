"""One shared token budget drawn on by many branches, each with its share and refusals.

`BranchTokenBudget` is a `SharedTokenBudget` whose every reservation is made for one
branch (the runtime a kernel runs, when runtimes are checked out N at once from one
checkpoint). Beside what the shared budget keeps, it records:

- **whose each reservation is**: the ledger row's `branch`, so the budget shows each
  branch's reservations and charges beside the total (`branch_figures`);
- **a per-branch cap** inside the shared limit (`set_each`): a reservation is admitted only
  when it fits both the limit and the branch's cap. Both are checked and the reservation
  recorded in one `BEGIN IMMEDIATE` transaction, so the check is atomic across processes,
  and the cap is read at every reservation: changing it applies at once to every branch,
  never frozen when a branch was made;
- **every refusal** (`refusals`): the branch, the tokens, and why, in the same file. The
  error a refused call raises names its branch, so the branch's notebook says which
  branch was refused and why.

The tables sit beside the shared budget's (`token_budget_each`, `token_budget_refusals`,
and a `branch` column of the ledger, added to files made before it).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ditto_jupyter.worker.budget.authority import refusal
from ditto_jupyter.worker.budget.errors import BudgetExceededError
from ditto_jupyter.worker.budget.records import Reservation, Scope, ScopeValue, check_count
from ditto_jupyter.worker.shared_budget import SharedTokenBudget

__all__ = ["BranchFigures", "BranchTokenBudget", "Refusal"]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS token_budget_each (
    budget TEXT PRIMARY KEY,
    each_limit INTEGER NOT NULL CHECK (each_limit >= 1)
);
CREATE TABLE IF NOT EXISTS token_budget_refusals (
    id INTEGER PRIMARY KEY,
    budget TEXT NOT NULL,
    branch TEXT,
    tokens INTEGER NOT NULL,
    reason TEXT NOT NULL,
    refused_at_ms INTEGER NOT NULL
);
"""
#: What a branch holds of the budget: its open reservations and its charges.
_BRANCH_USE: Final = (
    "SELECT COALESCE(SUM(CASE WHEN status IS NULL THEN reservation ELSE charge END), 0) "
    "FROM token_budget_ledger WHERE budget = ? AND branch IS ?"
)


@dataclass(frozen=True)
class BranchFigures:
    """One branch's part of a shared budget: open reservations, charges, refusals."""

    branch: str | None
    reserved: int
    charged: int
    refused: int


@dataclass(frozen=True)
class Refusal:
    """A reservation the budget refused: for which branch, how many tokens, and why."""

    id: int
    branch: str | None
    tokens: int
    reason: str
    refused_at_ms: int


class BranchTokenBudget(SharedTokenBudget):
    """A SharedTokenBudget whose reservations are made for one `branch` (None: no branch,
    as a plain SharedTokenBudget), with a per-branch cap and a record of every refusal."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        limit: int | None = None,
        *,
        name: str = "default",
        branch: str | None = None,
        **options: Any,
    ) -> None:
        if branch is not None and (not isinstance(branch, str) or not branch):
            raise ValueError("branch must be a non-empty string or None")
        super().__init__(path, limit, name=name, **options)
        self.branch = branch
        with self._process_lock():
            connection = self._connection()
            try:
                connection.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")
                columns = {
                    r[1] for r in connection.execute("PRAGMA table_info(token_budget_ledger)")
                }
                if "branch" not in columns:  # a file made before branches
                    connection.execute("ALTER TABLE token_budget_ledger ADD COLUMN branch TEXT")
                connection.execute(  # a branch's share is summed at every reservation
                    "CREATE INDEX IF NOT EXISTS token_budget_ledger_branch "
                    "ON token_budget_ledger (budget, branch)"
                )
            except sqlite3.OperationalError as error:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                if "duplicate column" not in str(error):  # another process added it first
                    raise
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise

    def for_branch(self, branch: str | None) -> BranchTokenBudget:
        """The same budget, its reservations made for `branch`."""
        return BranchTokenBudget(self.path, name=self.name, branch=branch)

    # -- the cap

    def each_limit(self) -> int | None:
        """The per-branch cap inside the shared limit (None: none)."""
        with self._process_lock():
            row = (
                self._connection()
                .execute("SELECT each_limit FROM token_budget_each WHERE budget = ?", (self.name,))
                .fetchone()
            )
        return None if row is None else int(row[0])

    def set_each(self, each: int | None) -> None:
        """Set (or with None, remove) the per-branch cap; it applies to the next
        reservation of every branch. What a branch holds already stays."""
        with self._transaction() as connection:
            if each is None:
                connection.execute("DELETE FROM token_budget_each WHERE budget = ?", (self.name,))
                return
            each = check_count(each, "each", minimum=1)
            connection.execute(
                "INSERT INTO token_budget_each (budget, each_limit) VALUES (?, ?) "
                "ON CONFLICT(budget) DO UPDATE SET each_limit = excluded.each_limit",
                (self.name, each),
            )

    # -- reservations

    def reserve(self, tokens: int, scope: Mapping[str, ScopeValue] | None = None) -> Reservation:
        """Admit `tokens` for this branch when they fit the shared limit and the branch's
        cap, in one transaction; else record the refusal and raise BudgetExceededError
        naming the branch."""
        tokens = check_count(tokens, "reservation", minimum=1)
        frozen = Scope.of(scope)
        refused: BudgetExceededError | None = None
        ledger_id: int | None = None
        with self._transaction() as connection:
            refused = self._over_cap(connection, tokens)
            if refused is None:
                admitted = connection.execute(
                    "UPDATE token_budget SET reserved = reserved + ?1 WHERE name = ?2 AND "
                    "closed = 0 AND reserved + charged + ?1 <= limit_tokens",
                    (tokens, self.name),
                ).rowcount
                if admitted != 1:
                    refused = self._named(refusal(self._snapshot_of(connection), tokens))
            if refused is not None:  # recorded, and committed, before it is raised
                connection.execute(
                    "INSERT INTO token_budget_refusals "
                    "(budget, branch, tokens, reason, refused_at_ms) VALUES (?, ?, ?, ?, ?)",
                    (self.name, self.branch, tokens, str(refused), time.time_ns() // 1_000_000),
                )
            else:
                cursor = connection.execute(
                    "INSERT INTO token_budget_ledger (budget, reservation, scope, owner_host, "
                    "owner_pid, reserved_at_ms, branch) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        self.name,
                        tokens,
                        frozen.to_json(),
                        self._host,
                        os.getpid(),
                        time.time_ns() // 1_000_000,
                        self.branch,
                    ),
                )
                ledger_id = cursor.lastrowid
        if refused is not None:
            raise refused
        assert ledger_id is not None
        return Reservation(ledger_id, tokens, frozen, self._key)

    def _over_cap(self, connection: sqlite3.Connection, tokens: int) -> BudgetExceededError | None:
        """The refusal when `tokens` more would pass this branch's cap, else None."""
        row = connection.execute(
            "SELECT each_limit FROM token_budget_each WHERE budget = ?", (self.name,)
        ).fetchone()
        if row is None or self.branch is None:
            return None
        each = int(row[0])
        used = int(connection.execute(_BRANCH_USE, (self.name, self.branch)).fetchone()[0])
        if used + tokens <= each:
            return None
        return BudgetExceededError(
            f"branch {self.branch} refused: a reservation of {tokens} tokens does not fit its "
            f"cap of {each} tokens per branch ({used} reserved and charged by it)",
            requested=tokens,
            available=max(0, each - used),
        )

    def _named(self, error: BudgetExceededError) -> BudgetExceededError:
        """The shared budget's refusal, naming the branch it refused."""
        if self.branch is None:
            return error
        return BudgetExceededError(
            f"branch {self.branch} refused: {error}",
            requested=error.requested,
            available=error.available,
        )

    # -- the view

    def branch_figures(self) -> list[BranchFigures]:
        """Each branch's open reservations, charges and refusals, by branch (None last)."""
        with self._process_lock():
            connection = self._connection()
            used = connection.execute(
                "SELECT branch, COALESCE(SUM(CASE WHEN status IS NULL THEN reservation END), 0), "
                "COALESCE(SUM(charge), 0) FROM token_budget_ledger WHERE budget = ? "
                "GROUP BY branch",
                (self.name,),
            ).fetchall()
            refused = dict(
                connection.execute(
                    "SELECT branch, COUNT(*) FROM token_budget_refusals WHERE budget = ? "
                    "GROUP BY branch",
                    (self.name,),
                ).fetchall()
            )
        figures = {row[0]: BranchFigures(row[0], int(row[1]), int(row[2]), 0) for row in used}
        for branch, count in refused.items():
            known = figures.get(branch, BranchFigures(branch, 0, 0, 0))
            figures[branch] = BranchFigures(branch, known.reserved, known.charged, int(count))
        return sorted(figures.values(), key=lambda f: (f.branch is None, f.branch or ""))

    def refusals(self) -> list[Refusal]:
        """Every reservation the budget refused, oldest first."""
        with self._process_lock():
            rows = (
                self._connection()
                .execute(
                    "SELECT id, branch, tokens, reason, refused_at_ms FROM token_budget_refusals "
                    "WHERE budget = ? ORDER BY id",
                    (self.name,),
                )
                .fetchall()
            )
        return [Refusal(int(r[0]), r[1], int(r[2]), str(r[3]), int(r[4])) for r in rows]

    def refusal_count(self) -> int:
        """How many reservations the budget refused."""
        with self._process_lock():
            row = (
                self._connection()
                .execute(
                    "SELECT COUNT(*) FROM token_budget_refusals WHERE budget = ?", (self.name,)
                )
                .fetchone()
            )
        return int(row[0])

    def __reduce__(self) -> Any:
        """Pickling reopens the same file, budget and branch."""
        return (_reopen_branch, (str(self.path), self.name, self.branch))


def _reopen_branch(path: str, name: str, branch: str | None) -> BranchTokenBudget:
    return BranchTokenBudget(path, name=name, branch=branch)

"""Variables added, removed and changed between two namespace captures.

Both sides are what the kernel recorded at capture time (`core.namespace_manifest`): a
variable changed when its digest (a hash of its pickle's chunk names), its type or whether
it could be kept differs. Variables pickled together because they share objects share a
digest, so they change together. Nothing is unpickled.
"""

from __future__ import annotations

from ditto_jupyter.core.models import Variable, VariableChange, VariablesDiff
from ditto_jupyter.core.namespace_manifest import RecordedVariable


def as_variable(recorded: RecordedVariable) -> Variable:
    """The wire form of a recorded variable."""
    return Variable(
        name=recorded.name,
        type=recorded.type,
        summary=recorded.summary,
        size=recorded.size,
        kept=recorded.kept,
        reason=recorded.reason,
        digest=recorded.digest,
    )


def _same(old: RecordedVariable, new: RecordedVariable) -> bool:
    return (old.digest, old.type, old.kept, old.reason) == (
        new.digest,
        new.type,
        new.kept,
        new.reason,
    )


def compare_variables(
    old: dict[str, RecordedVariable] | None, new: dict[str, RecordedVariable] | None
) -> VariablesDiff:
    """What changed from `old` to `new` (None: that side holds no variables to compare)."""
    if old is None or new is None:
        return VariablesDiff(added=[], removed=[], changed=[], unchanged=0, available=False)
    added = [as_variable(new[name]) for name in sorted(new.keys() - old.keys())]
    removed = [as_variable(old[name]) for name in sorted(old.keys() - new.keys())]
    changed: list[VariableChange] = []
    unchanged = 0
    for name in sorted(old.keys() & new.keys()):
        if _same(old[name], new[name]):
            unchanged += 1
        else:
            changed.append(
                VariableChange(name=name, old=as_variable(old[name]), new=as_variable(new[name]))
            )
    return VariablesDiff(added=added, removed=removed, changed=changed, unchanged=unchanged)

"""What the last capture saw, so the next one re-pickles only what a cell can have changed.

An automatic checkpoint follows the one before it: a variable the cell's code cannot have
reached (`cell_effects`), still bound to the very object captured last time, in an alias
group none of whose members changed, keeps its stored component as it is: it is neither
pickled nor fingerprinted again. Everything else is captured as usual, and a recaptured
value that turns out to share an object with a kept group pulls that group back in.

A restore replaces values in place (big arrays are patched, not rebound), so it bumps a
generation: a base from before it is never used after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ditto_jupyter.core.models import UnrestorableValue
from ditto_jupyter.core.namespace_manifest import component_size
from ditto_jupyter.kernel.capture.thread_activity import ThreadActivity

_generation = 0


def namespace_replaced() -> None:
    """A restore changed the namespace behind the captures' back: forget every base."""
    global _generation
    _generation += 1


def current_generation() -> int:
    """The restores so far in this process."""
    return _generation


@dataclass
class CaptureBase:
    """One capture, as the next incremental one needs it.

    `values` holds the captured objects themselves (so a rebinding is seen by identity);
    `components` are the stored component entries (their chunk names are filled in once a
    deferred capture is written); `ids[i]` are the identity-bearing object ids of component
    `i`, and `held[i]` the objects themselves: kept alive, so that no id is reused by a new
    object while this base may be compared with (a pickle's temporaries would otherwise
    free their ids at once, and new objects would seem to share them).
    """

    values: dict[str, object]
    components: list[dict[str, Any]]
    ids: list[set[int]]
    held: list[list[object]]
    unrestorable: dict[str, UnrestorableValue]
    signature: bytes
    generation: int = field(default_factory=current_generation)
    #: Per component: the pods it refers to, and the figures it holds (watched).
    deps: list[set[str]] = field(default_factory=list)
    #: Per variable: the pods it refers to (its own pickle's, or its group's).
    name_deps: dict[str, set[str]] = field(default_factory=dict)
    #: Open figures it pickled as plain values, not pods (they shared a builtin container
    #: with another figure or a variable).
    unpodded: list[Any] = field(default_factory=list)
    figures: list[list[Any]] = field(default_factory=list)
    #: pyplot's figures as pods (`pods.Pod`, pyplot's order), and its open figures.
    pods: list[Any] = field(default_factory=list)
    pyplot_figures: list[tuple[int, Any]] = field(default_factory=list)
    #: Objects two of its pods share: id -> (object, digest, the pod holding it).
    shared: dict[int, tuple[object, bytes, str]] = field(default_factory=dict)
    #: The manifest it was stored as (once stored), and the runtime it names.
    manifest_id: str | None = None
    runtime_id: str | None = None
    #: Every pod's references merged (object id -> pod, memo index), read only.
    pod_refs: dict[int, tuple[str, int]] = field(default_factory=dict)
    #: The change journal's serial and `figure_watch`'s when this capture was taken.
    mark: int = 0
    watch_mark: int = 0
    #: What could run behind the cells' back when it was taken (threads with their run
    #: counts, tasks): the next capture follows it only if none of that ran since.
    foreign: ThreadActivity = field(default_factory=ThreadActivity)
    #: The library objects (`library_held`) its components hold: id -> (object, digest).
    library: dict[int, tuple[object, bytes]] = field(default_factory=dict)

    def usable(self) -> bool:
        """Whether no restore has happened since this capture."""
        return self.generation == _generation


#: The largest component (stream and buffers, bytes) kept for its other members when some
#: of its names were bound anew: the old values of those names stay alive with it (the
#: capture base holds what its streams hold), so at most this much is held back.
PARTLY_KEPT_MAX = 8 * 1024 * 1024


@dataclass
class Reuse:
    """What an incremental capture keeps from its base, and what it captures again."""

    kept: list[int]  # indexes of the base's components kept (their streams as they are)
    recapture: set[str]  # names pickled again
    unrestorable: dict[str, UnrestorableValue]  # kept entries of names not recaptured
    #: Kept components some of whose names were bound anew: index -> those names (their
    #: old values stay in the stream, unbound on restore; `without_names`).
    unbound: dict[int, set[str]] = field(default_factory=dict)


def plan_reuse(
    base: CaptureBase,
    values: dict[str, object],
    touched: Iterable[str],
    always: Iterable[str],
    dirty_components: Iterable[int] = (),
    rebound: Iterable[str] = (),
) -> Reuse:
    """Which of `base`'s components stay: none with a member that is touched, new, rebound
    or gone, or in `always`, nor any of `dirty_components` (by index). But a component
    whose only such members are in `rebound` (touched names the cells bound anew before
    reading them: nothing reached their old values through them) stays for its other
    members, when it is small (`PARTLY_KEPT_MAX`): the rebound names are captured anew on
    their own, and a new value that reaches the kept stream's objects pulls it back in
    (`pulled_back`), as for any kept component."""
    dirty = {name for name in touched if name in values or name in base.values}
    dirty.update(always)
    for name, value in values.items():
        if name not in base.values or base.values[name] is not value:
            dirty.add(name)
    dirty.update(name for name in base.values if name not in values)
    dropped = set(dirty_components)
    for i in dropped:
        dirty.update(n for n in base.components[i]["names"] if n in values)
    bound_anew = {name for name in rebound if name in values and name in base.values}
    bound_anew -= set(always)
    kept: list[int] = []
    unbound: dict[int, set[str]] = {}
    for i, component in enumerate(base.components):
        if i in dropped:
            continue
        changed = {name for name in component["names"] if name in dirty}
        if not changed:
            kept.append(i)
        elif (
            changed <= bound_anew
            and len(changed) < len(component["names"])
            and not component.get("pod")
            and component_size(component) <= PARTLY_KEPT_MAX
        ):
            kept.append(i)
            unbound[i] = changed
    held = {
        name for i in kept for name in base.components[i]["names"] if name not in unbound.get(i, ())
    }
    unrestorable = {
        name: entry
        for name, entry in base.unrestorable.items()
        if name not in dirty and name in values
    }
    recapture = {name for name in values if name not in held and name not in unrestorable}
    return Reuse(kept, recapture, unrestorable, unbound)


#: The entries of a component that are keyed by its names.
_BY_NAME = ("types", "summaries", "digests", "pending_digests")


def without_names(component: dict[str, Any], gone: set[str]) -> dict[str, Any]:
    """A kept component's entry for its members other than `gone`: the same stream and
    buffers, and `slots`, each remaining name's place among the values the stream loads
    (a restore loads all of them and binds these only)."""
    names = component["names"]
    slots = component.get("slots") or list(range(len(names)))
    staying = [j for j, name in enumerate(names) if name not in gone]
    entry = {
        **component,
        "names": [names[j] for j in staying],
        "slots": [slots[j] for j in staying],
    }
    for key in _BY_NAME:
        if key in component:
            entry[key] = {n: v for n, v in component[key].items() if n not in gone}
    return entry


def pulled_back(base: CaptureBase, kept: list[int], ids: dict[str, set[int]]) -> list[int]:
    """The kept components that share an identity-bearing object with a recaptured value.

    In time linear in what was recaptured, not in what is kept: a no-op capture recaptures
    nothing and looks at nothing (`isdisjoint` walks the smaller of its two sets)."""
    recaptured: set[int] = set().union(*ids.values())
    if not recaptured:
        return []
    return [i for i in kept if not base.ids[i].isdisjoint(recaptured)]

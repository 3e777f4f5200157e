"""What one capture pickles, and how: pods first, then the variables, grouped by aliasing.

`CapturePlan.pickle` decides, from the capture before (`incremental.CaptureBase`) and what
may have changed since (the names the journal says were touched, the figures pyplot made
current, the figures `figure_watch` saw change), which pods and which components are
kept as stored and which are pickled again, then pickles those: each figure pod alone,
then each variable alone but never an object again that an earlier pickle holds (`stop_at`)
or that a pod holds (a reference into it). Kept streams are neither pickled nor read.

A pod pickled again moves its objects' memo indexes, so every stream that refers to it is
pickled again too; a variable found to refer to a kept pod (it may have changed the pod's
objects) makes that pod be pickled again, and the planning starts over (each round pickles
more, so it ends).
"""

from __future__ import annotations

import itertools
import operator
import os
import sys
from typing import Any, NamedTuple

from ditto_jupyter.core.models import UnrestorableValue
from ditto_jupyter.kernel.capture import figure_watch, pyplot_state
from ditto_jupyter.kernel.capture.atoms import MEMO_OBJECT, Atoms
from ditto_jupyter.kernel.capture.chunks import ChunkWriter
from ditto_jupyter.kernel.capture.incremental import (
    CaptureBase,
    plan_reuse,
    pulled_back,
    without_names,
)
from ditto_jupyter.kernel.capture.library_data import LIBRARY
from ditto_jupyter.kernel.capture.library_held import changed_library_objects, shared_digest
from ditto_jupyter.kernel.capture.pickling import (
    Pickled,
    components,
    identity_ids,
    pickle_values,
)
from ditto_jupyter.kernel.capture.pods import (
    Pod,
    PodConflict,
    index_pod,
    pod_name,
    sharing_pods,
)
from ditto_jupyter.kernel.capture.rules import failure_reason, type_name
from ditto_jupyter.kernel.capture.storing import component_pickles, figures_of, store_component
from ditto_jupyter.kernel.capture.summaries import own_digests, with_component_digests

PYPLOT = pyplot_state.PYPLOT_FIGURES
#: The most planning rounds (each pickles more pods again) before giving up on pods.
MAX_ROUNDS = 8


class _Decision(NamedTuple):
    """What `CapturePlan._decide` found may have changed since the base, and what stays."""

    dirty_pods: set[str]  # pods to pickle again
    kept: list[int]  # the base's components kept (by index)
    recapture: set[str]  # names to pickle again
    unrestorable: dict[str, UnrestorableValue]  # kept entries of names not pickled again
    old_pods: dict[str, Pod]  # pods kept as stored
    unbound: dict[int, set[str]]  # kept components some of whose names were bound anew


class CapturePlan:
    """The pickles of one capture: its pods, its kept and its new variable components."""

    def __init__(
        self,
        namespace: dict[str, object],
        values: dict[str, object],
        open_figures: list[tuple[int, Any]],
        *,
        watch_mark: int,
        pods: bool = True,
        unpodded: set[int] | None = None,
    ) -> None:
        self.namespace = namespace
        self.values = values
        self.open_figures = open_figures
        self.watch_mark = watch_mark
        #: Ids of open figures pickled as plain values, not as pods (they share a builtin
        #: container with another figure or a variable).
        self.unpodded = unpodded or set()
        self.use_pods = pods and any(id(f) not in self.unpodded for _, f in open_figures)
        self.atoms = Atoms(namespace)
        self.pods: list[Pod] = []
        self.unrestorable: list[UnrestorableValue] = []
        self.kept: list[dict[str, Any]] = []
        self.kept_ids: list[set[int]] = []
        self.kept_held: list[list[object]] = []
        self.kept_deps: list[set[str]] = []
        #: The pods each variable refers to (its own reach where it was pickled whole
        #: alone, its component's else): a cell that touched it can have changed only those.
        self.name_deps: dict[str, set[str]] = {}
        self.pyplot_reach: set[str] | None = None
        #: Objects two figures share (one pod's, another's borrowed): id -> (object, its
        #: digest now, the pod holding it), and the pods whose such objects are new.
        self.shared: dict[int, tuple[object, bytes, str]] = {}
        self._digests: dict[int, bytes] = {}
        self.newly_shared: set[str] = set()
        self.kept_figures: list[list[Any]] = []
        self.singles: dict[str, Pickled] = {}
        self.partial: dict[str, Pickled] = {}
        #: Digests of the names pickled with others, each as first pickled alone.
        self.own_digests: dict[str, str] = {}
        self.ids: dict[str, set[int]] = {}
        self.held: dict[str, list[object]] = {}
        self.owners: dict[str, set[int]] = {}
        self.components: list[list[str]] = []
        self.refs: dict[int, tuple[str, int]] = {}
        #: Digests of library objects (`library_held`) taken in this capture, by id.
        self.library_memo: dict[int, bytes] = {}
        #: Kept components some of whose names were bound anew (`Reuse.unbound`).
        self.unbound: dict[int, set[str]] = {}
        self._library: set[int] | None = None

    # ---- deciding and pickling ---------------------------------------------------------

    def pickle(
        self,
        base: CaptureBase | None,
        touched: set[str],
        reached: list[Any],
        fresh: set[str] | None = None,
    ) -> None:
        """Pickle what may have changed since `base` (None: everything); `fresh`: touched
        names bound anew before any read (nothing reached their old values through them)."""
        forced: set[str] = set()
        for _ in range(MAX_ROUNDS):
            again = self._round(base, touched, reached, forced, fresh or set())
            if not again:
                return
            forced |= again
        raise PodConflict("the pods kept changing hands")  # then a capture without pods

    def _round(
        self,
        base: CaptureBase | None,
        touched: set[str],
        reached: list[Any],
        forced: set[str],
        fresh: set[str],
    ) -> set[str]:
        """One planning round; the kept pods found to need pickling again (empty: done)."""
        self.pods, self.unrestorable = [], []
        order = (
            [(pod_name(n), f) for n, f in self.open_figures if id(f) not in self.unpodded]
            if self.use_pods
            else []
        )
        names = {name for name, _ in order}
        recapture = set(self.values)
        dirty_pods = {name for name, _ in order}
        kept: list[int] = []
        failed_before: dict[str, UnrestorableValue] = {}
        old_pods: dict[str, Pod] = {}
        suspects: set[str] = set()  # values the cells since may have used to reach a pod
        if base is not None:
            decision = self._decide(base, touched, reached, order, forced, fresh)
            dirty_pods, kept, recapture = decision.dirty_pods, decision.kept, decision.recapture
            failed_before, old_pods = decision.unrestorable, decision.old_pods
            self.unbound = decision.unbound
            suspects = {
                name
                for name, value in self.values.items()
                if name != PYPLOT
                and (name in touched or name not in base.values or base.values[name] is not value)
            }
        self._pickle_pods(order, dirty_pods, old_pods, base)
        if self.newly_shared:  # kept pods whose object a figure pickled now shares: again
            return self.newly_shared
        while True:
            chosen = {name: self.values[name] for name in self.values if name in recapture}
            attempt: list[UnrestorableValue] = []
            self._pickle_singles(chosen, attempt)
            pickles = {**self.singles, **self.partial}
            if self.use_pods:
                shared = [
                    p.figure
                    for ids in self.ids.values()
                    for p in sharing_pods(ids, self.pods, self.namespace)
                ]
                if shared:
                    raise PodConflict("a builtin container is shared with a figure", shared)
            again = {
                pod
                for name, p in pickles.items()
                if name in suspects
                for pod in p.pods_used
                if pod not in dirty_pods
            } & names
            if again:
                return again
            self.held, self.owners = _identity_objects(pickles, self.ids)
            own = self._own_ids(self.ids)  # what ties names into components, once per pass
            library = self._library_ids()
            reach = {
                name: found | (self.owners[name] - library) if self.owners.get(name) else found
                for name, found in own.items()
            }
            back = pulled_back(base, kept, reach) if base is not None else []
            if not back:
                break
            assert base is not None
            kept = [i for i in kept if i not in back]
            for i in back:
                recapture.update(n for n in base.components[i]["names"] if n in self.values)
        self.unrestorable = [*attempt, *failed_before.values()]
        self.name_deps = {}
        if base is not None:
            self.kept = [
                without_names(base.components[i], self.unbound[i])
                if i in self.unbound
                else base.components[i]
                for i in kept
            ]
            self.kept_ids = [base.ids[i] for i in kept]
            self.kept_held = [base.held[i] for i in kept]
            self.kept_deps = [base.deps[i] for i in kept]
            self.name_deps = {
                name: base.name_deps[name]
                for component in self.kept
                for name in component["names"]
                if name in base.name_deps
            }
            self.kept_figures = [base.figures[i] for i in kept]
        self.components = components(list(self.ids), own)
        self._reaches()
        self._share_digests()
        together = [n for component in self.components if len(component) > 1 for n in component]
        self.own_digests = own_digests({**self.singles, **self.partial}, together)
        self.partial.clear()  # kept until grouped: their memos keep the objects they name
        return set()

    def _own_ids(self, ids: dict[str, set[int]]) -> dict[str, set[int]]:
        """`ids` without the library's objects (`library_data`): two values that refer to
        one of them (the unit path every circle marker draws) are not one component for
        it; each component keeps its own copy, as a pod does (a pickle never kept their
        identity with the live library), and its digest tells when the library changed it."""
        library = self._library_ids()
        return {name: found - library for name, found in ids.items()}

    def _library_ids(self) -> set[int]:
        """Ids of the library's objects and containers, gathered once per capture (one set:
        a difference with it walks the smaller side only)."""
        if self._library is None:
            self._library = LIBRARY.ids(self.namespace)
        return self._library

    def _digest(self, object_id: int, shared: object) -> bytes:
        """The digest of an object figures share, taken once per capture (an object that
        cannot be pickled alone digests to a new value each time: always changed)."""
        digest = self._digests.get(object_id)
        if digest is None:
            digest = shared_digest(shared) or os.urandom(16)
            self._digests[object_id] = digest
        return digest

    def _share_digests(self) -> None:
        """The objects of a pod that a later pod refers to, each with its digest and the
        pod holding it (a variable that refers into a pod is the journal's to follow)."""
        self.shared = {}
        for pod in self.pods:
            for object_id, shared in pod.borrowed.items():
                holder = _holder(self.pods, object_id)
                if holder is not None and object_id not in self.shared:
                    self.shared[object_id] = (shared, self._digest(object_id, shared), holder)

    def _reaches(self) -> None:
        """Each new variable's pods (`name_deps`): its own pickle's, where it was pickled
        whole alone; else its component's (what it stopped at is held by the component's others).
        pyplot's list refers to every pod by listing it: its reach is that of the figures
        it holds as plain values only (`pyplot_reach`)."""
        reach = {n: set(p.pods_used) for n, p in {**self.singles, **self.partial}.items()}
        if PYPLOT in reach and self.pyplot_reach is not None:
            reach[PYPLOT] = self.pyplot_reach
        for component in self.components:
            together: set[str] = set().union(*(reach.get(n, set()) for n in component))
            for name in component:
                single = name in self.singles and name != PYPLOT
                self.name_deps[name] = reach[name] if single else together

    def _decide(
        self,
        base: CaptureBase,
        touched: set[str],
        reached: list[Any],
        order: list[tuple[str, Any]],
        forced: set[str],
        fresh: set[str],
    ) -> _Decision:
        """Which pods and base components may have changed; the rest is kept."""
        reached_ids = {id(figure) for figure in reached}

        def changed(figure: Any) -> bool:
            return id(figure) in reached_ids or figure_watch.changed_since(figure, base.watch_mark)

        by_figure = {id(pod.figure): pod for pod in base.pods}
        old_pods: dict[str, Pod] = {}
        dirty_pods = set(forced)
        position = {name: index for index, (name, _) in enumerate(order)}
        for name, figure in order:
            old = by_figure.get(id(figure))
            if (
                old is None
                or old.name != name
                or old.animated
                or changed(figure)
                # it must load after every pod it refers to (pyplot's order may have moved)
                or any(position.get(dep, len(order)) >= position[name] for dep in old.deps)
            ):
                dirty_pods.add(name)
            else:
                old_pods[name] = old
        # an object two figures share can have changed through either of them, or by the
        # library itself (matplotlib's cached unit paths, which `bar` writes into): a
        # digest of it that moved makes the pod holding it be pickled again
        for object_id, (shared, digest, owner) in base.shared.items():
            if owner in position and self._digest(object_id, shared) != digest:
                dirty_pods.add(owner)
        pod_figures = {id(figure) for _, figure in order}
        dirty_components = {
            i
            for i, figures in enumerate(base.figures)
            if any(id(f) in pod_figures or changed(f) for f in figures)
        }
        # a library object a component holds can have changed though no cell named it
        dirty_components.update(
            i
            for i, ids in enumerate(base.ids)
            if changed_library_objects(self.namespace, ids, base.library, self.library_memo)
        )
        names = {name for name, _ in order}
        # the pods a variable the cells can have read through its old value, or a gone one,
        # refers to: the cells may have changed their objects through it (a name bound anew
        # before any read reached nothing of its old value; pyplot's list is ours, opening a
        # figure changes none)
        component_of = {n: i for i, c in enumerate(base.components) for n in c["names"]}
        gone_or_rebound = {
            name
            for name, value in base.values.items()
            if name not in self.values or (name not in touched and self.values[name] is not value)
        }
        for name in ((touched - fresh) | gone_or_rebound) & component_of.keys():
            if name != PYPLOT:
                i = component_of[name]
                dirty_pods |= base.name_deps.get(name, base.deps[i]) & names
        while True:  # pods referring to a pod pickled again are pickled again
            more = {
                name
                for name, _ in order
                if name not in dirty_pods
                and (old := old_pods.get(name)) is not None
                and old.deps & dirty_pods
            }
            if not more:
                break
            dirty_pods |= more
        for name in dirty_pods:
            old_pods.pop(name, None)
        for i, deps in enumerate(base.deps):  # and so is every stream referring to one
            if deps & dirty_pods or deps - names:
                dirty_components.add(i)
        reuse = plan_reuse(base, self.values, touched, [], dirty_components, rebound=fresh)
        return _Decision(
            dirty_pods, reuse.kept, reuse.recapture, reuse.unrestorable, old_pods, reuse.unbound
        )

    def _pickle_pods(
        self,
        order: list[tuple[str, Any]],
        dirty: set[str],
        old_pods: dict[str, Pod],
        base: CaptureBase | None,
    ) -> None:
        """Each pod in pyplot's order: kept as stored, or pickled referring to the pods
        before it. A kept pod holding an object of one pickled now is pickled again. The
        pods' references (`refs`) are merged once (dict.update: a figure holds 100,000s of
        objects), and not at all when every pod is the capture before's."""
        refs: dict[int, tuple[str, int]] = {}
        merged = 0  # self.pods[:merged] are in `refs`
        pending = set(dirty)
        self.newly_shared = set()
        known = base.shared if base is not None else {}
        for name, figure in order:
            old = old_pods.get(name)
            if name not in pending and old is not None:
                pod = old
            else:
                for earlier in self.pods[merged:]:
                    refs.update(earlier.refs)
                merged = len(self.pods)
                try:
                    pickled = pickle_values(
                        self.namespace, [figure], pod_refs=refs, probe_animated=True
                    )
                except Exception as error:  # an unpicklable figure: a plain value this time
                    raise PodConflict(
                        f"figure {name} could not be pickled alone", [figure]
                    ) from error
                pod = Pod(name, figure, pickled)
                index_pod(pod, self.atoms)
                others = [*self.pods, *(p for n, p in old_pods.items() if n not in pending)]
                shared = sharing_pods(
                    pod.containers, [p for p in others if p.name != name], self.namespace
                )
                if shared:
                    raise PodConflict(
                        f"{name} shares a builtin container with another figure",
                        [figure, *(p.figure for p in shared)],
                    )
                # a kept pod whose object this one shares for the first time: the cell may
                # have changed it through this figure (no digest of it to tell)
                self.newly_shared.update(
                    holder
                    for object_id in pod.borrowed
                    if object_id not in known
                    and (holder := _holder(self.pods, object_id)) is not None
                    and holder not in pending
                    and holder in old_pods
                )
                for later_name, _ in order:  # kept pods holding this one's objects
                    later = old_pods.get(later_name)
                    if (
                        later is not None
                        and later_name not in pending
                        and any(object_id in later.refs for object_id in pod.refs)
                    ):
                        pending.add(later_name)
                _watch(pickled)
            self.pods.append(pod)
        kept_all = base is not None and len(base.pods) == len(self.pods)
        if base is not None and kept_all and all(map(operator.is_, base.pods, self.pods)):
            self.refs = base.pod_refs
            return
        for earlier in self.pods[merged:]:
            refs.update(earlier.refs)
        self.refs = refs

    def _pickle_singles(self, values: dict[str, object], unrestorable: list[Any]) -> None:
        """Pickle each value alone, but never an object again that an earlier pickle holds
        (the axes of a figure pyplot holds) or that a pod holds: a value held by an earlier
        pickle belongs to its component and is not pickled; a value that reaches such
        objects is pickled up to them only, which is enough to group it with them (its
        component's pickle continues the earlier one). pyplot's list goes first."""
        atoms = self.atoms
        refs = self.refs or None
        self.singles, self.partial, self.ids = {}, {}, {}
        self.pyplot_reach = None
        reached: set[int] = set()  # the identity-bearing objects the pickles so far hold
        # each pickle keeps its own copy of the library's objects (`_own_ids`)
        library = self._library_ids()
        for name in sorted(values, key=lambda n: n != PYPLOT):
            value = values[name]
            if id(value) in reached:  # held by an earlier pickle: one component
                self.ids[name] = {id(value)}
                continue
            try:
                extract = name in _EXTRACTED_LAST_TIME
                pickled = pickle_values(
                    self.namespace, [value], reached or None, extract=extract, pod_refs=refs
                )
            except Exception as error:
                reason = failure_reason(error)
                unrestorable.append(
                    UnrestorableValue(name=name, type=type_name(value), reason=reason)
                )
                continue
            found = identity_ids(pickled, atoms) | pickled.stopped
            if refs is not None:
                found = {object_id for object_id in found if object_id not in refs}
            self.ids[name] = found
            reached.update(found - library)
            _watch(pickled)
            (self.partial if pickled.stopped else self.singles)[name] = pickled
            if name == PYPLOT and refs is not None:
                self.pyplot_reach = self._plain_figures_reach(refs)
        _EXTRACTED_LAST_TIME.difference_update(values)
        _EXTRACTED_LAST_TIME.update(n for n, p in self.singles.items() if p.extracted)

    def _plain_figures_reach(self, refs: dict[int, tuple[str, int]]) -> set[str] | None:
        """The pods the open figures pickled as plain values refer to (None: unknown)."""
        plain = [f for _, f in self.open_figures if id(f) in self.unpodded]
        if not plain:
            return set()
        try:
            return set(pickle_values(self.namespace, [plain], pod_refs=refs).pods_used)
        except Exception:  # pickled in pyplot's list all the same: its reach is all it refers to
            return None

    # ---- storing -----------------------------------------------------------------------

    def store_pod(self, writer: ChunkWriter, pod: Pod) -> dict[str, Any]:
        """The stored entry of a pod pickled now."""
        assert pod.pickled is not None
        component = store_component(writer, [pod.name], {pod.name: pod.figure}, pod.pickled)
        component["pod"] = True
        if pod.deps:
            component["pods"] = sorted(pod.deps)
        return component

    def store_components(
        self, writer: ChunkWriter, unrestorable: list[UnrestorableValue]
    ) -> tuple[
        list[dict[str, Any]], list[set[int]], list[list[object]], list[set[str]], list[list[Any]]
    ]:
        """Store each new component; the entries and, per entry, its identity ids, the
        objects it holds, the pods it refers to and the figures it holds."""
        entries: list[dict[str, Any]] = []
        ids: list[set[int]] = []
        held: list[list[object]] = []
        deps: list[set[str]] = []
        figures: list[list[Any]] = []
        for names_together in self.components:
            for names, pickled in component_pickles(
                self.namespace, names_together, self.values, self.singles, unrestorable
            ):
                component = with_component_digests(
                    store_component(writer, names, self.values, pickled), self.own_digests
                )
                used = set(pickled.pods_used).union(
                    *(self.singles[n].pods_used for n in names if n in self.singles)
                )
                if used:
                    component["pods"] = sorted(used)
                entries.append(component)
                reached = (self.ids.get(n, set()) | self.owners.get(n, set()) for n in names)
                ids.append(set().union(*reached))
                held.append([obj for n in names for obj in self.held.get(n, ())])
                deps.append(used)
                figures.append(figures_of(pickled, names, self.singles))
        return entries, ids, held, deps, figures

    def release(self) -> None:
        """Let go of the pickles (their memos keep temporaries alive)."""
        self.singles.clear()
        for pod in self.pods:
            if pod.pickled is not None:
                pod.pickled.pickler = pod.pickled.out = None
                pod.pickled.memo = {}


def _holder(pods: list[Pod], object_id: int) -> str | None:
    """The pod that pickled an object by value (the others that hold it borrowed it)."""
    for pod in pods:
        if object_id in pod.refs and object_id not in pod.borrowed:
            return pod.name
    return None


def _watch(pickled: Pickled) -> None:
    for figure in pickled.figures:
        figure_watch.watch(figure_watch.root_figure(figure))


def _identity_objects(
    pickles: dict[str, Pickled], ids: dict[str, set[int]]
) -> tuple[dict[str, list[object]], dict[str, set[int]]]:
    """For each name, the identity-bearing objects its pickle holds (an incremental capture
    keeps them alive with the ids it remembers, so no id can be reused by a new object),
    and the ids of the objects owning the memory of the numpy arrays among them: a view
    (`g = f[10:20]`) pickles as a copy, so only this shows that writing through it changes
    `f` (an incremental capture must then take `f` again too)."""
    numpy = sys.modules.get("numpy")
    ndarray = numpy.ndarray if numpy is not None else None
    held: dict[str, list[object]] = {}
    owners: dict[str, set[int]] = {}
    for name, pickled in pickles.items():
        memo, mine = pickled.memo, ids.get(name, set())
        objects = list(
            map(MEMO_OBJECT, itertools.compress(memo.values(), map(mine.__contains__, memo)))
        )
        held[name] = objects
        found: set[int] = set()
        if ndarray is not None:  # the arrays picked out at C speed (100,000s of objects)
            kinds = list(map(type, objects))
            arrays = {kind for kind in set(kinds) if issubclass(kind, ndarray)}
            for obj in itertools.compress(objects, map(arrays.__contains__, kinds)):
                if obj.base is not None:
                    root = obj
                    while isinstance(root, ndarray) and root.base is not None:
                        root = root.base
                    found.add(id(root))
                    objects.append(root)
        owners[name] = found
    return held, owners


#: The names whose pickle took big bytes objects out of band in this process's last capture:
#: the next one does so in its first pass.
_EXTRACTED_LAST_TIME: set[str] = set()

"""pyplot's open figures as pods: each figure pickled in a stream of its own.

A notebook that leaves figures open holds most of its objects in them, and every variable
that reaches a figure (`fig`, `ax`, `line`, pyplot's own list) would otherwise tie them all
into one component, pickled again whenever any of them changes. Instead each open figure
is a *pod* (the idea of Chipmink, VLDB 2026: split the object graph, save only the parts
that changed), pickled alone, first, in pyplot's order. Its pickler's memo says which
object sits at which memo index; every later stream (a later pod, a variable, pyplot's
list) refers to an object a pod holds by `(pod, index)` (`pickling._pod_object`) instead of
pickling it again, so `ax is fig.axes[0]` and `fig is plt.gcf()` survive a restore, which
loads the pods first. An unchanged figure is neither pickled nor read again: its pod, and
every stream that refers to it, is kept from the capture before (see `figure_watch` and
`journal` for what "unchanged" takes).

Only mutable objects other than builtin containers can be referred to this way (the
pickler consults its reducer for nothing else). A list, dict or set that a pod holds and
something outside it holds too (`texts = fig.texts`) cannot be, so such a capture gives up
pods for the figures concerned: they are pickled as plain values, grouped with what shares
their containers, while every other figure stays a pod (`CapturePlan`'s `unpodded`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ditto_jupyter.core.namespace_manifest import POD_NAME_PREFIX
from ditto_jupyter.kernel.capture.atoms import Atoms
from ditto_jupyter.kernel.capture.library_data import BUILTIN_CONTAINERS, LIBRARY
from ditto_jupyter.kernel.capture.pickling import Pickled

#: The component name of the pod of pyplot's figure number N.
POD_PREFIX = POD_NAME_PREFIX


def pod_name(number: int) -> str:
    """`<pyplot figure 3>`: the name a pod's component is stored under."""
    return f"{POD_PREFIX}{number}>"


def is_pod_name(name: str) -> bool:
    """Whether a component name is a pod's (not a variable's)."""
    return name.startswith(POD_PREFIX)


class PodConflict(Exception):
    """A builtin container is shared between a pod and something outside it. `figures`
    holds the figures concerned (none: all of them): the capture is planned again with
    those as plain values, grouped with what shares their containers."""

    def __init__(self, message: str, figures: Iterable[Any] = ()) -> None:
        super().__init__(message)
        self.figures = list(figures)


@dataclass
class Pod:
    """One figure's pickle, as the streams after it and the next capture need it."""

    name: str
    figure: Any
    pickled: Pickled | None  # None when kept from the capture before
    component: dict[str, Any] | None = None  # its stored entry, once stored
    #: Its identity-bearing objects other streams refer to: id -> (pod, memo index).
    refs: dict[int, tuple[str, int]] = field(default_factory=dict)
    containers: set[int] = field(default_factory=set)  # ids of builtin containers inside
    held: list[Any] = field(default_factory=list)  # keeps those ids from being reused
    deps: set[str] = field(default_factory=set)  # the pods it refers to
    #: The objects of earlier pods it refers to (by id): shared across figures' edges.
    borrowed: dict[int, Any] = field(default_factory=dict)
    animated: bool = False
    #: `containers` less the library's (`library_data`), found the first time asked.
    own_containers: set[int] | None = None

    def notebook_containers(self, notebook: dict[str, object]) -> set[int]:
        """The builtin containers it holds that are not the library's (each pod may carry
        its own copy of those: a pickle never kept their identity with the live library)."""
        if self.own_containers is None:
            self.own_containers = self.containers - LIBRARY.containers(notebook)
        return self.own_containers


def index_pod(pod: Pod, atoms: Atoms) -> None:
    """Fill a freshly pickled pod's references from its pickler's memo (once per pod)."""
    assert pod.pickled is not None
    refs: dict[int, tuple[str, int]] = {}
    containers: set[int] = set()
    riders: set[int] = set()
    held: list[Any] = []
    atomic = atoms.atomic_classes
    for object_id, (index, obj) in pod.pickled.memo.items():
        kind = type(obj)
        if kind in BUILTIN_CONTAINERS:
            containers.add(object_id)
            held.append(obj)
        elif kind not in atomic:
            riding = atoms.riders_if_atomic(obj)
            if riding is None:
                refs[object_id] = (pod.name, index)
                held.append(obj)
            else:
                riders.update(riding)
    pod.refs, pod.containers, pod.held = refs, containers - riders, held
    pod.deps = set(pod.pickled.pods_used)
    pod.borrowed = dict(pod.pickled.pod_objects)
    pod.animated = pod.pickled.animated


def sharing_pods(ids: set[int], pods: list[Pod], notebook: dict[str, object]) -> list[Pod]:
    """The pods holding a builtin container among `ids` (a pickle's identity ids) that is
    not the library's (`library_data`, asked only when some container is shared)."""
    found = [pod for pod in pods if not ids.isdisjoint(pod.containers)]
    return [pod for pod in found if not ids.isdisjoint(pod.notebook_containers(notebook))]


def same_figures(before: list[tuple[int, Any]], now: list[tuple[int, Any]]) -> bool:
    """Whether pyplot holds the same figures under the same numbers in the same order."""
    return len(before) == len(now) and all(
        a[0] == b[0] and a[1] is b[1] for a, b in zip(before, now, strict=True)
    )

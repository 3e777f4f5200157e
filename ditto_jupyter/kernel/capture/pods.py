"""pyplot's open figures as pods: each figure pickled in a stream of its own.

A notebook that leaves figures open holds most of its objects in them, and every variable
that reaches a figure (`fig`, `ax`, `line`, pyplot's own list) would otherwise tie them all
into one alias group, pickled again whenever any of them changes. Instead each open figure
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

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ditto_jupyter.core.namespace_manifest import POD_NAME_PREFIX
from ditto_jupyter.kernel.capture.atoms import Atoms
from ditto_jupyter.kernel.capture.pickling import Pickled

#: The component name of the pod of pyplot's figure number N.
POD_PREFIX = POD_NAME_PREFIX
#: Exact types the pickler never asks its reducer about: a pod cannot lend them out.
BUILTIN_CONTAINERS = frozenset({dict, list, set, bytearray})


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
    #: `containers` less the library's (`library_containers`), found the first time asked.
    own_containers: set[int] | None = None

    def notebook_containers(self) -> set[int]:
        """The builtin containers it holds that are not the library's."""
        if self.own_containers is None:
            self.own_containers = self.containers - library_containers()
        return self.own_containers


def library_containers() -> set[int]:
    """Ids of builtin containers that are matplotlib's own data: its configuration
    (`rcParams` values, such as the `path.effects` list every artist holds) and the
    containers its modules and classes hold (the colour tables every colormap of a name
    shares). The library's, never the notebook's to change in place, so each pod may carry
    its own copy (a pickle never kept their identity with the live library either)."""
    configuration, data = library_container_parts()
    return configuration | data


def library_container_parts() -> tuple[set[int], set[int]]:
    """`library_containers` in its two parts: the configuration's (a new set each call)
    and the modules' (one set, kept, that only grows as modules are walked)."""
    matplotlib = sys.modules.get("matplotlib")
    found: set[int] = set()
    for name in ("rcParams", "rcParamsDefault", "rcParamsOrig"):
        params = getattr(matplotlib, name, None)
        if isinstance(params, dict):
            found.update(id(v) for v in dict.values(params) if type(v) in BUILTIN_CONTAINERS)
    return found, _module_data()


#: Packages whose modules' containers `library_containers` counts as library data.
LIBRARY_DATA_PACKAGES = ("matplotlib", "mpl_toolkits")
#: The most containers one walk of their modules visits (it stops there: fewer are exempt).
LIBRARY_DATA_LIMIT = 200_000
#: Exact types the walk looks inside (builtin containers, tuples of them).
_WALKED = frozenset({dict, list, set, frozenset, tuple})
#: Library classes whose instances the walk looks inside too: the colormap registry and
#: the colormaps it holds (a colormap fetched by name is a shallow copy: it shares their
#: segment data and colour lists).
_DATA_HOLDERS = (("matplotlib.cm", "ColormapRegistry"), ("matplotlib.colors", "Colormap"))


class _ModuleData:
    """The containers of the library's modules, each module walked once (when it is first
    seen loaded). The containers themselves are kept, so no id in `ids` can be reused by a
    notebook's object."""

    def __init__(self) -> None:
        self.module_count = -1
        self.walked: set[str] = set()
        self.held: list[object] = []
        self.ids: set[int] = set()


_data = _ModuleData()


def _module_data() -> set[int]:
    """Ids of the builtin containers held by the globals of matplotlib's loaded modules and
    by the classes they define, and inside its colormaps (see `_DATA_HOLDERS`). A module
    is walked once, the first time it is seen loaded: what a library adds later is not
    counted (its containers then make a capture give up pods, as before)."""
    if len(sys.modules) == _data.module_count:
        return _data.ids
    _data.module_count = len(sys.modules)
    new = [
        name
        for name in list(sys.modules)
        if name.partition(".")[0] in LIBRARY_DATA_PACKAGES and name not in _data.walked
    ]
    if not new:
        return _data.ids
    holders = tuple(
        cls
        for module, attribute in _DATA_HOLDERS
        if isinstance(cls := getattr(sys.modules.get(module), attribute, None), type)
    )
    walked: dict[type, bool] = dict.fromkeys(_WALKED, True)  # by exact type: look inside?

    def inside(value: object) -> bool:
        kind = type(value)
        verdict = walked.get(kind)
        if verdict is None:
            verdict = walked[kind] = issubclass(kind, holders)
        return verdict

    pending: list[object] = []
    for name in new:
        _data.walked.add(name)
        namespace = getattr(sys.modules.get(name), "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for value in list(namespace.values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                pending.extend(v for v in list(vars(value).values()) if type(v) in _WALKED)
            elif inside(value):
                pending.append(value)
    seen = {id(obj) for obj in _data.held}
    while pending and len(seen) < LIBRARY_DATA_LIMIT:
        value = pending.pop()
        kind = type(value)
        if id(value) in seen:
            continue
        seen.add(id(value))
        _data.held.append(value)
        if kind in BUILTIN_CONTAINERS:
            _data.ids.add(id(value))
        members: list[object]
        if kind is dict:
            members = [*dict.keys(value), *dict.values(value)]  # type: ignore[arg-type]
        elif kind in _WALKED:
            members = list(value)  # type: ignore[call-overload]
        else:  # a colormap or the registry: its attributes
            members = [getattr(value, "__dict__", None)]
        pending.extend(m for m in members if inside(m))
    return _data.ids


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


def sharing_pods(ids: set[int], pods: list[Pod]) -> list[Pod]:
    """The pods holding a builtin container among `ids` (a pickle's identity ids) that is
    not the library's (`library_containers`, walked only when some container is shared)."""
    found = [pod for pod in pods if not ids.isdisjoint(pod.containers)]
    return [pod for pod in found if not ids.isdisjoint(pod.notebook_containers())]


def same_figures(before: list[tuple[int, Any]], now: list[tuple[int, Any]]) -> bool:
    """Whether pyplot holds the same figures under the same numbers in the same order."""
    return len(before) == len(now) and all(
        a[0] == b[0] and a[1] is b[1] for a, b in zip(before, now, strict=True)
    )

"""No import cycles at run time: every cycle among a package's modules, named.

`make lint` runs this on `ditto_jupyter`. It builds the import graph with grimp (the
library under import-linter), leaving out imports under `if TYPE_CHECKING:` and keeping
function-level ones, since those run too. Every strongly connected component of more
than one module is a cycle, however long, and is reported with one loop through it.

An import between a package and its own submodules does not count: a package's
`__init__` importing what it re-exports, and a submodule importing its package, is how
Python packages are built, not a cycle between jobs.

Usage: python tests/house/import_cycles.py [PACKAGE ...]  (default: ditto_jupyter)
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable, Mapping

import grimp

Graph = Mapping[str, set[str]]


def _related(a: str, b: str) -> bool:
    """Whether one module is the other's package (or a package above it)."""
    return a.startswith(b + ".") or b.startswith(a + ".")


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> modules it imports at run time, within `package`."""
    graph = grimp.build_graph(package, exclude_type_checking_imports=True, cache_dir=None)
    return {
        module: {
            imported
            for imported in graph.find_modules_directly_imported_by(module)
            if imported != module and not _related(module, imported)
        }
        for module in graph.modules
    }


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        # Iterative depth-first search: (module, its remaining successors).
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            module, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[module] = min(low[module], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def one_loop(graph: Graph, component: Iterable[str]) -> list[str]:
    """A shortest loop through the component's first module, staying inside it."""
    members = set(component)
    start = min(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for successor in sorted(graph.get(module, ()) & members):
            if successor == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if successor not in came_from:
                came_from[successor] = module
                queue.append(successor)
    return [start]


def describe(graph: Graph) -> list[str]:
    """One paragraph per cycle: its modules, and a loop through them."""
    lines = []
    for component in strongly_connected(graph):
        lines.append(f"cycle of {len(component)} modules: {', '.join(component)}")
        lines.append("  e.g. " + " -> ".join(one_loop(graph, component)))
    return lines


def main(argv: list[str]) -> int:
    packages = argv or ["ditto_jupyter"]
    failed = False
    for package in packages:
        report = describe(import_graph(package))
        if report:
            failed = True
            print(f"{package}: import cycles at run time (TYPE_CHECKING imports not counted):")
            print("\n".join(report))
    if not failed:
        print(f"no import cycles at run time in {', '.join(packages)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

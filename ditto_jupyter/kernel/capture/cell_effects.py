"""Which global names a notebook cell can have read, written, deleted or mutated.

Conservative: `CellEffects.touched_by` answers None ("could be anything") whenever the cell
can reach the namespace in a way the names in its source do not show. Leaving a name out
makes an incremental checkpoint silently stale; naming too many only costs a re-pickle.
"""

from __future__ import annotations

import ast
import dis
import functools
import gc
import inspect
import itertools
import sys
import types
from collections.abc import Iterable, Mapping

from ditto_jupyter.kernel.capture.trusted_code import (
    from_untrusted_module,
    is_trusted_module,
    is_trusted_module_name,
)

#: Bare names that return the notebook's namespace itself.
NAMESPACE_GETTERS = frozenset({"globals", "vars", "locals"})
#: Bare names that run or import code we cannot see (`breakpoint` opens a debugger).
CODE_RUNNERS = frozenset({"exec", "eval", "compile", "__import__", "importlib", "breakpoint"})
#: The shell (every magic and `!cmd` becomes `get_ipython().run_*`), the builtins (bare or
#: imported) that hold all of the above, the namespace as a module, and the garbage
#: collector (`gc.get_objects()` hands out every object).
NAMESPACE_HOLDERS = frozenset({"get_ipython", "__builtins__", "builtins", "__main__", "gc"})
#: Every bare name (or imported module) after which a cell can have touched anything.
DYNAMIC_NAMES = NAMESPACE_GETTERS | CODE_RUNNERS | NAMESPACE_HOLDERS

#: Attributes that lead to a namespace: an object's or module's `__dict__`, a frame's
#: `f_globals`/`f_locals`, a function's `__globals__`, `sys.modules` (hence `__main__`).
NAMESPACE_ATTRIBUTES = frozenset({"__dict__", "f_globals", "f_locals", "__globals__", "modules"})
#: The shell's namespaces and the shell itself, fetched off a module or an object.
SHELL_ATTRIBUTES = frozenset({"user_ns", "user_global_ns", "get_ipython"})
DYNAMIC_ATTRIBUTES = NAMESPACE_ATTRIBUTES | SHELL_ATTRIBUTES

#: Builtins that fetch or change a module's attribute by string (`getattr(builtins, "exec")`,
#: `setattr(mod, ...)`): given a module, the cell can reach anything.
ATTRIBUTE_BUILTINS = frozenset({"getattr", "setattr", "delattr"})

#: Modules with "current object" state that code anywhere can change without naming the
#: variable that holds the object: logging's loggers (`getLogger(name)`). While the module
#: is imported, every variable holding an object of its package is touched. pyplot's current
#: figure (`plt.title()`, `df.plot()` and seaborn draw on it) is the journal's to follow,
#: figure by figure (`journal`, `figure_watch`).
SHARED_STATE_MODULES = {"logging": "logging"}
#: How many elements of a list, tuple, dict or object array are looked at for such objects
#: (`fig, axes = plt.subplots(2, 2)` keeps the axes in an object array).
CONTAINER_SCAN_LIMIT = 1000

#: Bytecode operations that name an attribute (the others in `dis.hasname` name a variable).
_ATTRIBUTE_OPS = frozenset(name for name in dis.opname if "ATTR" in name or "METHOD" in name)


class _Unbounded(Exception):
    """The cell can reach the namespace in a way its names do not show."""


#: Nodes whose body is code the notebook keeps and may run again later (U's sources).
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
#: Code objects a cell's comprehensions compile to (Python 3.11): they run with the cell.
_RUN_AT_ONCE = frozenset({"<listcomp>", "<setcomp>", "<dictcomp>"})
#: Nodes that bind the name in their `name` (`rest` for a mapping pattern) field.
_NAMED = (*_DEFINITIONS[:3], ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping)


def _names_of(node: ast.AST) -> tuple[str, ...]:
    """The names one node mentions or binds by itself (imports aside)."""
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Global | ast.Nonlocal):
        return tuple(node.names)
    if not isinstance(node, _NAMED):
        return ()
    name = getattr(node, "rest" if isinstance(node, ast.MatchMapping) else "name", None)
    return (name,) if isinstance(name, str) else ()


class _SourceNames(ast.NodeVisitor):
    """Every name a cell's source mentions, those inside definitions, and dynamic reach."""

    def __init__(self, namespace: Mapping[str, object]) -> None:
        self.names: set[str] = set()
        #: Names the cell binds anew before any read of them (`bound_before_read`).
        self.fresh: set[str] = set()
        self.in_definitions: set[str] = set()
        self.dynamic = False
        self.dynamic_in_definitions = False
        self.empty = False
        self._namespace = namespace
        self._imported: set[str] = set()
        self.imported_modules: set[str] = set()
        self._depth = 0
        #: Names the cell's code loads as a value (not as the callee of a call): a
        #: notebook function named so can be kept by whatever receives it.
        self.value_mentions: set[str] = set()
        #: (name, line) of the functions the cell binds with a plain `def` of its own
        #: (undecorated, not inside a def, class or lambda): they run when called by name.
        self.plain_defs: set[tuple[str, int]] = set()
        self._callees: set[int] = set()

    def visit(self, node: ast.AST) -> None:
        """Take in one node's names and reach, then its children (one level deeper in a def)."""
        for name in _names_of(node):
            self._add(name)
        if isinstance(node, ast.Call):
            self._callees.add(id(node.func))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if id(node) not in self._callees and not self._depth:  # a def's: its code's
                self.value_mentions.add(node.id)
        elif (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and not self._depth
            and not node.decorator_list
        ):
            self.plain_defs.add((node.name, node.lineno))
        if isinstance(node, ast.Attribute) and node.attr in DYNAMIC_ATTRIBUTES:
            self._reaches_namespace()
        elif isinstance(node, ast.Import | ast.ImportFrom):
            self._take_import(node)
        elif isinstance(node, ast.Call):
            self._take_call(node)
        inside = isinstance(node, _DEFINITIONS)
        self._depth += inside
        self.generic_visit(node)
        self._depth -= inside

    def _add(self, name: str) -> None:
        self.names.add(name)
        if self._depth:
            self.in_definitions.add(name)
        if name in DYNAMIC_NAMES:
            self._reaches_namespace()

    def _reaches_namespace(self) -> None:
        self.dynamic = True
        self.dynamic_in_definitions = self.dynamic_in_definitions or self._depth > 0

    def _take_import(self, node: ast.Import | ast.ImportFrom) -> None:
        """Names bound by an import; importing `__main__`, `*` or `sys.modules` reaches all."""
        module = node.module if isinstance(node, ast.ImportFrom) else None
        for alias in node.names:
            top = alias.name.split(".")[0]
            reached = {top, (module or "").split(".")[0]} & (DYNAMIC_NAMES | DYNAMIC_ATTRIBUTES)
            if reached or alias.name == "*":
                self._reaches_namespace()
            source = "." * getattr(node, "level", 0) + (module or alias.name)
            self.imported_modules.add(source.split(".")[0] or ".")
            bound = alias.asname or (alias.name if module is not None else top)
            self._imported.add(bound)
            self._add(bound)

    def _take_call(self, node: ast.Call) -> None:
        """`getattr(module, ...)` and its siblings can fetch `exec` or `__main__` off a module."""
        func, args = node.func, node.args
        if not (isinstance(func, ast.Name) and func.id in ATTRIBUTE_BUILTINS and args):
            return
        target = args[0]
        if isinstance(target, ast.Name) and (
            target.id in self._imported
            or isinstance(self._namespace.get(target.id), types.ModuleType)
        ):
            self._reaches_namespace()


class CellEffects:
    """What a notebook's cells can have touched, learned cell by cell.

    Pass the shell's `user_ns` itself: notebook functions are recognised by `__globals__`
    being that very dict. The answer is names; objects they share with other variables
    (containers, closures, bound methods) are the caller's components to widen.
    """

    def __init__(self) -> None:
        # U: every name inside a function, lambda or class body of any cell seen so far, and
        # every name the code of a live notebook function uses.
        self._defined_names: set[str] = set()
        self._defined_code_dynamic = False
        self._code_cache: dict[
            int, tuple[types.CodeType, frozenset[str], bool, frozenset[str]]
        ] = {}
        #: The values handed on during the cell being read (kept while it is read, so no
        #: id is reused): their code joins U.
        self._escaping: dict[int, object] = {}
        #: The namespace's bindings as the cell being read started.
        self._before: Mapping[str, object] = {}
        self._scan_pending = True
        #: Of the names the last `touched_by` answered, those the cell bound anew before
        #: reading them, that no notebook function uses: the cell reached nothing through
        #: their old values.
        self.fresh: set[str] = set()

    def expect_unseen_code(self) -> None:
        """Notebook code may exist that no cell showed (a restore): scan for it next call."""
        self._scan_pending = True

    def touched_by(
        self,
        code: str,
        namespace: Mapping[str, object],
        before: Mapping[str, object] | None = None,
    ) -> set[str] | None:
        """The global names `code` may read, write, delete or mutate; None: anything.

        `before`: the namespace's bindings as the cell started (a copy), so code the cell
        ran under a name it then bound anew counts too (default: `namespace` as it is)."""
        if self._scan_pending:
            self._scan_live_code(namespace)
        self.fresh = set()
        touched = self._touched_by(code, namespace, namespace if before is None else before)
        # A cell that could do anything may have made functions no source showed (exec, %run).
        self._scan_pending = touched is None
        return touched

    def _touched_by(
        self, code: str, namespace: Mapping[str, object], before: Mapping[str, object]
    ) -> set[str] | None:
        """`touched_by` without the bookkeeping of when to look for code no cell showed."""
        visitor = _parse(code, namespace)
        if visitor is None:
            return None
        if visitor.empty:
            return set()
        self._defined_names |= self._definition_names(code, visitor)
        self._defined_code_dynamic |= visitor.dynamic_in_definitions
        if visitor.dynamic or self._defined_code_dynamic:
            return None
        if not all(is_trusted_module_name(name) for name in visitor.imported_modules):
            return None
        self._before, self._escaping = before, {}
        try:
            for name in visitor.value_mentions:  # handed on as values: may run unnamed
                for value in _bindings(name, namespace, before):
                    self._escape(value, namespace)
            touched = visitor.names | self._defined_names
            touched |= _shared_state_holders(namespace)
            by_code = self._close_over_values(touched, namespace)
        except Exception:  # _Unbounded, or a value whose attributes raise: play safe
            return None
        finally:
            self._before, self._escaping = {}, {}
        self.fresh = visitor.fresh - self._defined_names - by_code
        return touched

    def _escape(self, value: object, namespace: Mapping[str, object]) -> None:
        """`value` (a notebook function, class, method, partial...) may be kept by code
        that runs it later unnamed: the names its code uses join U for good."""
        if id(value) in self._escaping or not _may_hold_code(value):
            return
        self._escaping[id(value)] = value
        self._defined_names |= self._names_reached(value, namespace, set())

    def _definition_names(self, code: str, visitor: _SourceNames) -> set[str]:
        """The global names the lambdas, classes and decorated functions a cell defines can
        use when they run later, unnamed: the names their compiled code loads, stores or
        deletes as a name (their parameters and locals are no global, an attribute name is
        none either). A plain `def` is not among them: bound to its name, it runs when
        called by it, and joins U once handed on as a value (`_escape`). Where the cell
        does not compile, every name its definitions mention."""
        if not visitor.in_definitions:
            return set()
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            compiled = compile(code, "<cell>", "exec", flags=flags, dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return set(visitor.in_definitions)
        names: set[str] = set()
        pending = [inner for inner in compiled.co_consts if isinstance(inner, types.CodeType)]
        while pending:
            inner = pending.pop()
            if inner.co_name in _RUN_AT_ONCE:  # the cell's own comprehension: runs now
                pending.extend(c for c in inner.co_consts if isinstance(c, types.CodeType))
                continue
            plain = (inner.co_name, inner.co_firstlineno) in visitor.plain_defs
            if plain and inner.co_name not in visitor.value_mentions:
                continue  # bound by name: it runs when a cell (or code that runs) calls it
            found, dynamic = self._code_names(inner)
            names |= found
            self._defined_code_dynamic |= dynamic
        return names

    def scan_live_code(self, namespace: Mapping[str, object]) -> None:
        """Count the notebook code that exists now (`_scan_live_code`), at once."""
        self._scan_live_code(namespace)

    def _scan_live_code(self, namespace: Mapping[str, object]) -> None:
        """Add to U the names used by every live function whose globals are the namespace.

        Catches code no cell showed this object: defined before it existed, made by `exec`
        or `%run`, or restored, even when only a container or a library callback holds it.
        """
        self._scan_pending = False
        for candidate in gc.get_referrers(namespace):  # functions and frames hold their globals
            code = _notebook_code(candidate, namespace)
            if code is not None:
                names, dynamic = self._code_names(code)
                self._defined_names |= names
                self._defined_code_dynamic |= dynamic

    def _close_over_values(self, touched: set[str], namespace: Mapping[str, object]) -> set[str]:
        """Add names reachable through the code of notebook values (bound to a name now, or
        as the cell started), until none is new; the names that code reached."""
        pending = list(touched)
        visited: set[int] = set()
        by_code: set[str] = set()
        while pending:
            name = pending.pop()
            for value in _bindings(name, namespace, self._before):
                reached = self._names_reached(value, namespace, visited)
                by_code |= reached
                new = reached - touched
                touched |= new
                pending.extend(new)
        return by_code

    def _names_reached(
        self, value: object, namespace: Mapping[str, object], visited: set[int]
    ) -> set[str]:
        """Global names the code behind `value` can use; raises _Unbounded if unknowable."""
        if id(value) in visited:
            return set()
        visited.add(id(value))
        if isinstance(value, types.ModuleType):
            if not is_trusted_module(value):
                raise _Unbounded
            return set()
        reached: set[str] = set()
        for inner in self._code_holders(value, namespace):
            if isinstance(inner, types.CodeType):
                names, dynamic = self._code_names(inner)
                if dynamic:
                    raise _Unbounded
                reached |= names
                for name in self._code_cache[id(inner)][3]:  # handed on by this code
                    for handed in _bindings(name, namespace, self._before):
                        self._escape(handed, namespace)
            else:
                reached |= self._names_reached(inner, namespace, visited)
        return reached

    def _code_holders(self, value: object, namespace: Mapping[str, object]) -> Iterable[object]:
        """The code objects and objects whose code `value` can run on our behalf."""
        if isinstance(value, types.FunctionType):
            notebook = value.__globals__ is namespace or value.__module__ == "__main__"
            if not notebook:
                if from_untrusted_module(value.__module__):
                    raise _Unbounded
                return
            yield value.__code__
            yield from (cell.cell_contents for cell in value.__closure__ or () if _full(cell))
            yield from value.__defaults__ or ()
            yield from (value.__kwdefaults__ or {}).values()
        elif isinstance(value, types.MethodType):
            yield value.__func__
            yield value.__self__
        elif isinstance(value, functools.partial):
            yield value.func
            yield from value.args
            yield from value.keywords.values()
        elif isinstance(value, type):
            yield from _class_functions(value)
        else:
            yield type(value)
        if callable(value) and not isinstance(value, type):  # functools.wraps, lru_cache
            wrapped = getattr(value, "__wrapped__", None)
            if wrapped is not None:
                yield wrapped

    def _code_names(self, code: types.CodeType) -> tuple[frozenset[str], bool]:
        """The global names a code object (and the code nested in it) loads, stores or
        deletes, and whether it is dynamic. An attribute's name is no global (`x.data`
        reaches `x`, never the variable `data`); a module it imports counts as a name."""
        cached = self._code_cache.get(id(code))
        if cached is not None and cached[0] is code:
            return cached[1], cached[2]
        names: set[str] = set()
        handed: set[str] = set()  # loaded as a value, not to be called at once
        dynamic = False
        for instruction in dis.get_instructions(code):
            argument, operation = instruction.argval, instruction.opname
            if instruction.opcode not in dis.hasname or not isinstance(argument, str):
                continue
            if operation in _ATTRIBUTE_OPS or operation == "IMPORT_FROM":
                dynamic = dynamic or argument in DYNAMIC_ATTRIBUTES
            else:
                names.add(argument)
                if operation in _LOADS and not _loaded_to_call(instruction):
                    handed.add(argument)
            if operation not in _ATTRIBUTE_OPS:
                dynamic = dynamic or argument.split(".")[0] in DYNAMIC_NAMES
        for constant in code.co_consts:
            if isinstance(constant, types.CodeType):
                inner_names, inner_dynamic = self._code_names(constant)
                names |= inner_names
                handed |= self._code_cache[id(constant)][3]
                dynamic = dynamic or inner_dynamic
        # Keep the code object itself, so its id cannot be reused while cached.
        self._code_cache[id(code)] = (code, frozenset(names), dynamic, frozenset(handed))
        return frozenset(names), dynamic


def bound_before_read(tree: ast.Module) -> set[str]:
    """The names a cell binds at its top level, unconditionally (an assignment to the name
    itself, an import, a def or a class), before anything in the cell mentions them
    otherwise: no code of the cell can reach their old values through them. Any other
    mention first (a read, a `del`, an augmented assignment, the name inside a function, a
    comprehension or a decorator, a binding under `if`, `for`, `with` or `try`) counts as a
    read."""
    assigned: set[str] = set()
    read: set[str] = set()
    for statement in tree.body:
        targets = _binding_targets(statement)
        mentioned: set[str] = set()
        for node in ast.walk(statement):
            if isinstance(node, ast.Name):
                if not any(node is target for target in targets):
                    mentioned.add(node.id)
            elif node is not statement:
                mentioned.update(_names_of(node))
        read |= mentioned - assigned
        assigned |= _definite_bindings(statement)
    return assigned - read


def _definite_bindings(statement: ast.stmt) -> set[str]:
    """The names one top-level statement binds whenever it completes."""
    if isinstance(statement, ast.Import):
        return {alias.asname or alias.name.split(".")[0] for alias in statement.names}
    if isinstance(statement, ast.ImportFrom):
        return {alias.asname or alias.name for alias in statement.names if alias.name != "*"}
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    return {target.id for target in _binding_targets(statement)}


def _binding_targets(statement: ast.stmt) -> list[ast.Name]:
    """The name nodes an assignment statement binds itself (not attributes or items)."""
    if isinstance(statement, ast.Assign):
        return [name for target in statement.targets for name in _target_names(target)]
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return _target_names(statement.target)
    return []


def _target_names(target: ast.expr) -> list[ast.Name]:
    """The name nodes an assignment target is made of (through tuples, lists, stars)."""
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _target_names(element)]
    return []


#: Operations that load a global (or a name at module or class level).
_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})


def _loaded_to_call(instruction: dis.Instruction) -> bool:
    """Whether a load pushes its global to be called at once (Python 3.11+ marks it: the
    low bit of LOAD_GLOBAL's argument, `NULL + name`); before 3.11, never known."""
    return (
        sys.version_info >= (3, 11)
        and instruction.opname == "LOAD_GLOBAL"
        and isinstance(instruction.arg, int)
        and bool(instruction.arg & 1)
    )


def _bindings(
    name: str, namespace: Mapping[str, object], before: Mapping[str, object]
) -> list[object]:
    """What `name` is bound to now and was as the cell started (once each)."""
    now = namespace.get(name)
    then = before.get(name, now)
    return [now] if then is now else [now, then]


def _may_hold_code(value: object) -> bool:
    """Whether a value can carry notebook code (not a number, string or module)."""
    return not isinstance(value, str | bytes | int | float | complex | bool | type(None))


def _parse(code: str, namespace: Mapping[str, object]) -> _SourceNames | None:
    """The names in a cell's source; None when it does not parse."""
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    visitor = _SourceNames(namespace)
    try:
        tree = compile(code, "<cell>", "exec", flags=flags, dont_inherit=True)
        visitor.visit(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    visitor.empty = not getattr(tree, "body", None)
    if isinstance(tree, ast.Module):
        visitor.fresh = bound_before_read(tree)
    return visitor


def _shared_state_holders(namespace: Mapping[str, object]) -> set[str]:
    """Variables holding objects of a package whose module-level state any code can change."""
    imported = (
        package for module, package in SHARED_STATE_MODULES.items() if module in sys.modules
    )
    packages = set(imported)
    if not packages:
        return set()
    return {
        name
        for name, value in namespace.items()
        if type(value) not in _SCALAR_TYPES  # most entries (`_i12`, `n`): no look inside
        and any(str(cls.__module__).split(".")[0] in packages for cls in _types_held(value))
    }


#: Types whose values hold nothing (no package's object can be inside one).
_SCALAR_TYPES = frozenset({str, bytes, int, float, bool, complex, type(None)})


def _types_held(value: object) -> set[type]:
    """A value's type and those of its first elements (list, tuple, set, dict, object array)."""
    elements: Iterable[object] = ()
    if isinstance(value, dict):
        elements = value.values()
    elif isinstance(value, list | tuple | set | frozenset):
        elements = value
    elif _is_object_array(value):
        elements = value.flat  # type: ignore[attr-defined]
    return {type(value), *map(type, itertools.islice(elements, CONTAINER_SCAN_LIMIT))}


def _is_object_array(value: object) -> bool:
    """Whether a value is a numpy array of Python objects (numpy not imported: no)."""
    numpy = sys.modules.get("numpy")
    ndarray = getattr(numpy, "ndarray", None)
    if not (isinstance(ndarray, type) and isinstance(value, ndarray)):
        return False
    return getattr(getattr(value, "dtype", None), "kind", None) == "O"


#: Code flags of generators and coroutines, whose frames can run again.
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _notebook_code(value: object, namespace: Mapping[str, object]) -> types.CodeType | None:
    """The code of a function, or of a frame (a suspended generator's), using the namespace.

    A generator a cell can resume (`next(gen)`) outlives its function before Python 3.11.
    """
    if isinstance(value, types.FunctionType) and value.__code__.co_flags & inspect.CO_NEWLOCALS:
        return value.__code__ if value.__globals__ is namespace else None
    if isinstance(value, types.FrameType) and value.f_code.co_flags & _RESUMABLE:
        return value.f_code if value.f_globals is namespace else None
    # A cell's own code (a finished frame a traceback keeps, and in Python 3.11 the function
    # object `exec` wraps it in) never runs again.
    return None


def _full(cell: types.CellType) -> bool:
    """Whether a closure cell holds a value (an unassigned one raises on access)."""
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:
        return False
    return True


def _class_functions(cls: type) -> Iterable[object]:
    """Functions a class defined in `__main__` holds (and those of its `__main__` bases)."""
    for klass in cls.__mro__:
        if klass.__module__ != "__main__":
            if from_untrusted_module(klass.__module__):
                raise _Unbounded
            continue
        for member in list(vars(klass).values()):
            if isinstance(member, staticmethod | classmethod):
                yield member.__func__
            elif isinstance(member, property):
                yield from (f for f in (member.fget, member.fset, member.fdel) if f is not None)
            elif isinstance(member, types.FunctionType | type):
                yield member

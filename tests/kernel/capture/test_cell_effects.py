"""CellEffects: which names a cell can have changed, so an incremental checkpoint is never stale.

Each test pins an answer the incremental capture relies on: a name the cell can reach is in
the set (else its checkpoint would silently keep an old value), and a cell that can reach
the namespace in ways its source does not show answers None (capture everything).
"""

from __future__ import annotations

import importlib
import pickle
import sys
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from benchmarks.bench_autocheckpoint import MIXED_CELLS, MIXED_SETUP
from ditto_jupyter.kernel.capture.cell_effects import CellEffects
from ditto_jupyter.kernel.capture.rules import is_state_name


def notebook(setup: str = "") -> dict[str, object]:
    """A namespace like a kernel's `user_ns`, with `setup` run in it before CellEffects exists."""
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(setup, namespace)
    return namespace


def touched(code: str, namespace: dict[str, object] | None = None) -> set[str] | None:
    return CellEffects().touched_by(code, notebook() if namespace is None else namespace)


def test_an_assignment_touches_exactly_its_target() -> None:
    assert touched("x = 1") == {"x"}


def test_item_assignment_and_method_calls_name_the_mutated_and_assigned_variables() -> None:
    assert "d1" in (touched("d1['new'] = 'v'", notebook("d1 = {}")) or set())
    result = touched("y = float(arr.sum())", notebook("import numpy\narr = numpy.ones(3)"))
    assert result is not None
    assert {"arr", "y"} <= result


def test_a_notebook_function_passed_to_a_library_brings_the_globals_it_uses() -> None:
    effects, namespace = CellEffects(), notebook("import pandas as pd\ndf = pd.Series([1, 2])")
    code = "def score(row):\n    return row * k"
    assert effects.touched_by(code, namespace) is not None
    exec(code + "\nk = 2", namespace)
    result = effects.touched_by("s = df.apply(score)", namespace)
    assert result is not None
    assert {"k", "s", "df", "score"} <= result


def test_functions_defined_in_earlier_cells_count_even_when_the_cell_does_not_name_them() -> None:
    effects, namespace = CellEffects(), notebook()
    code = "def bump():\n    global counter\n    counter += 1\nhandlers = {'go': bump}"
    assert effects.touched_by(code, namespace) is not None
    exec(code + "\ncounter = 0", namespace)
    result = effects.touched_by("handlers['go']()", namespace)
    assert result is not None
    assert "counter" in result


def test_a_function_defined_before_the_object_existed_brings_its_globals() -> None:
    namespace = notebook("state = []\ndef f():\n    state.append(1)")
    result = touched("f()", namespace)
    assert result is not None
    assert "state" in result


def test_nested_functions_transitive_calls_and_decorators_bring_their_globals() -> None:
    setup = (
        "import functools\n"
        "def deepest():\n    return config\n"
        "def outer():\n    def inner():\n        return deepest() + lookup\n    return inner()\n"
        "def logged(func):\n"
        "    @functools.wraps(func)\n"
        "    def wrapper(*args):\n        return func(*args)\n"
        "    return wrapper\n"
        "@logged\ndef decorated():\n    return table\n"
    )
    result = touched("outer(); decorated()", notebook(setup))
    assert result is not None
    assert {"config", "lookup", "deepest", "table"} <= result


def test_a_suspended_generator_brings_the_globals_its_code_uses() -> None:
    setup = (
        "def numbers():\n    global produced\n    while True:\n        produced += 1\n        yield"
    )
    namespace = notebook(setup + "\nproduced = 0\ngen = numbers()\nnext(gen)\ndel numbers")
    effects = CellEffects()
    effects.touched_by("", namespace)
    result = effects.touched_by("next(gen)", namespace)
    assert result is not None
    assert "produced" in result


def test_methods_of_notebook_classes_bring_their_globals_through_instances_and_classes() -> None:
    setup = (
        "class Base:\n    def base_method(self):\n        return base_state\n"
        "class Model(Base):\n"
        "    def fit(self):\n        return weights\n"
        "    @staticmethod\n    def build():\n        return registry\n"
        "    @classmethod\n    def load(cls):\n        return cache\n"
        "    @property\n    def size(self):\n        return table\n"
        "model = Model()\n"
    )
    namespace = notebook(setup)
    through_instance = touched("model.fit()", namespace)
    assert through_instance is not None
    assert {"weights", "registry", "cache", "table", "base_state"} <= through_instance
    through_class = touched("Model.build()", namespace)
    assert through_class is not None
    assert {"weights", "registry", "base_state"} <= through_class


@pytest.mark.parametrize(
    "code",
    [
        "globals()['x'] = 1",
        "vars()['x'] = 1",
        "exec('x = 1')",
        "eval('x')",
        "import __main__\n__main__.x = 1",
        "from __main__ import x",
        "import sys\nsys.modules['__main__'].x = 1",
        "import builtins\ngetattr(builtins, 'exec')('x = 1')",
        "import inspect\ninspect.currentframe().f_globals['x'] = 1",
        "f = lambda: 1\nf.__globals__['x'] = 2",
        "from os import *",
    ],
)
def test_a_cell_that_reaches_the_namespace_dynamically_can_touch_anything(code: str) -> None:
    assert touched(code) is None


def test_a_magic_as_ipython_transforms_it_can_touch_anything() -> None:
    code = TransformerManager().transform_cell("%time x=1")
    assert "get_ipython" in code
    assert touched(code) is None


def test_a_notebook_function_that_reaches_the_namespace_taints_every_later_call() -> None:
    effects, namespace = CellEffects(), notebook()
    code = "def setter(name, value):\n    globals()[name] = value"
    assert effects.touched_by(code, namespace) is None
    exec(code, namespace)
    assert effects.touched_by("y = 2", namespace) is None
    earlier = notebook("def setter(name, value):\n    globals()[name] = value")
    assert touched("setter('x', 1)", earlier) is None


def test_earlier_code_is_read_by_its_bytecode_attributes_apart_from_globals() -> None:
    setup = "import re\ndef clean(text):\n    return re.compile('x').sub('', text)\n"
    compiled_by_re = touched("cleaned = clean('axb')", notebook(setup))
    assert compiled_by_re is not None
    assert {"cleaned", "clean", "re"} <= compiled_by_re
    peeking = notebook("def peek(thing):\n    return thing.__dict__")
    assert touched("seen = peek(object)", peeking) is None


def test_a_users_own_module_can_touch_anything_installed_and_stdlib_modules_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_helpers.py").write_text("shared = []\ndef remember(x):\n    shared.append(x)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_helpers", raising=False)
    helpers = importlib.import_module("my_helpers")
    namespace = notebook("import numpy as np\nimport json")
    namespace.update(my_helpers=helpers, remember=helpers.remember)
    assert touched("my_helpers.remember(1)", namespace) is None
    assert touched("import my_helpers as fresh\nfresh.remember(1)", notebook()) is None
    monkeypatch.delitem(sys.modules, "my_helpers")
    assert touched("from my_helpers import remember\nremember(1)", notebook()) is None
    assert touched("from . import sibling", notebook()) is None
    (tmp_path / "my_namespace").mkdir()
    assert touched("import my_namespace", notebook()) is None
    assert touched("remember(1)", namespace) is None
    assert touched("a = np.zeros(3)\nb = json.dumps([1])", namespace) == {"a", "b", "np", "json"}


def test_namespace_packages_installed_in_site_packages_are_trusted() -> None:
    import mpl_toolkits  # installed with matplotlib, a test dependency

    assert mpl_toolkits.__file__ is None  # a namespace package
    assert touched("import mpl_toolkits") == {"mpl_toolkits"}


def test_pyplot_drawing_is_left_to_the_figures_not_to_the_names() -> None:
    import matplotlib

    matplotlib.use("Agg")
    setup = "import matplotlib.pyplot as plt\nfig, axes = plt.subplots(1, 2)\nplain = [1, 2]"
    namespace = notebook(setup)
    # pyplot's current figure is the journal's and figure_watch's to follow (a capture
    # re-pickles the figures they say changed), so a cell's names are its own only
    assert touched("plt.title('drawn on the current axes')", namespace) == {"plt"}


def test_comprehension_walrus_match_except_and_import_bindings_are_in_the_set() -> None:
    code = (
        "squares = [i * i for i in range(3) if (last := i)]\n"
        "import os.path\nimport numpy as numeric\nfrom json import dumps as to_json\n"
        "match point:\n    case {'x': px, **rest}: pass\n    case [first, *others]: pass\n"
        "try:\n    pass\nexcept ValueError as problem:\n    pass\n"
        "def helper():\n    global flag\n    flag = lambda: hidden\n"
    )
    result = touched(code)
    assert result is not None
    expected = {"squares", "i", "last", "os", "numeric", "to_json", "point", "px", "rest"}
    assert expected | {"first", "others", "problem", "helper", "flag", "hidden"} <= result


def test_whitespace_and_comments_touch_nothing_and_a_syntax_error_touches_anything() -> None:
    effects, namespace = CellEffects(), notebook()
    assert effects.touched_by("def f():\n    return g", namespace) is not None
    assert effects.touched_by("  \n# only a comment\n\n", namespace) == set()
    assert effects.touched_by("x = (", namespace) is None


def test_code_no_cell_showed_counts_even_when_only_a_container_holds_it() -> None:
    defining = "def bump():\n    global counter\n    counter += 1\nhandlers = [bump]\ncounter = 0"
    before_the_object = notebook(defining)
    del before_the_object["bump"]
    result = touched("handlers[0]()", before_the_object)
    assert result is not None
    assert "counter" in result
    effects, namespace = CellEffects(), notebook()
    made_by_exec = f"exec({defining!r})\ndel bump"
    assert effects.touched_by(made_by_exec, namespace) is None
    exec(made_by_exec, namespace)
    result = effects.touched_by("handlers[0]()", namespace)
    assert result is not None
    assert "counter" in result


def test_after_a_restore_the_restored_code_counts_once_the_caller_says_so() -> None:
    effects, namespace = CellEffects(), notebook()
    assert effects.touched_by("x = 1", namespace) == {"x"}
    exec("def bump():\n    global counter\n    counter = 1\nhandlers = [bump]\ndel bump", namespace)
    effects.expect_unseen_code()
    result = effects.touched_by("handlers[0]()", namespace)
    assert result is not None
    assert "counter" in result


def test_a_failed_magic_cell_kept_in_a_traceback_does_not_taint_later_cells() -> None:
    effects, namespace = CellEffects(), notebook()
    failing = "get_ipython = None\nget_ipython().run_line_magic('time', '1/0')"
    assert effects.touched_by(failing, namespace) is None
    try:
        exec(failing, namespace)
    except TypeError:
        kept = sys.exc_info()[2]
    assert kept is not None
    assert effects.touched_by("x = 1", namespace) == {"x"}


def test_a_2000_line_cell_parses() -> None:
    code = "\n".join(f"v{line} = {line}" for line in range(2000))
    assert touched(code) == {f"v{line}" for line in range(2000)}


def test_every_variable_a_mixed_notebook_cell_changed_is_in_its_set() -> None:
    effects, namespace = CellEffects(), notebook()
    for code in [MIXED_SETUP, *MIXED_CELLS]:
        result = effects.touched_by(code, namespace)
        assert result is not None, code
        before = pickled_state(namespace)
        exec(code, namespace)
        after = pickled_state(namespace)
        changed = {name for name, blob in after.items() if before.get(name) != blob}
        assert changed <= result, (code, changed - result)


def pickled_state(namespace: dict[str, object]) -> dict[str, bytes]:
    """The pickle bytes of each picklable state variable."""
    state = {}
    for name, value in namespace.items():
        if not is_state_name(name, value, {}):
            continue
        try:
            state[name] = pickle.dumps(value)
        except Exception:
            continue
    return state


@pytest.mark.parametrize(
    ("code", "fresh"),
    [
        ("fig, axes = plt.subplots(2)\nfor i in range(2):\n    axes[i].plot([i])", {"fig", "axes"}),
        ("x = x + 1", set()),  # read first
        ("x = 1\nx = x + 1", {"x"}),  # the read is of the new value
        ("y += 1", set()),
        ("del z\nz = 2", set()),
        ("if flag:\n    a = 1\nb = a", {"b"}),  # a binding under `if` is no binding
        ("def f():\n    return g\ng = 1", {"f"}),  # `g` is mentioned in f first
        ("import numpy as np\nfrom os import path as p", {"np", "p"}),
        ("fig.x = 1\nfig = 2", set()),  # an attribute set is a read of `fig`
        ("k = [k for k in range(3)]", set()),
        ("w = (v := 3)", {"w"}),
    ],
)
def test_names_bound_anew_before_any_read_are_fresh(code: str, fresh: set[str]) -> None:
    """A name the cell binds at top level, unconditionally, before any other mention of it:
    the cell reached nothing through its old value (the capture need not suspect what that
    value held). Every other mention first counts as a read."""
    namespace = notebook("flag = True\nx = y = z = 0\nfig = object()")
    effects = CellEffects()
    assert effects.touched_by(code, namespace) is not None
    assert effects.fresh == fresh


def test_a_name_a_notebook_function_uses_is_never_fresh() -> None:
    """A function may read the old value when the cell calls it, before the new binding."""
    namespace = notebook("fig = object()\ndef show():\n    return fig\n")
    effects = CellEffects()
    effects.touched_by("show()\nfig = 1", namespace)
    assert effects.fresh == set()


def test_a_plain_def_counts_only_when_called_or_handed_on() -> None:
    """A function bound by a plain `def` runs when code calls it by name: a cell that does
    not touches nothing its code uses. Handed on as a value (to a list, a library), it may
    run unnamed later: from then on every cell counts what its code uses."""
    effects, namespace = CellEffects(), notebook("registry = []\ncounter = 0\nlimit = 3")
    code = "def bump():\n    global counter\n    counter += limit\n"
    assert effects.touched_by(code, namespace) is not None
    exec(code, namespace)
    assert effects.touched_by("x = 1", namespace) == {"x"}
    called = effects.touched_by("bump()", namespace)
    assert called is not None and {"counter", "limit"} <= called
    assert effects.touched_by("y = 2", namespace) == {"y"}
    assert effects.touched_by("registry.append(bump)", namespace) is not None
    later = effects.touched_by("z = 3", namespace)
    assert later is not None and {"counter", "limit"} <= later


def test_a_function_handed_on_by_code_that_runs_counts_from_then_on() -> None:
    setup = (
        "registry = []\ncounter = 0\n"
        "def cb():\n    global counter\n    counter += 1\n"
        "def register():\n    registry.append(cb)\n"
    )
    effects, namespace = CellEffects(), notebook()
    assert effects.touched_by(setup, namespace) is not None
    exec(setup, namespace)
    assert effects.touched_by("x = 1", namespace) == {"x"}
    assert effects.touched_by("register()", namespace) is not None  # hands `cb` on
    later = effects.touched_by("y = 2", namespace)
    assert later is not None and "counter" in later


def test_code_a_cell_ran_under_a_name_it_then_bound_anew_counts() -> None:
    """`before`: the bindings as the cell started, so a function the cell called (or
    handed on) and then replaced still brings what its code uses."""
    setup = "import pandas as pd\ndf = pd.Series([1, 2])\nk = 2\ndef score(v):\n    return v * k\n"
    effects, namespace = CellEffects(), notebook()
    effects.touched_by(setup, namespace)
    exec(setup, namespace)
    before = dict(namespace)
    code = "s = df.apply(score)\nscore = None"
    exec(code, namespace)
    result = effects.touched_by(code, namespace, before)
    assert result is not None and "k" in result

"""The hosts name the in-kernel functions they call (`kernel_calls`) without importing
them; each name must resolve, inside a kernel, to a function of `ditto_jupyter.kernel`."""

from __future__ import annotations

import importlib

import pytest

from ditto_jupyter.hosts import kernel_calls


@pytest.mark.parametrize("target", kernel_calls.ALL)
def test_every_named_call_is_a_kernel_function(target: str) -> None:
    module_name, _, name = target.partition(":")
    assert module_name.startswith("ditto_jupyter.kernel")
    assert callable(getattr(importlib.import_module(module_name), name))


def test_the_table_lists_every_name() -> None:
    named = {value for key, value in vars(kernel_calls).items() if key.isupper() and key != "ALL"}
    assert named == set(kernel_calls.ALL)

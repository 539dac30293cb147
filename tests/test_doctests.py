"""The docstring examples of every module, run as tests under the module's installed name.

pytest's ``--doctest-modules`` would import ``derivations/hardware.py`` as a second, top-level copy named
``derivations.hardware``; the code imports ``memderive.derivations.hardware``. Here each module is
imported once, by the name the code uses, and its examples run with pytest's default flag (ELLIPSIS).
"""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil

import pytest

PACKAGES = ("memderive", "memderive.symbolic", "memderive.derivations")


def _module_names() -> list[str]:
    names: set[str] = set()
    for package in PACKAGES:
        names.add(package)
        module = importlib.import_module(package)
        names.update(info.name for info in pkgutil.walk_packages(module.__path__, package + "."))
    return sorted(names)


@pytest.mark.parametrize("name", _module_names())
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=out.write)
    assert runner.failures == 0, out.getvalue()

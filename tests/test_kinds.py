"""Tests by kind: every test carries exactly one of the markers fast, reference, slow (tests/kinds.py reads
each test's source; conftest.py applies them), the markers are registered and strict, and ``-m fast``
never imports torch or transformers."""

from __future__ import annotations

import doctest
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import kinds
from kinds import KINDS, file_kinds

TESTS = Path(__file__).resolve().parent


def test_every_collected_test_has_exactly_one_kind(request: pytest.FixtureRequest) -> None:
    items = request.session.items
    assert items and all(sum(item.get_closest_marker(k) is not None for k in KINDS) == 1 for item in items)


@pytest.mark.parametrize("test,kind", [
    ("test_hf_saved.py::test_one_layer_op_by_op", "reference"),  # imports tests/hf_saved.py (torch) at its top
    ("test_conventions.py::test_accelerate_reproduces_its_estimator", "reference"),  # accelerate, inside the test
    ("test_conventions.py::test_deepspeed_by_hand", "fast"),  # the same file
    ("test_static.py::test_ruff", "slow"),  # a subprocess
    ("test_expr.py::test_estimate_json_imports_no_sympy", "slow"),  # a subprocess, beside fast tests
    ("test_expr.py::test_arithmetic_and_values_equal_sympys", "slow"),  # @given
    ("test_expr.py::test_beyond_int64_stays_exact", "fast"),
    ("test_notebooks.py::test_notebook_executes_and_prints_the_cli_totals", "slow"),  # a Jupyter kernel
])
def test_known_tests_get_their_kind(test: str, kind: str) -> None:
    file, name = test.split("::")
    source = (TESTS / file).read_text()
    assert f"def {name}(" in source, f"{test} was renamed: pick another example"
    assert file_kinds(str(TESTS / file)).of(name) == kind


def test_the_classifier_examples() -> None:
    assert doctest.testmod(kinds, optionflags=doctest.ELLIPSIS).failed == 0


def test_the_markers_are_registered_and_strict() -> None:
    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert [line.split(":")[0] for line in config["markers"]] == list(KINDS)
    assert "--strict-markers" in config["addopts"].split()


def test_fast_selection_never_imports_torch() -> None:
    code = ("import sys, pytest; pytest.main(['--collect-only', '-qq', '-m', 'fast', '-p', 'no:cacheprovider']); "
            "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'peft', 'accelerate') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], cwd=TESTS.parent, capture_output=True, text=True, timeout=300)
    assert "HEAVY []" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from kinds import KINDS, file_kinds


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/ files")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


# CI replays the same examples every run (no flaky reds from a new random draw); locally, hypothesis explores.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


# --- Test kinds (pyproject's markers; tests/kinds.py reads each test's source): every collected test gets
# exactly one of fast, reference, slow, so a new test is classified without hand work.
def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``-m``, a module that imports torch or transformers at its top is not even imported when the
    expression excludes ``reference`` (so ``-m fast`` never loads torch)."""
    expression = config.getoption("markexpr")
    if not expression or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    whole = file_kinds(str(collection_path)).whole
    if whole is None or _selects(expression, {whole}):
        return None
    return True


def _selects(expression: str, marks: set[str]) -> bool:
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # pytest moved its expression parser: collect everything (slower, still correct)
        return True
    return Expression.compile(expression).evaluate(lambda name, /, **kwargs: name in marks)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(kind) for kind in KINDS):  # a kind marked by hand is kept
            item.add_marker(getattr(pytest.mark, _kind(item)))


def _kind(item: pytest.Item) -> str:
    path = getattr(item, "path", None)
    function = getattr(item, "originalname", None) or item.name
    if path is None or path.suffix != ".py":
        return "fast"
    cls = getattr(item, "cls", None)
    name = f"{cls.__name__}.{function}" if cls is not None else function
    return file_kinds(str(path)).of(name, tuple(getattr(item, "fixturenames", ())))


#: A ``fast`` test's budget (seconds, one call); the summary names each one over it (mark it slow).
FAST_BUDGET = 1.0
_OVER_BUDGET: list[tuple[str, float]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and "fast" in report.keywords and report.duration > FAST_BUDGET:
        _OVER_BUDGET.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 (pytest's TerminalReporter)
    if _OVER_BUDGET:
        terminalreporter.write_sep("-", f"fast tests over {FAST_BUDGET:g} s (mark them @pytest.mark.slow)")
        for nodeid, seconds in sorted(_OVER_BUDGET, key=lambda x: -x[1]):
            terminalreporter.write_line(f"{seconds:6.2f} s  {nodeid}")

"""Static checks run as tests: ruff on the whole tree, mypy on the engine (house style: strict tooling)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff() -> None:
    result = _run("ruff", "check", "symbolic", "derivations", "render", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_on_the_engine() -> None:
    result = _run("mypy", "symbolic")
    assert result.returncode == 0, result.stdout + result.stderr

"""The LaTeX tests' one rule: without pdflatex, fail under CI (``CI=true``, as GitHub Actions and ``.ci/run`` set it:
CI installs texlive), and elsewhere skip with the reason."""

from __future__ import annotations

import os
import shutil

import pytest


def under_ci() -> bool:
    """Whether the tests run under CI: ``CI`` set to a true value (``true``, ``1``, ``yes``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_pdflatex() -> str:
    """The path of pdflatex; without it, a failure under CI and a skip (with the reason) elsewhere."""
    path = shutil.which("pdflatex")
    if path is None:
        if under_ci():
            pytest.fail("pdflatex is missing; CI installs texlive (see .ci/run)")
        pytest.skip("pdflatex is not installed (CI=true runs this test, where texlive is installed)")
    return path

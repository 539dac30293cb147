"""The catalog: architectures, presets, config loading and the quantities derived from graphs.

``derivations.sweep`` and ``derivations.plan`` load on first use (they import NumPy; estimates do not).
"""

from importlib import import_module
from typing import Any

from memderive.derivations.estimate import Estimate, estimate
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options

__all__ = ["Estimate", "Model", "Options", "estimate", "sweep", "plan"]

#: The names that load on first use, and their modules (the package's own, read as imports by
#: ``tests/test_module_borders.py``).
_HOMES = {"sweep": "memderive.derivations.search.sweep", "plan": "memderive.derivations.search.plan"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'memderive.derivations' has no attribute {name!r}")
    return getattr(import_module(_HOMES[name]), name)

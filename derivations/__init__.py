"""The catalog: architectures, presets, config loading and the quantities derived from graphs.

``derivations.sweep`` and ``derivations.plan`` load on first use (they import NumPy; estimates do not).
"""

from typing import Any

from derivations.estimate import Estimate, estimate
from derivations.models.model import Model
from derivations.options import Options

__all__ = ["Estimate", "Model", "Options", "estimate", "sweep", "plan"]


def __getattr__(name: str) -> Any:
    if name == "sweep":
        from derivations.search.sweep import sweep

        return sweep
    if name == "plan":
        from derivations.search.plan import plan

        return plan
    raise AttributeError(f"module 'derivations' has no attribute {name!r}")

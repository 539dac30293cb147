"""The catalog: architectures, presets, config loading and the quantities derived from graphs.

``derivations.sweep`` and ``derivations.plan`` load on first use (they import NumPy; estimates do not).
"""

from typing import Any

from memderive.derivations.estimate import Estimate, estimate
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options

__all__ = ["Estimate", "Model", "Options", "estimate", "sweep", "plan"]


def __getattr__(name: str) -> Any:
    if name == "sweep":
        from memderive.derivations.search.sweep import sweep

        return sweep
    if name == "plan":
        from memderive.derivations.search.plan import plan

        return plan
    raise AttributeError(f"module 'memderive.derivations' has no attribute {name!r}")

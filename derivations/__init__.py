"""The catalog: architectures, presets, config loading and the quantities derived from graphs."""

from derivations.estimate import Estimate, estimate
from derivations.models.model import Model
from derivations.options import Options

__all__ = ["Estimate", "Model", "Options", "estimate"]

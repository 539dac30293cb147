"""One exception root for everything the engine refuses."""

from __future__ import annotations

__all__ = ["DerivationError", "ShapeMismatchError", "UnsupportedNodeError", "InvalidLayoutError"]


class DerivationError(ValueError):
    """A derivation cannot be carried out exactly; the message says what to change."""


class ShapeMismatchError(DerivationError):
    def __init__(self, path: str, expected: object, actual: object) -> None:
        super().__init__(f"{path}: expected shape {expected}, got {actual}")
        self.path, self.expected, self.actual = path, expected, actual


class UnsupportedNodeError(DerivationError):
    """A strategy or derivation met a node kind it has no rule for."""


class InvalidLayoutError(DerivationError):
    """A parallel layout whose degrees do not divide the model (e.g. heads % t != 0)."""

"""One exception root for everything the engine refuses."""

from __future__ import annotations

__all__ = ["DerivationError", "InvalidLayoutError"]


class DerivationError(ValueError):
    """A derivation cannot be carried out exactly; the message says what to change."""


class InvalidLayoutError(DerivationError):
    """A parallel layout whose degrees do not divide the model (e.g. heads % t != 0)."""

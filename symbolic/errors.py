"""One exception root for everything the engine refuses."""

from __future__ import annotations

__all__ = ["DerivationError", "InvalidLayoutError", "shown"]


class DerivationError(ValueError):
    """A derivation cannot be carried out exactly; the message says what to change."""


class InvalidLayoutError(DerivationError):
    """A parallel layout whose degrees do not divide the model (e.g. heads % t != 0)."""


def shown(value: object, width: int = 60) -> str:
    """``repr(value)`` cut to ``width`` characters, for one-line messages (a 10 MB value is not echoed).

    >>> shown("x" * 100, 12)
    "'xxxxxxxx..."
    """
    try:
        text = repr(value)
    except RecursionError:  # a list nested 100,000 deep
        return f"<{type(value).__name__} nested too deeply to show>"
    return text if len(text) <= width else text[:width - 3] + "..."

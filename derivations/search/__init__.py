"""Searches over sizes and layouts: the largest batch or context that fits (fit)."""

__all__: list[str] = []

"""Searches over sizes and layouts: the largest batch or context that fits (fit), exact grids of every
quantity (sweep), layouts that fit ranked by step time (plan)."""

__all__: list[str] = []

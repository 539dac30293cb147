"""A value that hashes and compares by its key alone, so that ``functools.lru_cache`` memoizes a
function of the value once per key (the derivation cache of ``estimate``, the NumPy plans of ``sweep``).

>>> from functools import lru_cache
>>> @lru_cache(maxsize=8)
... def length(item: Keyed) -> int:
...     return len(item.value)
>>> length(Keyed("k", "abc")), length(Keyed("k", "a much longer value"))  # the same key: the first value's
(3, 3)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import lru_cache, wraps
from typing import Any

__all__ = ["Keyed", "applied", "per_graph", "clear"]


@dataclass(frozen=True, slots=True)
class Keyed:
    """``key`` (hashable: what the result depends on) and ``value`` (what the function reads; not compared)."""

    key: Hashable
    value: Any = field(compare=False)


def applied(graph: Any, steps: Any) -> Any:
    """``graph`` through the transforms ``steps`` in order, once per graph object and steps (strategies are frozen
    values: structures that apply the same ones, e.g. every ZeRO stage of a layout, share the graph), each prefix of
    the steps once too (layouts that differ only in their last transforms, the pipeline stage seen or a parallel
    degree's switch, share the graph before them)."""
    steps = tuple(steps)
    if not steps:
        return graph
    try:
        key = (id(graph), steps)
        hash(key)
    except TypeError:  # a transform holding an unhashable value: applied anew
        return _apply(graph, steps)
    return _applied(Keyed(key, (graph, steps)))  # the key's value holds the graph: its id stays its own


def _apply(graph: Any, steps: tuple) -> Any:
    for step in steps:
        graph = step(graph)
    return graph


@lru_cache(maxsize=4096)
def _applied(item: Keyed) -> Any:
    graph, steps = item.value
    return steps[-1](applied(graph, steps[:-1]))


_MEMOS: list[Any] = [_applied]


def per_graph(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(graph, **keywords)`` once per graph object and keywords (graphs are immutable; the memo holds the graph,
    so its id is not reused while cached)."""

    @lru_cache(maxsize=4096)
    def cached(item: Keyed) -> Any:
        graph, keywords = item.value
        return fn(graph, **dict(keywords))

    _MEMOS.append(cached)
    @wraps(fn)
    def call(graph: Any, **keywords: Any) -> Any:
        items = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in keywords.items()))
        return cached(Keyed((id(graph), items), (graph, items)))

    return call


def clear() -> None:
    """Forget every transformed graph and every result ``per_graph`` holds (a derivation made afresh then
    rebuilds them: tests compare it with the memoized one)."""
    for memo in _MEMOS:
        memo.cache_clear()

"""Exact sweeps: every quantity of ``estimate`` over a grid of step sizes and layouts, as NumPy arrays.

``sweep(model, batch=range(1, 1001), seq=range(128, 131073, 128), mode="train")`` derives the model once
per structure (``derivations.estimate`` caches derivations), binds every size that is not swept, and
evaluates each node's term as a polynomial over the grid with NumPy: integer terms are summed as one
polynomial first (rounding an integer changes nothing), each fractional term (a ZeRO shard ``P/d``, an
int4 byte count) is rounded up on its own, as ``Quantity.term_ints`` does, so every entry equals
``estimate(...).number(key)`` at that point, to the byte. Arrays are ``int64`` where a bound computed in
Python integers proves every intermediate value fits, else ``WideArray`` (two int64-sized limbs per cell,
``symbolic/grid.py``: FLOPs of long sequences), and ``object`` arrays of Python ints only past about 2^100.
``outputs=["flops", ...]`` evaluates only the quantities named.

The step sizes ``batch``, ``seq`` and ``new_tokens`` are array axes; the layout degrees ``tp``, ``pp``,
``dp`` and ``micro_batches`` are looped over (each combination is checked as ``estimate`` checks it).

>>> out = sweep("gpt2", mode="train", batch=[1, 2], seq=[512, 1024])
>>> out["total_bytes"].shape, int(out["total_bytes"][1, 0])
((2, 2), 2522275840)
>>> estimate("gpt2", mode="train", batch=2, seq=512).number("total_bytes")
2522275840
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict
from functools import lru_cache
from typing import Any

from memderive.derivations.estimate import estimate, structure_key
from memderive.derivations.memo import Keyed
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import Options, OptionsError, given_options
from memderive.symbolic.dims import b, n, s
from memderive.symbolic.grid import INT64_MAX, GridError, GridPlan, WideArray, grid_plan
from memderive.symbolic.lazy import lazy

np = lazy("numpy")

__all__ = ["sweep", "SWEEPABLE", "SweepError", "MAX_POINTS", "MAX_LAYOUTS", "check_grid_size"]

#: Options that may be given as 1-D sequences; the first three are array axes, the others loops.
SWEEPABLE = ("batch", "seq", "new_tokens", "tp", "pp", "dp", "micro_batches")
AXES = {"batch": b, "seq": s, "new_tokens": n}
#: The most grid points a sweep evaluates (every quantity is an array of them: about 120 MB of int64 at the
#: limit), and the most layouts (each combination of tp, pp, dp, micro_batches is an estimate of its own).
MAX_POINTS = 2**20
MAX_LAYOUTS = 1024


class SweepError(OptionsError):
    """A sweep that cannot be evaluated as asked (bad sequences, an option that cannot be swept)."""


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence | range | np.ndarray) and not isinstance(value, str)


def _grid_values(name: str, value: Any) -> np.ndarray:
    items = list(np.asarray(value).ravel().tolist()) if isinstance(value, np.ndarray) else list(value)
    if not items:
        raise SweepError(f"--{name.replace('_', '-')}: the sweep is empty; give at least one value")
    low = 0 if name == "new_tokens" else 1
    for x in items:
        if isinstance(x, bool) or not isinstance(x, int) or x < low:
            raise SweepError(f"--{name.replace('_', '-')} values must be whole numbers >= {low}, got {x!r}")
    if max(items) > INT64_MAX:
        raise SweepError(f"--{name.replace('_', '-')} values must be below 2^63")
    return np.asarray(items, dtype=np.int64)


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def check_grid_size(lengths: dict[str, int]) -> None:
    """Refuse a grid of more than ``MAX_POINTS`` points or ``MAX_LAYOUTS`` layouts before anything is built,
    saying the size asked (``lengths``: values per swept option) and the limit.

    >>> check_grid_size({"batch": 10**10})
    Traceback (most recent call last):
    ...
    memderive.derivations.search.sweep.SweepError: the sweep has 10,000,000,000 points (--batch 10,000,000,000 values); the limit is 1,048,576 points: sweep coarser steps (start:stop:step) or fewer values
    """
    points = math.prod(lengths.values())
    asked = " x ".join(f"{_flag(k)} {v:,} values" for k, v in lengths.items())
    if points > MAX_POINTS:
        raise SweepError(f"the sweep has {points:,} points ({asked}); the limit is {MAX_POINTS:,} points: sweep "
                         "coarser steps (start:stop:step) or fewer values")
    layouts = math.prod(v for k, v in lengths.items() if k not in AXES)
    if layouts > MAX_LAYOUTS:
        raise SweepError(f"the sweep has {layouts:,} layouts ({asked}), each derived on its own; the limit is "
                         f"{MAX_LAYOUTS:,} layouts: give fewer --tp/--pp/--dp/--micro-batches values")


def _length(value: Any) -> int:
    return int(value.size) if isinstance(value, np.ndarray) else len(value)


def sweep(model: Any, options: Options | None = None, outputs: Sequence[str] | None = None,
          **kwargs: Any) -> dict[str, Any]:
    """Every quantity of ``estimate(model, ...)`` (or the ``outputs`` named) over the grid of the
    sequence-valued options.

    Args:
        model: anything ``estimate`` accepts.
        options: base ``Options`` (its fields are overridden by ``kwargs``).
        outputs: quantity keys to evaluate (``estimate(...).quantities``' keys); None: all of them.
        **kwargs: ``Options`` fields; any of ``SWEEPABLE`` may be a 1-D sequence.

    Returns:
        ``{quantity key: array}`` (``int64``, ``WideArray`` past int64, or ``object``), axes in the keyword
        order of the sequence-valued options.
    """
    if outputs is not None and (isinstance(outputs, str) or not all(isinstance(k, str) for k in outputs)):
        raise SweepError("outputs: give a list of quantity keys, e.g. outputs=['total_bytes']")
    fields = asdict(given_options(options, "sweep")) if options is not None else {}
    swept = [k for k, v in kwargs.items() if _is_sequence(v)]
    for k in swept:
        if k not in SWEEPABLE:
            raise SweepError(f"{k} cannot be swept; sweep any of {', '.join(SWEEPABLE)}")
    check_grid_size({k: _length(kwargs[k]) for k in swept})  # before a value is read: range(1, 10**12) is cheap
    grids = {k: _grid_values(k, kwargs[k]) for k in swept}
    fields.update({k: v for k, v in kwargs.items() if k not in grids})
    resolved = resolve_model(model)
    shape = tuple(len(grids[k]) for k in swept)
    loops = [k for k in swept if k not in AXES]
    axes = [k for k in swept if k in AXES]
    out: dict[str, np.ndarray] = {}
    if not loops:  # one layout: the arrays as evaluated (a quantity constant along an axis is a broadcast view)
        sub = _evaluate(resolved, fields, grids, axes, outputs)
        return {key: _full(values, shape) for key, values in sub.items()}
    for combo in itertools.product(*(range(len(grids[k])) for k in loops)):
        point = {**fields, **{k: int(grids[k][i]) for k, i in zip(loops, combo)}}
        sub = _evaluate(resolved, point, {k: grids[k] for k in axes}, axes, outputs)
        where = dict(zip(loops, combo))
        index = tuple(where.get(k, slice(None)) for k in swept)
        for key, values in sub.items():
            _place(out, key, shape, index, values)
    return out


def _full(values: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(values, WideArray):
        return values if values.shape == shape else values.broadcast_to(shape)
    if isinstance(values, np.ndarray):
        return values if values.shape == shape else np.broadcast_to(values, shape)
    wide = abs(int(values)) > INT64_MAX
    return np.broadcast_to(np.array(values, dtype=object if wide else np.int64), shape)


def _place(out: dict[str, np.ndarray], key: str, shape: tuple[int, ...], index: tuple, values: Any) -> None:
    arr: Any = out.get(key)
    if isinstance(values, np.ndarray):
        kind = "object" if values.dtype == object else "int64"
    elif isinstance(values, WideArray):
        kind = "wide"
    else:
        kind = "int64" if abs(int(values)) <= INT64_MAX else "wide" if abs(int(values)) < 2**126 else "object"
    rank = {"int64": 0, "wide": 1, "object": 2}
    have = None if arr is None else "wide" if isinstance(arr, WideArray) else "object" if arr.dtype == object else "int64"
    if have is None or rank[kind] > rank[have]:
        if kind == "object":
            new: Any = np.empty(shape, dtype=object) if arr is None else arr.astype(object)
        elif kind == "wide":
            new = WideArray(np.zeros(shape, np.int64), np.zeros(shape, np.uint64)) if arr is None else (
                WideArray.of(arr).copy())
        else:
            new = np.empty(shape, dtype=np.int64)
        arr = out[key] = new
    if isinstance(arr, WideArray):
        arr[index] = values
    else:
        arr[index] = values.astype(object) if isinstance(values, WideArray) else values


def _evaluate(model: Any, point: dict[str, Any], axes: dict[str, np.ndarray], order: list[str],
              outputs: Sequence[str] | None = None) -> dict[str, Any]:
    """The quantities at one layout, over the step-size axes (checked at their extremes, as estimate checks)."""
    probe = {**point, **{k: int(v.max()) for k, v in axes.items()}}
    try:
        options = Options.from_keywords(probe)
    except TypeError as exc:
        raise OptionsError(str(exc)) from None
    est = estimate(model, options)
    symbols = {AXES[k] for k in axes}
    bound = {k: v for k, v in est.values.items() if k not in symbols}
    key = (structure_key(est.model, options), tuple(sorted((x.name, v) for x, v in bound.items())),
           tuple(order))
    plans = _plans(Keyed(key, (est.quantities, bound)))
    if outputs is not None:
        unknown = [k for k in outputs if k not in plans]
        if unknown:
            raise SweepError(f"outputs: no quantity {', '.join(map(repr, unknown))} in this estimate; it has "
                             f"{', '.join(plans)}")
        plans = {k: plans[k] for k in dict.fromkeys(outputs)}
    env = {AXES[k].name: axes[k].reshape([-1 if j == i else 1 for j in range(len(order))])
           for i, k in enumerate(order)}
    done: dict[GridPlan, Any] = {}  # quantities equal once the sizes are bound (per GPU at t = 1) run once
    try:
        return {k: done[plan] if plan in done else done.setdefault(plan, plan.run(env)) for k, plan in plans.items()}
    except GridError as exc:
        raise SweepError(str(exc)) from None


@lru_cache(maxsize=1024)
def _plans(structure: Keyed) -> dict[str, GridPlan]:
    """Each quantity's grid plan, with every size that is not swept bound (once per structure and values)."""
    quantities, bound = structure.value
    return {q.key: grid_plan([t.expr.subs(bound) for t in q.breakdown.terms]) for q in quantities}

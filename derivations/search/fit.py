"""What fits on one GPU: the largest batch for a context, or the longest context for a batch.

Memory per GPU is linear in the batch ``b`` for a fixed context (weights and model states do
not depend on ``b``; the KV cache, activations and transient buffers are each ``b`` times
something), so the largest batch has a closed form, ``b = floor((M - fixed) / per_sequence)``.
In the context ``s`` it is not (eager attention's ``s^2`` scores, a sliding window's ``min``,
quantization scales), so the longest context is an exact integer search over a nondecreasing
function. Either answer is checked with ``derivations.estimate``: it fits, the next does not.

>>> f = fit("llama-2-7b", Options(mode="infer", batch=1, seq=2048, flash=True), 80 * 10**9, "batch")
>>> f.value, f.method, f.bytes_at <= 80 * 10**9 < f.bytes_next
(59, 'closed form', True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from memderive.derivations.estimate import estimate
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.models.model import Model
from memderive.derivations.options import ArgumentError, Options, OptionsError, capacity_bytes, given_options
from memderive.derivations.quantities.runtime import budget_bytes, budget_terms
from memderive.derivations.quantities.serving import vllm_startup
from memderive.derivations.quantity import exact_int
from memderive.symbolic.dims import b, s
from memderive.symbolic.errors import DerivationError, shown
from memderive.symbolic.expr import Expr, Number, total

__all__ = ["Fit", "FitError", "DoesNotFit", "fit", "SOLVE_FOR", "smallest_changes", "memory_budget", "VLLM_UTILIZATION"]

#: vLLM's ``gpu_memory_utilization`` default (vllm/engine/arg_utils.py, EngineArgs), the budget under --framework vllm.
VLLM_UTILIZATION = 0.9

SOLVE_FOR = {"batch": b, "seq": s}
#: Searches stop here: a context or batch beyond 2^40 means memory does not bound it.
LIMIT = 2**40


class FitError(DerivationError):
    """Nothing fits, or memory does not bound the answer."""


class DoesNotFit(FitError):
    """Not even a batch (or context) of 1 fits: an answer, not bad input (``memderive fit`` exits 1)."""

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


@dataclass(frozen=True, slots=True)
class Fit:
    """The answer: ``value`` of ``solve_for`` fits ``capacity`` bytes; ``value + 1`` does not. With a GPU
    named (``options.gpu``) the bytes are device bytes (``quantities.runtime``: the CUDA context, cuBLAS
    workspace, NCCL buffers and the allocator's reserve included), else the figure that decides
    (``quantities.runtime.deciding``: ``total_bytes``, or ``peak_bytes`` where the step timeline runs the step
    call by call). ``budget`` names it, and the JSON keys are that name, meaning what it means in ``estimate``.

    ``fixed`` and ``per_unit`` are the closed form's parts (``total = fixed + per_unit * b``),
    set only when ``method`` is ``closed form``.
    """

    solve_for: str
    value: int
    capacity: int
    bytes_at: int
    bytes_next: int | None  # None when the model's positions, not memory, end the search
    method: str
    fixed: int | None = None
    per_unit: Fraction | int | None = None
    budget: str = "total_bytes"  # what bytes_at counts: total_bytes, or device_bytes with a GPU named

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {self.solve_for: self.value, "capacity_bytes": self.capacity,
                               self.budget: self.bytes_at, f"next_{self.budget}": self.bytes_next,
                               "method": self.method, "budget": self.budget}
        if self.fixed is not None and self.per_unit is not None:
            per = Fraction(self.per_unit)
            out["fixed_bytes"] = self.fixed
            # a number: whole bytes per unit, or the exact fraction's value (its digits under _exact)
            out["bytes_per_unit"] = int(per) if per.denominator == 1 else float(per)
            if per.denominator != 1:
                out["bytes_per_unit_exact"] = f"{per.numerator}/{per.denominator}"
        return out


def _terms_in(model: Model, options: Options, symbol: Expr) -> list[Expr]:
    """The per-GPU total's terms with every size bound except ``symbol``."""
    est = estimate(model, options)
    values = {k: v for k, v in est.values.items() if k != symbol}
    terms = [t.expr.subs(values) for t in budget_terms(est)]  # the runtime's too when a GPU is named
    left = set().union(*(t.free_symbols for t in terms)) - {symbol}
    if left:
        raise FitError(f"cannot solve: {', '.join(map(str, left))} left unbound")
    return terms


def max_context(model: Model, options: Options) -> int | None:
    """The longest prompt a model with learned positions takes (positions less generated tokens)."""
    if model.arch.positions != "learned" or model.max_positions is None:
        return None
    return model.max_positions - options.new_tokens


def _linear(expr: Expr, symbol: Expr) -> tuple[Number, Number] | None:
    """``(c0, c1)`` with ``expr = c0 + c1 * symbol``, or None when ``expr`` is not linear in it."""
    c0: Number = 0
    c1: Number = 0
    for coeff, monomial in expr.terms():
        if monomial == 1:
            c0 += coeff
        elif monomial == symbol:
            c1 += coeff
        else:
            return None
    return c0, c1


def _search(cost, capacity: int) -> int:
    """Largest x >= 1 with cost(x) <= capacity, for a nondecreasing cost (0 when none)."""
    if cost(1) > capacity:
        return 0
    lo, hi = 1, 2
    while cost(hi) <= capacity:
        lo, hi = hi, hi * 2
        if hi > LIMIT:
            raise FitError(f"memory does not bound the answer below {LIMIT:,}")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if cost(mid) <= capacity else (lo, mid)
    return lo


def fit(model: Any, options: Options, capacity: int, solve_for: str) -> Fit:
    """The largest ``batch`` (for ``options.seq``) or ``seq`` (for ``options.batch``) that fits.

    Args:
        model: anything ``derivations.estimate`` accepts.
        options: ``train`` or ``infer`` options; the value of ``solve_for`` in them is ignored.
        capacity: bytes of one GPU's memory.
        solve_for: ``batch`` or ``seq``.

    Raises:
        FitError: not even 1 fits, or memory does not bound the answer.
    """
    if not isinstance(solve_for, str) or solve_for not in SOLVE_FOR:
        raise ArgumentError(f"solve for batch or seq, not {shown(solve_for)}")
    if given_options(options, "fit") is None:
        raise ArgumentError("fit needs options: fit(model, Options(mode=\"train\", batch=1, seq=2048), capacity, "
                            "\"batch\")")
    capacity_bytes(capacity)
    model, symbol = resolve_model(model), SOLVE_FOR[solve_for]
    if options.framework == "vllm" and options.mode == "infer" and options.gpu is not None:
        return _vllm_fit(model, options, solve_for)
    capacity = memory_budget(options, capacity)[0]
    terms = _terms_in(model, options, symbol)

    def cost(x: int) -> int:  # whole bytes per node, as Quantity.value counts them
        return sum(exact_int(term.evaluate({symbol: x}), "total_bytes") for term in terms)

    linear = _linear(total(terms), symbol) if symbol == b else None
    if linear is not None and linear[1] > 0:
        fixed, per_unit = linear
        value, method = max(math.floor(Fraction(capacity - fixed) / per_unit), 0), "closed form"
        while value > 0 and cost(value) > capacity:  # rounding each node up can cost a unit
            value -= 1
    else:
        fixed = per_unit = None
        value = _search(cost, capacity)
        method = "integer search"
    if value == 0:
        raise DoesNotFit(f"{model.name} does not fit: {solve_for} 1 needs {cost(1):,} bytes per GPU, "
                         f"more than {capacity:,}", cost(1))
    limit = max_context(model, options) if solve_for == "seq" else None
    if limit is not None and value >= limit:
        at = _needed(model, replace(options, seq=limit))
        return Fit(solve_for, limit, capacity, at, None, "the model's learned positions end the search",
                   budget=_budget(model, replace(options, seq=limit)))
    at, nxt = (_needed(model, replace(options, **{solve_for: x})) for x in (value, value + 1))
    if not at <= capacity < nxt:  # pragma: no cover - a bug, not bad input
        raise DerivationError(f"fit check failed: {solve_for} {value} needs {at:,}, {value + 1} needs {nxt:,}")
    return Fit(solve_for, value, capacity, at, nxt, method, None if fixed is None else exact_int(fixed, "fixed"),
               per_unit, _budget(model, replace(options, **{solve_for: value})))


def memory_budget(options: Options, capacity: int) -> tuple[int, str]:
    """The one budget rule of ``fit`` and ``plan``: under ``--framework vllm`` in inference, vLLM's
    ``gpu_memory_utilization`` (0.9 unless given) of the memory, what its engine takes; otherwise the whole memory
    (with a GPU named, the runtime's own bytes are counted in ``device_bytes`` instead of reserved).

    >>> memory_budget(Options(mode="infer", batch=1, seq=8, framework="vllm"), 80 * 2**30)[0] == 72 * 2**30
    True
    >>> memory_budget(Options(mode="infer", batch=1, seq=8), 80 * 2**30)[0] == 80 * 2**30
    True
    """
    if options.framework == "vllm" and options.mode == "infer":
        utilization = options.gpu_memory_utilization or VLLM_UTILIZATION
        return int(capacity * utilization), f"{utilization:g} of each GPU (vLLM's gpu_memory_utilization)"
    return capacity, "the whole GPU"


def _vllm_fit(model: Model, options: Options, solve_for: str) -> Fit:
    """vLLM's engine model, as ``estimate --framework vllm --gpu`` reports it (``quantities.serving``): its budget,
    gpu_memory_utilization x the memory CUDA reports, less the weights, the profiled activation peak, the NCCL
    buffers and the CUDA graphs, in KV blocks; each request of max_model_len = seq + new tokens takes whole blocks.
    The largest batch is the maximum concurrency vLLM prints, rounded down (at most max_num_seqs); the longest
    context for a batch, the most whole blocks each of its requests can have."""
    probe = replace(options, **{solve_for: 1}) if solve_for == "batch" else replace(options, seq=1)
    v = vllm_startup(estimate(model, probe))
    assert v is not None
    fixed = v.weights + v.activation_peak + v.non_torch + v.cuda_graphs
    method = "vLLM's engine: its KV blocks over the blocks of each request"
    if solve_for == "batch":
        per_request = -(-v.max_model_len // v.block_size)
        value = min(v.kv_cache_blocks // per_request, v.max_num_seqs)
        if value == 0:
            raise DoesNotFit(f"{model.name} does not fit: vLLM's {v.kv_cache_blocks:,} KV blocks hold no request of "
                             f"{v.max_model_len:,} tokens ({per_request:,} blocks)", fixed + per_request * v.block_bytes)
        capped = value == v.max_num_seqs and v.kv_cache_blocks // per_request > value
        nxt = None if capped else fixed + (value + 1) * per_request * v.block_bytes
        return Fit("batch", value, v.budget, fixed + value * per_request * v.block_bytes, nxt,
                   method + (" (vLLM's max_num_seqs ends the search)" if capped else ""), fixed,
                   per_request * v.block_bytes, "vllm_bytes")
    blocks = v.kv_cache_blocks // options.batch  # whole blocks per request
    value = blocks * v.block_size - options.new_tokens
    if value < 1:
        raise DoesNotFit(f"{model.name} does not fit: vLLM's {v.kv_cache_blocks:,} KV blocks hold no {options.batch:,} "
                         "requests", fixed + options.batch * v.block_bytes)
    limit = max_context(model, options)
    at = fixed + options.batch * blocks * v.block_bytes
    if limit is not None and value >= limit:
        used = -(-(limit + options.new_tokens) // v.block_size)
        return Fit("seq", limit, v.budget, fixed + options.batch * used * v.block_bytes, None,
                   "the model's learned positions end the search", budget="vllm_bytes")
    return Fit("seq", value, v.budget, at, at + options.batch * v.block_bytes, method, budget="vllm_bytes")


def _needed(model: Model, options: Options) -> int:
    """The bytes held against the capacity: device bytes with a GPU named, else ``total_bytes``."""
    return budget_bytes(estimate(model, options))[0]


def _budget(model: Model, options: Options) -> str:
    """The name of what ``_needed`` counts: ``device_bytes`` with a GPU named, else the deciding figure."""
    return budget_bytes(estimate(model, options))[1]


def _candidates(model: Model, options: Options, solve_for: str) -> list[tuple[str, Options]]:
    """One-option changes that lower memory, the least disruptive first; a change the options refuse (tensor
    parallelism under ``--implementation hf``) is not one to propose."""
    out: list[tuple[str, Options]] = []

    def change(label: str, **fields: Any) -> None:
        try:
            out.append((label, replace(options, **fields)))
        except OptionsError:
            pass

    heads = model.sizes["a"]
    for tp in (2, 4, 8, 16):
        if tp > options.tp and heads % tp == 0 and model.sizes.get("f", tp) % tp == 0:
            change(f"--tp {tp}", tp=tp)
    if options.mode == "train":
        if options.recompute != "full":
            change("--recompute full", recompute="full")
        if options.zero < 3:
            dp = max(options.dp, 8)
            change(f"--zero 3 --dp {dp}", zero=3, dp=dp)
        if options.optimizer in ("adamw", "adam"):
            change("--optimizer adam-8bit", optimizer="adam-8bit")
    else:
        base = options.weight_dtype or "bf16"
        for lower in ("fp8", "int4"):
            if base in ("fp32", "fp16", "bf16") or (base in ("fp8", "int8") and lower == "int4"):
                change(f"--weight-dtype {lower}", weight_dtype=lower)
        if options.kv_dtype is None:
            change("--kv-dtype fp8", kv_dtype="fp8")
    return out


def smallest_changes(model: Any, options: Options, capacity: int, solve_for: str,
                     limit: int = 4) -> list[tuple[str, int]]:
    """Changes with which a ``solve_for`` of 1 fits, each with the bytes it then needs: more tensor
    parallelism (the smallest degree that fits), recompute, ZeRO-3, an 8-bit optimizer, a
    lower-precision base or KV cache, and a shorter context (the longest that fits, for a batch)."""
    model = resolve_model(model)
    one = replace(options, **{solve_for: 1})
    found: list[tuple[str, int]] = []
    budget = memory_budget(options, capacity)[0]  # fit below applies the rule to capacity itself
    tp_found = False
    for label, changed in _candidates(model, one, solve_for):
        if tp_found and label.startswith("--tp"):
            continue
        try:
            needed = _needed(model, changed)
        except DerivationError:
            continue
        if needed <= budget:
            found.append((label, needed))
            tp_found = tp_found or label.startswith("--tp")
    if not found:  # no single change: the changes together, in order, until they fit
        combined, labels = one, []
        for label, changed in _candidates(model, one, solve_for):
            if label.startswith("--tp") and any(x.startswith("--tp") for x in labels):
                continue
            diff = {k: getattr(changed, k) for k in ("tp", "recompute", "zero", "dp", "optimizer", "weight_dtype",
                                                      "kv_dtype") if getattr(changed, k) != getattr(one, k)}
            try:
                combined, labels = replace(combined, **diff), [*labels, label]
                needed = _needed(model, combined)
            except DerivationError:
                continue
            if needed <= budget:
                found.append((" ".join(labels), needed))
                break
    if solve_for == "batch" and options.seq is not None and options.seq > 1:
        try:
            shorter = fit(model, replace(options, batch=1), capacity, "seq")
            if shorter.value < options.seq:
                found.append((f"--seq {shorter.value}", shorter.bytes_at))
        except FitError:
            pass
    return found[:limit]

"""Conditions under which a claim holds: the conventions of other accountings, each named as a condition
(``derivations.conventions`` is another thing: whole peer calculators reproduced for ``compare``).

Our derivation follows one convention per quantity (ZeRO's mixed-precision Adam: 16-bit weights
and gradients, fp32 master weights, momentum and variance; a KV cache of ``s + n`` tokens and
``a_kv`` heads). Notes often follow another one. A claim that is exact under such a convention is
``conditional``, with the convention named, as it is for FlashAttention or dropout:

* ``with s counting every cached token``: a cache formula without ``n`` (``4blhs``), exact with n = 0;
* ``with fp32 gradients``: gradients kept in fp32 (the 18-bytes-per-parameter accounting);
* ``with an fp32 copy of the gradients``: 16-bit gradients and an fp32 copy (20 bytes per parameter);
* ``with Adam without fp32 master weights``: 16-bit weights and gradients, Adam's two fp32 states (12 bytes);
* ``with causal attention counted as half``: the score and value products of a causal mask counted for the
  lower triangle only, as FlashAttention's benchmarks do (``flops // (2 if causal else 1)``; Dao 2023,
  FlashAttention-2 §4.1). Our FLOPs are what the kernels compute, the whole s x s square.

(KV caches without GQA are an architectural switch, ``derivations.claims.context._arch_flips``.)

>>> from memderive.derivations.claims.spec import quantity_spec
>>> from memderive.derivations.claims.context import build_context
>>> from memderive.derivations.options import Options
>>> ctx = build_context(quantity_spec("model_states.total"), "gpt2", Options(mode="train", batch=1, seq=8))
>>> from memderive.symbolic.dims import Psi
>>> [(label.split(" (")[0], ours) for label, ours in conditions(ctx, ctx.compare(16 * Psi))]
[('with fp32 gradients', 18*Psi), ('with an fp32 copy of the gradients', 20*Psi), ('with Adam without fp32 master weights', 12*Psi)]
"""

from __future__ import annotations

from memderive.derivations.claims.context import Comparison, Context
from memderive.derivations.quantities.model_states import optimizer_state_bytes
from memderive.symbolic import dims_sympy as ds
from memderive.symbolic.dtypes import dtype
from memderive.derivations.claims.parts import path_matches
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

__all__ = ["conditions"]


def _sum(cmp: Comparison, suffix: str) -> sp.Expr:
    return sp.expand(sp.Add(*(p.expr for p in cmp.pieces if p.path.endswith(suffix))))


def _states(ctx: Context, cmp: Comparison) -> list[tuple[str, sp.Expr]]:
    """Model-state conventions of mixed-precision training (16-bit weights)."""
    o = ctx.options
    if (o.mode != "train" or ctx.quantity.key not in ("model_state_bytes", "total_bytes") or o.offload
            or o.precision != "master" or o.precision_aware_optimizer):
        return []
    width = dtype(o.dtype).nbytes
    if width >= 4:
        return []
    k = optimizer_state_bytes(o.optimizer, o.dtype)
    grads, master = _sum(cmp, "model_states/gradients"), _sum(cmp, "model_states/optimizer/master")
    out = []
    if grads != 0:
        out += [(f"with fp32 gradients ({width} + 4 + {k} = {width + 4 + k} bytes per parameter)",
                 cmp.ours + grads * sp.Rational(4 - width, width)),
                (f"with an fp32 copy of the gradients ({width} + {width} + 4 + {k} = {2 * width + 4 + k} bytes "
                 "per parameter)", cmp.ours + grads * sp.Rational(4, width))]
    if master != 0:
        out.append((f"with Adam without fp32 master weights ({width} + {width} + {k - 4} = {2 * width + k - 4} bytes "
                    "per parameter)", cmp.ours - master))
    return out


def conditions(ctx: Context, cmp: Comparison) -> list[tuple[str, sp.Expr]]:
    """``(label, ours under that convention)`` for the conventions that apply to this comparison."""
    out = []
    if (ctx.spec.name.startswith(("kv_cache", "infer")) and ds.n in cmp.ours.free_symbols
            and ds.n not in cmp.theirs.free_symbols and ds.n not in ctx.pins):
        out.append(("with s counting every cached token (n = 0: the cache of a prompt; or give --new-tokens 0)",
                    sp.expand(cmp.ours.xreplace({ds.n: 0}))))
    core = _sum_where(cmp, "attn/core")
    if ctx.spec.unit == "FLOPs" and core != 0:
        out.append(("with causal attention counted as half (the masked triangle of the scores skipped, as "
                    "FlashAttention's benchmarks count)", sp.expand(cmp.ours - core / 2)))
    return out + [(label, sp.expand(ours)) for label, ours in _states(ctx, cmp)]


def _sum_where(cmp: Comparison, node: str) -> sp.Expr:
    return sp.expand(sp.Add(*(p.expr for p in cmp.pieces if path_matches(p.path, node))))

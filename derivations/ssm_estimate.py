"""``estimate`` for the hand-written state space and hybrid models (``derivations.models.ssm``): parameters
(per layer kind and in all), weight bytes, and in inference the per-layer state that replaces the KV cache.
Training memory is not derived yet for these models (the scan's saved tensors); asking for it is refused.

The state does not grow with the context: per layer of mamba2-2.7b (b = 1), conv_state (5,120 + 2*128) * 4 * 2 B
= 43,008 B, ssm_state 80 * 64 * 128 * 4 B = 2,621,440 B, an 8 B counter; 64 layers: 170,525,184 B.

>>> e = ssm_estimate(find_ssm("mamba2-2.7b"), Options(mode="infer", batch=1, seq=4096))
>>> e.value("parameters"), e.value("state_bytes")
(2702599680, 170525184)
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from memderive.derivations.models.ssm import SsmModel, find_ssm
from memderive.derivations.options import Options, OptionsError
from memderive.symbolic.derive import parameters
from memderive.symbolic.dims import b, n, s
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.expr import Expr

__all__ = ["SsmEstimate", "SsmQuantity", "ssm_estimate", "find_ssm", "LAYER_TITLES"]

#: The options an SSM estimate reads; any other option set is refused by name.
READ = ("mode", "batch", "seq", "new_tokens", "dtype", "weight_dtype", "kv_dtype")
#: The element types the estimate holds weights and state in (transformers' model dtypes).
FLOATS = ("fp32", "fp16", "bf16")
LAYER_TITLES = {"embed": "embeddings", "mamba_layer": "one Mamba 2 layer", "attention_layer": "one attention layer",
                "head": "final norm and LM head"}


@dataclass(frozen=True, slots=True)
class SsmQuantity:
    """One derived figure: its formula in the dimension letters, its value, its terms (path, formula, value)."""

    key: str
    title: str
    formula: Expr
    value: int
    unit: str
    terms: tuple[tuple[str, Expr, int], ...] = ()


@dataclass(frozen=True, slots=True)
class SsmEstimate:
    model: SsmModel
    opts: Options
    values: dict
    quantities: tuple[SsmQuantity, ...]

    def value(self, key: str) -> int:
        return self.quantity(key).value

    def quantity(self, key: str) -> SsmQuantity:
        return next(q for q in self.quantities if q.key == key)

    def to_json(self) -> dict:
        return {"model": self.model.name, "family": self.model.family, "mode": self.opts.mode,
                **{q.key: q.value for q in self.quantities}}


def _check(model: SsmModel, opts: Options) -> None:
    if opts.mode == "train":
        raise OptionsError(f"{model.name}: training memory of {model.family} models is not derived by hand yet (the "
                           "scan's saved tensors); use --mode params or --mode infer, or give its config.json, which "
                           "is traced from transformers' torch path")
    for flag, value in (("--weight-dtype", opts.weight_dtype), ("--kv-dtype", opts.kv_dtype), ("--dtype", opts.dtype)):
        if value is not None and dtype(value).name not in FLOATS:
            raise OptionsError(f"{model.name}: {flag} {value} is not modelled for {model.family} models yet (quantized "
                               f"weights' scales, a quantized state); give one of {', '.join(FLOATS)}")
    base = replace(Options(), **{k: getattr(opts, k) for k in READ})
    other = [f.name for f in fields(Options) if getattr(opts, f.name) != getattr(base, f.name)]
    if other:
        raise OptionsError(f"{model.name}: {', '.join(other)} not modelled for {model.family} models yet; the "
                           f"estimate reads {', '.join(READ)} only")


def _quantity(key: str, title: str, formula: Expr, values: dict, unit: str,
              terms: tuple[tuple[str, Expr], ...] = ()) -> SsmQuantity:
    return SsmQuantity(key, title, formula, int(formula.evaluate(values)), unit,
                       tuple((path, expr, int(expr.evaluate(values))) for path, expr in terms))


def ssm_estimate(model: SsmModel, opts: Options) -> SsmEstimate:
    """Parameters and weights; with ``--mode infer`` the state after a prompt of s tokens and n new ones."""
    _check(model, opts)
    graph = model.graph()
    values = dict(model.values())
    out = []
    for block in graph.blocks:
        per = parameters(graph, blocks=[block.name], per_repeat=True)
        out.append(_quantity(f"parameters_{block.name}", f"Parameters of {LAYER_TITLES[block.name]}", per.total,
                             values, "elements", tuple((t.path, t.expr) for t in per.terms)))
    total = parameters(graph)
    out.append(_quantity("parameters", "Parameters", total.total, values, "elements",
                         tuple((blk.name, blk.repeat * q.formula) for blk, q in zip(graph.blocks, out))))
    weight = dtype(opts.weight_dtype or opts.dtype)
    out.append(_quantity("weight_bytes", f"Weights ({weight.name})", total.total * weight.nbytes, values, "bytes"))
    if opts.mode == "infer":
        values.update({b: opts.batch, s: opts.seq, n: opts.new_tokens})
        state = model.state(opts.kv_dtype or opts.dtype)
        out.append(_quantity("state_bytes", "Inference state (replaces the KV cache)", state.total, values, "bytes",
                             tuple((t.path, t.expr) for t in state.terms)))
        out.append(_quantity("inference_bytes", "Weights plus state", total.total * weight.nbytes + state.total,
                             values, "bytes"))
    return SsmEstimate(model, opts, values, tuple(out))

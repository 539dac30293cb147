"""Published formulas, each with its citation and the options under which it applies.

Every entry says which quantity of ours it speaks about, for which model and options, and how
our graph-derived closed form relates to it: ``difference`` is ours minus theirs (0 when the
published formula is exact for the graph; otherwise the lower-order terms the paper omits).
``tests/test_literature.py`` derives each one from the graph and checks that relation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from memderive.symbolic import dims_sympy as ds
from memderive.symbolic.formula import Citation, Formula
from memderive.symbolic.lazy import lazy, lazy_names

sp = lazy("sympy")

__all__ = ["Published", "PUBLISHED", "published"]  # noqa: F822 (PUBLISHED: __getattr__)

ZERO = Citation("rajbhandari-2020", "§5, Figure 1")

#: a GPT-2-architecture model whose FFN width is not 4h (for the d_ff generalisation)
GPT_FFN_3000 = {"model_type": "gpt2", "n_embd": 1024, "n_head": 16, "n_layer": 4, "n_positions": 1024,
                "vocab_size": 50257, "n_inner": 3000}


@dataclass(frozen=True, slots=True)
class Published:
    formula: Formula
    quantity: str  # key of an Estimate quantity
    model: Any  # bundled name or config dict
    options: Mapping[str, Any] = field(default_factory=dict)
    difference: sp.Expr = field(default_factory=lambda: sp.Integer(0))  # ours - published
    why: str = ""  # what the difference is


def _f(name: str, expr: sp.Expr, locus: str, key: str = "korthikanti-2022", *assumptions: str) -> Formula:
    return Formula(name, expr, Citation(key, locus), assumptions)


_TRAIN = {"mode": "train", "batch": 1, "seq": 2048, "attention": "eager"}  # the papers: the scores saved
_TRAIN_1K = {**_TRAIN, "seq": 1024}  # for GPT-2-sized models: 1,024 learned positions
_K_ASSUME = "16-bit activations, 1-byte dropout masks, LayerNorm statistics neglected"

@cache
def published() -> tuple[Published, ...]:
    """``PUBLISHED``: the entries, built on first use (importing this module builds no SymPy symbol)."""
    Psi, V, a, b, d, f, h, l, n_ctx, p, s, t = (ds.symbols()[name] for name in (
        "Psi", "V", "a", "b", "d", "f", "h", "l", "n_ctx", "p", "s", "t"))
    return (
        Published(_f("activations per layer", s * b * h * (34 + 5 * a * s / h), "Eq. 1", "korthikanti-2022",
                     _K_ASSUME), "activation_bytes_per_layer", "gpt3-175b", _TRAIN),
        Published(_f("activations per layer, tensor parallel", s * b * h * (10 + 24 / t + 5 * a * s / (h * t)),
                     "Table 2, Eq. 2"), "activation_bytes_per_layer", "gpt3-175b", {**_TRAIN, "tp": 8}),
        Published(_f("activations per layer, tensor + sequence parallel", s * b * h / t * (34 + 5 * a * s / h),
                     "Table 2, Eq. 4"), "activation_bytes_per_layer", "gpt3-175b", {**_TRAIN, "tp": 8, "sp": True}),
        Published(_f("activations per layer, tensor parallel + selective recompute", s * b * h * (10 + 24 / t),
                     "Table 2"), "activation_bytes_per_layer", "gpt3-175b",
                  {**_TRAIN, "tp": 8, "recompute": "selective"}),
        Published(_f("activations per layer, tensor + sequence parallel + selective recompute", 34 * s * b * h / t,
                     "Table 2, Eq. 6"), "activation_bytes_per_layer", "gpt3-175b",
                  {**_TRAIN, "tp": 8, "sp": True, "recompute": "selective"}),
        Published(_f("activations per layer, full recompute", 2 * s * b * h, "Table 2"),
                  "activation_bytes_per_layer", "gpt3-175b", {**_TRAIN, "recompute": "full"}),
        Published(_f("activations, first pipeline stage (1F1B), tensor + sequence parallel",
                     s * b * h * l / t * (34 + 5 * a * s / h) + s * b * h * p / t,
                     "Eq. 5 and §4.3 (embedding dropout)"),
                  "activation_bytes", "gpt3-175b", {**_TRAIN, "tp": 8, "sp": True, "pp": 8}),
        Published(_f("activations per layer with FFN width f", s * b * h * (18 + 4 * f / h + 5 * a * s / h),
                     "compute_activation_memory(): 18 + 4 ffn/h", "megatron-theoretical-memory"),
                  "activation_bytes_per_layer", GPT_FFN_3000, _TRAIN_1K),
        Published(_f("parameters", l * (12 * h**2 + 13 * h) + (V + n_ctx) * h, "Eq. 2", "narayanan-2021"),
                  "parameters", "gpt3-175b", difference=2 * h, why="the final LayerNorm (2h) is not in Eq. 2"),
        Published(_f("non-embedding parameters", 12 * l * h**2, "Eq. 2.1", "kaplan-2020",
                     "biases, LayerNorm and embeddings excluded"),
                  "parameters", "gpt3-175b", difference=13 * h * l + V * h + n_ctx * h + 2 * h,
                  why="biases and LayerNorms (13h per layer, 2h final) and the embeddings (Vh + n_ctx h)"),
        Published(Formula("mixed-precision Adam model states", 16 * Psi, Citation("rajbhandari-2020", "§3.1")),
                  "model_state_bytes", "gpt2", _TRAIN_1K),
        Published(Formula("ZeRO stage 1 (P_os)", 4 * Psi + 12 * Psi / d, ZERO), "model_state_bytes", "gpt2",
                  {**_TRAIN_1K, "dp": 64, "zero": 1}),
        Published(Formula("ZeRO stage 2 (P_os+g)", 2 * Psi + 14 * Psi / d, ZERO), "model_state_bytes", "gpt2",
                  {**_TRAIN_1K, "dp": 64, "zero": 2}),
        Published(Formula("ZeRO stage 3 (P_os+g+p)", 16 * Psi / d, ZERO), "model_state_bytes", "gpt2",
                  {**_TRAIN_1K, "dp": 64, "zero": 3}),
    )


#: ``PUBLISHED`` by its name, built on first read
__getattr__ = lazy_names(__name__, PUBLISHED=published)

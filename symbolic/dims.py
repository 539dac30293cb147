"""The one table of dimension symbols.

Every size that appears in a shape or a formula is declared here, once, with its
meaning and its LaTeX form. Nothing else in the codebase calls ``sp.Symbol``.

>>> from memderive.symbolic.dims import b, s, h
>>> b * s * h
b*h*s

The names are ``symbolic.expr`` symbols (no SymPy); ``Dim.symbol`` is the SymPy symbol (positive,
integer) for closed forms and the checker, made on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memderive.symbolic.expr import Expr, symbol
from memderive.symbolic.lazy import lazy

if TYPE_CHECKING:
    import sympy as sp
else:
    sp = lazy("sympy")

__all__ = ["Dim", "DIMS", "by_name", "sym", "b", "s", "h", "a", "a_kv", "d_h", "d_r", "f", "l", "V", "n_ctx", "n_type",
           "n", "w", "l_w", "g", "r", "t", "p", "d", "m", "v", "Psi", "E", "k", "f_e", "f_s", "l_d", "d_c", "d_cq", "d_hR",
           "d_v", "ep", "etp", "cp", "Psi_a", "d_lat", "d_in", "n_sh", "d_sh", "d_st", "n_g", "d_cv", "l_a", "l_m", "l_f", "l_e", "s_ch"]


@dataclass(frozen=True, slots=True)
class Dim:
    """A named positive-integer size."""

    name: str
    meaning: str
    latex: str

    @property
    def symbol(self) -> Any:
        """The SymPy symbol (positive, integer); imports SymPy."""
        return sp.Symbol(self.name, positive=True, integer=True)

    @property
    def expr(self) -> Expr:
        """The expression symbol graph code computes with."""
        return symbol(self.name)


DIMS: tuple[Dim, ...] = (
    # model sizes
    Dim("b", "micro-batch size (sequences)", "b"),
    Dim("s", "sequence length (tokens)", "s"),
    Dim("h", "hidden size", "h"),
    Dim("a", "attention (query) heads", "a"),
    Dim("a_kv", "key/value heads", "a_{kv}"),
    Dim("d_h", "head dimension", "d_{h}"),
    Dim("d_r", "rotary dimensions of each head (partial rotary; d_h when every dimension rotates)", "d_{r}"),
    Dim("f", "FFN (MLP) width", "f"),
    Dim("l", "transformer layers", "l"),
    Dim("V", "vocabulary size", "V"),
    Dim("n_ctx", "learned position embeddings (max positions)", "n_{ctx}"),
    Dim("n_type", "token type embeddings", "n_{type}"),
    # mixture of experts (GShard's E experts, top-k routing; DeepSeekMoE's shared experts)
    Dim("E", "routed experts per MoE layer", "E"),
    Dim("k", "experts each token is routed to (top-k)", "k"),
    Dim("f_e", "routed expert MLP width", "f_{e}"),
    Dim("f_s", "shared expert MLP width (all shared experts together)", "f_{s}"),
    Dim("l_d", "layers with a dense MLP among the MoE layers", "l_{d}"),
    Dim("d_lat", "latent width the routed experts work in (moe_latent_size)", "d_{lat}"),
    # multi-head latent attention (DeepSeek-V2 arXiv:2405.04434 §2.1 notation)
    Dim("d_c", "key/value latent rank (kv_lora_rank)", "d_{c}"),
    Dim("d_cq", "query latent rank (q_lora_rank)", "d_{c}'"),
    Dim("d_hR", "decoupled rotary head dimension (qk_rope_head_dim)", "d_{h}^{R}"),
    Dim("d_v", "value head dimension (v_head_dim)", "d_{v}"),
    # state space layers (Mamba-2, Dao & Gu 2024, arXiv:2405.21060; transformers' Mamba2Mixer names)
    Dim("d_in", "SSM inner width (intermediate_size = expand x hidden size)", "d_{in}"),
    Dim("n_sh", "SSM heads (num_heads)", "n_{sh}"),
    Dim("d_sh", "SSM head dimension (head_dim)", "d_{sh}"),
    Dim("d_st", "SSM state size per head (state_size, Mamba-2's N)", "d_{st}"),
    Dim("n_g", "SSM groups sharing B and C (n_groups)", "n_{g}"),
    Dim("d_cv", "SSM causal convolution kernel (conv_kernel)", "d_{cv}"),
    Dim("l_a", "attention layers of a hybrid model", "l_{a}"),
    Dim("l_m", "Mamba layers of a hybrid model", "l_{m}"),
    Dim("l_f", "dense MLP layers of a hybrid model", "l_{f}"),
    Dim("l_e", "mixture-of-experts layers of a hybrid model", "l_{e}"),
    Dim("s_ch", "tokens per SSM scan chunk (chunk_size, Mamba-2's Q)", "s_{ch}"),
    # inference
    Dim("n", "generated tokens", "n"),
    Dim("w", "sliding attention window", "w"),
    Dim("l_w", "layers with a sliding attention window", "l_{w}"),
    Dim("g", "quantization group size", "g"),
    # fine-tuning
    Dim("r", "LoRA rank", "r"),
    # strategy degrees
    Dim("t", "tensor-parallel degree", "t"),
    Dim("p", "pipeline-parallel degree", "p"),
    Dim("d", "data-parallel degree", "d"),
    Dim("m", "micro-batches per step", "m"),
    Dim("v", "virtual pipeline stages per device", "v"),
    Dim("ep", "expert-parallel degree", "e_{p}"),
    Dim("etp", "expert tensor-parallel degree (MoE parallel folding)", "e_{tp}"),
    Dim("cp", "context-parallel degree", "c_{p}"),
    # aggregate: the parameter count, as papers write model-state formulas (ZeRO's Psi)
    Dim("Psi", "parameters held by one GPU", "\\Psi"),
    # the parameters one token uses (a mixture of experts' "active parameters": Psi of a dense model)
    Dim("Psi_a", "active parameters (those one token uses)", "\\Psi_{a}"),
)

_BY_NAME = {dim.name: dim for dim in DIMS}


def by_name(name: str) -> Dim:
    """Look a dimension up by its name; unknown names raise ``KeyError``."""
    return _BY_NAME[name]


def sym(name: str) -> Expr:
    """The expression symbol of a declared dimension (``by_name(name).symbol`` is SymPy's)."""
    return _BY_NAME[name].expr


(b, s, h, a, a_kv, d_h, d_r, f, l, V, n_ctx, n_type, E, k, f_e, f_s, l_d, d_lat, d_c, d_cq, d_hR, d_v, d_in, n_sh, d_sh,
 d_st, n_g, d_cv, l_a, l_m, l_f, l_e, s_ch, n, w, l_w, g, r, t, p,
 d, m, v, ep, etp, cp, Psi, Psi_a) = (dim.expr for dim in DIMS)

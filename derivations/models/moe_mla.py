"""Graph pieces of current architectures: the mixture-of-experts MLP and multi-head latent attention.

Both are small graph descriptions over ``symbolic.ops.BlockBuilder``; ``architectures`` calls them
when an ``Arch`` has ``moe`` or ``attention="mla"``.

>>> from dataclasses import replace
>>> from memderive.derivations.models.architectures import LLAMA, Moe, build_graph
>>> from memderive.symbolic.derive import parameters
>>> g = build_graph(replace(LLAMA, moe=Moe(shared=True)))
>>> parameters(g, blocks=["layer"], per_repeat=True).where(lambda p: "moe" in p).total
3*E*f_e*h + E*h + 3*f_s*h
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from memderive.symbolic.dims import E, a, d_c, d_cq, d_h, d_hR, d_lat, d_v, f_e, f_s, h, k, l, l_d
from memderive.symbolic.ops import BlockBuilder
from memderive.symbolic.tensor import Tensor

__all__ = ["moe_mlp", "mla_attention"]

#: ``architectures.Arch``, by its name only: ``architectures`` imports this module, not the other way.
Arch = Any


def moe_mlp(bb: BlockBuilder, arch: Arch, x: Tensor, dropout: frozenset[str], dense: Callable[..., Tensor]) -> Tensor:
    """Router, E routed experts (k per token), shared experts; in ``l_d`` of the ``l`` layers a dense
    MLP instead (its ops hold share ``l_d/l`` of the layer block, the MoE ops ``(l - l_d)/l``)."""
    moe, plain = arch.moe, replace(arch, moe=None)
    assert moe is not None
    if moe.dense_layers:
        bb.share = l_d / l
        dense(bb, plain, x, dropout)
        bb.share = (l - l_d) / l
    bb.router("moe/router", x, E, k, bias=moe.router_bias, renormalize=moe.renormalize)
    # LatentMoE: the routed experts in d_lat, between a down and an up projection every tensor-parallel rank holds
    # whole (Megatron-Core's fc1_latent_proj, fc2_latent_proj: TELinear, parallel_mode "duplicated")
    routed = bb.linear("moe/latent_down", x, d_lat, bias=arch.mlp_bias) if moe.latent else x
    out = bb.experts("moe/experts", routed, E, k, f_e, kind=arch.mlp, bias=moe.expert_bias, note=moe.note,
                     clamp=moe.glu_clamp)
    if moe.latent:
        out = bb.linear("moe/latent_up", out, h, bias=arch.mlp_bias)
    if moe.shared:
        shared = dense(bb, replace(plain, mlp_bias=False), x, frozenset(), width=f_s, prefix="moe/shared")
        if moe.shared_gate:
            bb.linear("moe/shared_gate", x, 1, bias=False)
            shared = bb.scale("moe/shared_scale", shared)
        out = bb.add("moe/add_shared", out, shared)
    bb.share = 1
    return out


def mla_attention(bb: BlockBuilder, arch: Arch, x: Tensor, dropout: frozenset[str]) -> Tensor:
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 §2.1), as transformers builds it.

    Query: ``h -> d_c'`` (RMSNorm) ``-> a (d_h + d_h^R)``, or one ``h -> a (d_h + d_h^R)``
    projection without ``q_lora``. Keys and values: ``h -> d_c + d_h^R`` (the latent and one
    rotary key shared by all heads), RMSNorm on the latent, ``d_c -> a (d_h + d_v)``; each head's
    key is its ``d_h`` part and the shared rotary key. Output ``a d_v -> h``. The KV cache keeps
    the latent and the rotary key, ``d_c + d_h^R`` per token per layer (``kv_latent``). With
    ``arch.mla_absorbed`` the decode form serving engines run (``BlockBuilder.mla_absorbed``): the same
    parameters, ``kv_b`` absorbed into the query and the output, attention over the cached latent itself.
    """
    qk = d_h + d_hR
    if arch.q_lora:
        q = bb.rms_norm("attn/q_a_norm", bb.linear("attn/q_a", x, d_cq, bias=arch.qkv_bias))
        q = bb.linear("attn/q_b", q, a * qk, bias=False, parallel="column")
    else:
        q = bb.linear("attn/q", x, a * qk, bias=False, parallel="column")
    q_path = "attn/q_b" if arch.q_lora else "attn/q"  # the heads are views of what this linear made
    kv = bb.linear("attn/kv_a", x, d_c + d_hR, bias=arch.qkv_bias)
    latent, rope_key = bb.kv_latent("attn/latent", kv, d_c, d_hR)
    if arch.mla_absorbed:  # the decode form of vLLM and SGLang: kv_b absorbed into the query and the output
        (q_heads,) = bb.split_heads(q_path, q, (a,), qk, names=("q",))
        ctx = bb.mla_absorbed("attn/kv_b", bb.rotary("attn/rotary_q", q_heads, d_hR),
                              bb.rms_norm("attn/kv_a_norm", latent), bb.rotary("attn/rotary_k", rope_key), d_h, d_v,
                              dropout="attention" in dropout)
        out = bb.linear("attn/proj", ctx, h, bias=arch.out_bias, parallel="row")
        return bb.dropout("attn/dropout", out) if "attn_out" in dropout else out
    # transformers caches the latent and expands every cached position again at each decode step
    kv_b = bb.linear("attn/kv_b", bb.rms_norm("attn/kv_a_norm", latent), a * (d_h + d_v), bias=False,
                     parallel="column", over_cache=True)
    (q_heads,) = bb.split_heads(q_path, q, (a,), qk, names=("q",))
    (k_nope,) = bb.split_heads("attn/kv_b", kv_b, (a,), d_h, names=("k_nope",))
    (v,) = bb.split_heads("attn/kv_b", kv_b, (a,), d_v, names=("v",))
    keys = bb.mla_keys("attn/keys", k_nope, bb.rotary("attn/rotary_k", rope_key))
    ctx = bb.attention("attn/core", bb.rotary("attn/rotary_q", q_heads, d_hR), keys, v, dropout="attention" in dropout)
    out = bb.linear("attn/proj", ctx, h, bias=arch.out_bias, parallel="row")
    return bb.dropout("attn/dropout", out) if "attn_out" in dropout else out

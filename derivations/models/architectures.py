"""Transformer architectures as small graph descriptions.

An ``Arch`` lists the structural facts that real families vary (norm kind, MLP kind, biases,
tied embeddings, parallel attention+MLP, post-norm, ...); ``build_graph`` turns it into a
``Graph`` of three blocks, ``embed``, ``layer`` (repeated ``l`` times) and ``head``. Every
formula in the catalog is derived from these graphs.

A hybrid (``Arch.hybrid``: Nemotron-H) mixes layers of one mixer each, a norm before it and the residual after:
Mamba-2 (``l_m`` of the ``l``), attention (``l_a``), a dense MLP (``l_f``) and a mixture of experts (``l_e``). Its
``layer`` block is their average: the norm and the residual add in every layer, each mixer's ops holding share
``count / l`` of the repeats (``Op.share``, as a MoE model's ``l_d`` dense MLPs), so sums over the layers are exact;
which layer is which (the pattern) is not in the graph.

>>> from memderive.symbolic.derive import parameters
>>> from memderive.symbolic.dims import h
>>> g = build_graph(GPT, relations=GPT_RELATIONS)
>>> parameters(g, blocks=["layer"], per_repeat=True).total.subs(g.relations)
12*h**2 + 13*h
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from memderive.derivations.models.moe_mla import mla_attention, moe_mlp
from memderive.derivations.models.mtp import mtp_block, mtp_note
from memderive.symbolic.dims import V, a, a_kv, b, d_h, d_r, f, h, l, l_a, l_e, l_f, l_m, n_ctx, n_type, s
from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.graph import Block, Graph
from memderive.symbolic.mamba import mamba2_mixer
from memderive.symbolic.ops import INT64, BlockBuilder
from memderive.symbolic.tensor import Tensor

__all__ = ["Arch", "Moe", "Hybrid", "HYBRID_KINDS", "GPT", "LLAMA", "BERT", "GPT_RELATIONS", "LLAMA_RELATIONS", "DROPOUT_PLACES", "build_graph"]

Norm = Literal["layernorm", "rmsnorm"]
#: Where the graph drops out: the embeddings, the attention probabilities, the attention and MLP outputs.
DROPOUT_PLACES = ("embed", "attention", "attn_out", "mlp_out")
Places = frozenset[str]
Mlp = Literal["gelu", "relu", "relu2", "swiglu", "geglu"]


@dataclass(frozen=True, slots=True)
class Moe:
    """A mixture-of-experts MLP (GShard, Lepikhin et al. 2020; DeepSeekMoE, Dai et al. 2024): a router
    (linear h -> E) picks k of E routed experts of width f_e per token; ``shared`` experts (one MLP of
    width f_s) see every token, ``shared_gate`` scales them by a sigmoid gate (Qwen2-MoE);
    ``dense_layers``: l_d of the l layers keep a dense MLP of width f (DeepSeek's first layers,
    Qwen-MoE's ``mlp_only_layers``/``decoder_sparse_step``)."""

    router_bias: bool = False
    expert_bias: bool = False
    shared: bool = False
    shared_gate: bool = False
    dense_layers: bool = False
    renormalize: bool = True  # the k routing weights renormalised to sum to 1 (norm_topk_prob)
    # the router zeroes the scores outside its top groups before the top-k (DeepSeek-V2's group_limited_greedy)
    group_masked: bool = False
    input_jitter: bool = False  # training multiplies the MoE input by uniform noise (Phi-MoE's input_jitter_noise > 0)
    note: str = ""  # what the experts compute beyond the graph's MLP kind (gpt-oss's clamped SwiGLU)
    # the gated experts clamp their gate (from above) and up (both ways) projections before the GLU (gpt-oss: limit 7)
    glu_clamp: bool = False
    # whether the family's model card counts the input embedding as active (Mixtral, Qwen, OLMoE, DeepSeek do;
    # gpt-oss's counts the unembedding only: openai-2025-gpt-oss, Table 1)
    active_embedding: bool = True
    # the routed experts work in a latent width d_lat, projected down before them and back up after (Nemotron 3
    # Super's LatentMoE: moe_latent_size; Megatron-Core's fc1_latent_proj before the dispatch, fc2_latent_proj after)
    latent: bool = False


#: A hybrid's mixer kinds, each with the dimension that counts its layers (``Hybrid.kinds``).
HYBRID_KINDS = {"mamba": l_m, "attention": l_a, "mlp": l_f, "moe": l_e}


@dataclass(frozen=True, slots=True)
class Hybrid:
    """Which mixers a hybrid's layers hold (``HYBRID_KINDS``: each present kind has its layer count among the
    sizes; the MoE's experts are ``Arch.moe``), and the Mamba mixers' biases (``symbolic.mamba``): the projections'
    (Nemotron-H's ``use_bias``) and the convolution's (``use_conv_bias``)."""

    kinds: tuple[str, ...]
    proj_bias: bool = False
    conv_bias: bool = True

    def __post_init__(self) -> None:
        if not self.kinds or not set(self.kinds) <= set(HYBRID_KINDS) or len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"a hybrid's kinds are some of {', '.join(HYBRID_KINDS)}, each once; got {self.kinds}")


@dataclass(frozen=True, slots=True)
class Arch:
    """Structural facts of a transformer family (sizes live in ``Model``)."""

    family: str
    norm: Norm = "layernorm"
    norm_bias: bool = True
    mlp: Mlp = "gelu"
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    positions: Literal["learned", "rotary", "alibi", "none"] = "learned"
    tied_embeddings: bool = True
    parallel_block: bool = False  # attention and MLP both read the layer input (GPT-J, NeoX)
    shared_norm: bool = False  # parallel block with a single norm (GPT-J, Falcon)
    post_norm: bool = False  # norm after the residual add (BERT)
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3)
    qk_norm_width: Literal["head", "all"] = "head"  # q/k norm over d_h (Qwen3, Gemma3) or all heads' a*d_h (OLMo2)
    sublayer_norm: Literal["input", "output", "both"] = "input"  # pre-norm side(s): OLMo2 output, Gemma2/3 both
    final_norm: bool = True
    lm_head: bool = True
    lm_head_bias: bool = False
    embed_norm: bool = False  # a norm right after the embeddings (BERT, BLOOM)
    token_types: bool = False  # BERT segment embeddings
    pooler: bool = False  # BERT pooler (h x h dense)
    dropout: bool = True  # dropout layers in training (GPT-2, BERT); LLaMA-style families have none
    no_dropout_at: tuple[str, ...] = ()  # DROPOUT_PLACES whose rate is 0 while others drop out (OPT's embeddings)
    partial_rotary: bool = False  # RoPE on the first d_r of each head's d_h dimensions (GPT-NeoX rotary_pct)
    position_ids: Literal["shared", "per-sequence"] = "shared"  # learned-position ids (s,) or (b, s) (OPT's cumsum)
    attn_softcap: bool = False  # scores capped by c tanh(x / c) before the softmax (Gemma 2)
    logit_softcap: bool = False  # final logits capped likewise (Gemma 2)
    moe: Moe | None = None  # mixture-of-experts MLP (the MLP kind is the experts')
    attention: Literal["mha", "mla"] = "mha"  # mla: multi-head latent attention (DeepSeek-V2/V3)
    mla_absorbed: bool = False  # MLA only: the decode form with kv_b absorbed (vLLM/SGLang), not transformers'
    q_lora: bool = True  # MLA only: low-rank query (q_lora_rank); False: one h -> a(d_h + d_hR) projection
    sinks: bool = False  # one learned attention-sink logit per head (gpt-oss)
    rope_yarn: bool = False  # the rotary embedding YaRN-scaled (gpt-oss's rope_scaling 'yarn'): its own term name
    act_fn: str = ""  # the config's activation name where transformers' code for it matters (gelu_new: Python)
    hybrid: Hybrid | None = None  # a hybrid's layers, one mixer each (Nemotron-H): ``_hybrid_layer``

    def __post_init__(self) -> None:
        if self.shared_norm and not self.parallel_block:
            raise ValueError("shared_norm needs parallel_block")
        if self.sublayer_norm != "input" and (self.post_norm or self.parallel_block):
            raise ValueError("sublayer_norm 'output'/'both' is for sequential pre-norm blocks")
        if self.qk_norm_width != "head" and not self.qk_norm:
            raise ValueError("qk_norm_width needs qk_norm")
        if not set(self.no_dropout_at) <= set(DROPOUT_PLACES):
            raise ValueError(f"no_dropout_at names places outside {DROPOUT_PLACES}")


GPT = Arch("gpt")
LLAMA = Arch("llama", norm="rmsnorm", norm_bias=False, mlp="swiglu", qkv_bias=False, out_bias=False,
             mlp_bias=False, positions="rotary", tied_embeddings=False, dropout=False)
BERT = Arch("bert", post_norm=True, final_norm=False, lm_head=False, embed_norm=True, token_types=True,
            pooler=True)

#: Letters the literature uses for GPT: head dim h/a, one KV head per head, FFN 4h.
GPT_RELATIONS = {d_h: h / a, a_kv: a, f: 4 * h}
LLAMA_RELATIONS = {d_h: h / a}


def _norm(bb: BlockBuilder, arch: Arch, path: str, x: Tensor) -> Tensor:
    if arch.norm == "rmsnorm":
        return bb.rms_norm(path, x)
    return bb.layer_norm(path, x, bias=arch.norm_bias)


def _qkv_normed_whole(bb: BlockBuilder, arch: Arch, x: Tensor) -> tuple[Tensor, ...]:
    """OLMo2: RMSNorm over the whole q (a*d_h) and k (a_kv*d_h) projections, so q, k, v stay apart."""
    heads = {"q": a, "k": a_kv, "v": a_kv}
    proj = {n: bb.linear(f"attn/{n}", x, n_heads * d_h, bias=arch.qkv_bias, parallel="column")
            for n, n_heads in heads.items()}
    proj["q"], proj["k"] = bb.rms_norm("attn/q_norm", proj["q"]), bb.rms_norm("attn/k_norm", proj["k"])
    return tuple(bb.split_heads(f"attn/{n}", proj[n], (n_heads,), d_h, names=(n,))[0] for n, n_heads in heads.items())


def _attention(bb: BlockBuilder, arch: Arch, x: Tensor, dropout: Places) -> Tensor:
    if arch.attention == "mla":
        return _mla(bb, arch, x, dropout)
    if arch.sinks:
        bb.attention_sinks("attn/sinks", a)
    if arch.qk_norm and arch.qk_norm_width == "all":
        q, k, v = _qkv_normed_whole(bb, arch, x)
    else:
        qkv = bb.linear("attn/qkv", x, (a + 2 * a_kv) * d_h, bias=arch.qkv_bias, parallel="column")
        q, k, v = bb.split_heads("attn/qkv", qkv, (a, a_kv, a_kv), d_h)
    if arch.qk_norm and arch.qk_norm_width == "head":
        q = bb.head_norm("attn/q_norm", q, "rms_norm")
        k = bb.head_norm("attn/k_norm", k, "rms_norm")
    if arch.positions == "rotary":
        width = d_r if arch.partial_rotary else None
        q, k = (bb.rotary(f"attn/rotary_{n}", x, width, yarn=arch.rope_yarn) for n, x in (("q", q), ("k", k)))
    ctx = bb.attention("attn/core", q, k, v, dropout="attention" in dropout)
    out = bb.linear("attn/proj", ctx, h, bias=arch.out_bias, parallel="row")
    return bb.dropout("attn/dropout", out) if "attn_out" in dropout else out


def _mlp(bb: BlockBuilder, arch: Arch, x: Tensor, dropout: Places, width: object = f, prefix: str = "mlp") -> Tensor:
    if arch.moe is not None and prefix == "mlp":
        return moe_mlp(bb, arch, x, dropout, _mlp)
    if arch.mlp in ("swiglu", "geglu"):
        gate = bb.linear(f"{prefix}/gate", x, width, bias=arch.mlp_bias, parallel="column")
        up = bb.linear(f"{prefix}/up", x, width, bias=arch.mlp_bias, parallel="column")
        hidden = bb.gated(f"{prefix}/act", gate, up, "silu" if arch.mlp == "swiglu" else "gelu")
    else:
        hidden = bb.activation(f"{prefix}/act", bb.linear(f"{prefix}/fc1", x, width, bias=arch.mlp_bias,
                                                          parallel="column"), arch.mlp)
    out = bb.linear(f"{prefix}/fc2", hidden, h, bias=arch.mlp_bias, parallel="row")
    return bb.dropout(f"{prefix}/dropout", out) if "mlp_out" in dropout else out


def _mla(bb: BlockBuilder, arch: Arch, x: Tensor, dropout: Places) -> Tensor:
    return mla_attention(bb, arch, x, dropout)


def _layer(arch: Arch, act: DType, dropout: Places) -> Block:
    bb = BlockBuilder("layer", (b, s, h), act)
    if arch.hybrid is not None:
        _hybrid_layer(bb, arch, bb.input, dropout)
    else:
        _decoder(bb, arch, bb.input, dropout)
    return bb.build(repeat=l)


def _hybrid_layer(bb: BlockBuilder, arch: Arch, x: Tensor, dropout: Places) -> Tensor:
    """A hybrid's average layer (module docstring): the norm, each kind's mixer in its share of the layers, the
    residual add (Nemotron-H's ``NemotronHBlock``; Megatron-Core's ``MambaLayer`` and its attention-only, MLP-only
    and MoE-only transformer layers)."""
    hybrid = arch.hybrid
    assert hybrid is not None
    normed = _norm(bb, arch, "norm", x)
    out = normed
    for kind in hybrid.kinds:
        bb.share = HYBRID_KINDS[kind] / l
        if kind == "mamba":
            out = mamba2_mixer(bb, normed, proj_bias=hybrid.proj_bias, conv_bias=hybrid.conv_bias)
        elif kind == "attention":
            out = _attention(bb, arch, normed, dropout)
        elif kind == "mlp":
            out = _mlp(bb, replace(arch, moe=None), normed, dropout)
        else:
            out = _mlp(bb, arch, normed, dropout)  # the experts (``moe_mlp``), in this share
    bb.share = 1
    return bb.add("residual", x, out)


def _decoder(bb: BlockBuilder, arch: Arch, x: Tensor, dropout: Places) -> Tensor:
    """One decoder layer's ops over ``x`` (the ``layer`` block's, and an MTP layer's transformer layer)."""
    if arch.post_norm:
        r = _norm(bb, arch, "norm1", bb.add("residual1", x, _attention(bb, arch, x, dropout)))
        return _norm(bb, arch, "norm2", bb.add("residual2", r, _mlp(bb, arch, r, dropout)))
    elif arch.parallel_block:
        n1 = _norm(bb, arch, "norm1", x)
        n2 = n1 if arch.shared_norm else _norm(bb, arch, "norm2", x)
        attn, mlp = _attention(bb, arch, n1, dropout), _mlp(bb, arch, n2, dropout)
        return bb.add("residual", x, bb.add("attn+mlp", attn, mlp))
    else:
        r = bb.add("residual1", x, _sublayer(bb, arch, _attention, ("norm1", "attn_out_norm"), x, dropout))
        return bb.add("residual2", r, _sublayer(bb, arch, _mlp, ("norm2", "mlp_out_norm"), r, dropout))


def _sublayer(bb: BlockBuilder, arch: Arch, body: Callable[..., Tensor], norms: tuple[str, str], x: Tensor,
              dropout: Places) -> Tensor:
    """A pre-norm sublayer: norm its input (``sublayer_norm`` input/both), its output (output/both), or both."""
    if arch.sublayer_norm in ("input", "both"):
        x = _norm(bb, arch, norms[0], x)
    y = body(bb, arch, x, dropout)
    return _norm(bb, arch, norms[1], y) if arch.sublayer_norm in ("output", "both") else y


def _embed(arch: Arch, act: DType, dropout: Places) -> Block:
    bb = BlockBuilder("embed", (b, s), act, input_dtype=INT64, input_role="token-ids")
    x = bb.embedding("tokens", bb.input, V, h, parallel="vocab")
    if arch.positions == "learned":
        ids = (s,) if arch.position_ids == "shared" else (b, s)  # OPT counts positions per sequence
        positions = Tensor("positions", ids, INT64, role="token-ids")
        x = bb.add("add_positions", x, bb.embedding("positions", positions, n_ctx, h))
    if arch.token_types:
        types = Tensor("token_types", (b, s), INT64, role="token-ids")
        x = bb.add("add_token_types", x, bb.embedding("token_types", types, n_type, h))
    if arch.embed_norm:
        x = _norm(bb, arch, "norm", x)
    if "embed" in dropout:
        bb.dropout("dropout", x)
    return bb.build()


def _head(arch: Arch, act: DType) -> Block:
    bb = BlockBuilder("head", (b, s, h), act)
    x = _norm(bb, arch, "final_norm", bb.input) if arch.final_norm else bb.input
    if arch.pooler:
        pooled = bb.linear("pooler", x, h, bias=True, rows=(b,))  # reads the first token of each sequence
        bb.activation("pooler_act", pooled, "tanh")  # BertPooler's Tanh saves its output (b, h)
    if arch.lm_head:
        tied = Tensor("embed/tokens.weight", (V, h), dtype("fp32"), role="weight", tp_axis=0)
        logits = bb.linear("lm_head", x, V, bias=arch.lm_head_bias, parallel="vocab",
                           weight=tied if arch.tied_embeddings else None,
                           note="weight tied to embed/tokens" if arch.tied_embeddings else "")
        bb.cross_entropy("loss", logits)
    return bb.build()


def build_graph(arch: Arch, *, activation_dtype: str | DType = "bf16", dropout: bool = True,
                relations: dict | None = None, name: str | None = None, mtp_layers: int = 0) -> Graph:
    """The graph of a whole model: embeddings, ``l`` layers, head (final norm, LM head, loss).

    Args:
        arch: structural facts of the family.
        activation_dtype: dtype of saved activations (16-bit under mixed precision).
        dropout: whether to keep the family's dropout layers (training with dropout > 0).
        relations: size relations used to print closed forms (e.g. ``{d_h: h/a}``).
        mtp_layers: Megatron-Core's multi-token-prediction layers, a block between the layers and the head
            (``models.mtp``); 0: none.
    """
    act = dtype(activation_dtype)
    places = frozenset(DROPOUT_PLACES) - set(arch.no_dropout_at) if dropout and arch.dropout else frozenset()
    mtp = (mtp_block(arch, act, places, mtp_layers, _decoder, _norm),) if mtp_layers else ()
    blocks = (_embed(arch, act, places), _layer(arch, act, places), *mtp, _head(arch, act))
    return Graph(name or arch.family, blocks, relations=dict(relations or {}),
                 assumptions=(mtp_note(mtp_layers),) if mtp_layers else ())


def with_arch(arch: Arch, **changes: object) -> Arch:
    return replace(arch, **changes)

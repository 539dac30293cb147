"""transformers' attention, eager or SDPA, as what it saves for backward (``symbolic.huggingface``).

Eager (``eager_attention_forward``): q and K repeated to ``a`` heads (``repeat_kv``) saved by
``q k^T`` (fp32 copies where the code casts them: ``scores_fp32``), the softcap's tanh, the
probabilities (fp32, and the 16-bit copy ``P v`` saves, or their dropout mask and output) and V
repeated to ``a`` heads, at the value head size.

SDPA (``torch.nn.functional.scaled_dot_product_attention``): the fused kernel saves q, k, v, its
output and the fp32 logsumexp. It falls back to the math backend, which casts q, k and v to fp32
(``_scaled_dot_product_attention_math``: "Keep query, key, value in high precision") and saves what
eager attention saves in fp32, when no fused kernel applies: on CPU with dropout or with a value
head size apart from the query/key one (DeepSeek's MLA). On CUDA a value head size of its own is the
memory-efficient kernel (logsumexp rows padded to 32). A family that always hands SDPA its causal
mask (``sdpa_mask``: Falcon's ``create_causal_mask(..., allow_is_causal_skip=False)``) gets K and V
repeated to ``a`` heads (``use_gqa_in_sdpa`` is false with a mask: ``repeat_kv``, a copy unless
a_kv is 1, where it is an expanded view of the one head) and the bool mask converted to q's dtype
per call (``convert_boolean_attn_mask``), which the kernel saves: on CPU as it is, (b, 1, s, s); on
CUDA the memory-efficient kernel (flash takes no mask) saves it padded to a last dimension that is
a multiple of 8 (``preprocess_mask``/``pad_bias``, ``mem_eff_alignment = 8``, aten/src/ATen/native/
transformers/cuda/attention.cpp). CPU's flash kernel and
CUDA's (``flash_api.cpp`` ``mha_fwd``: ``out = empty_like(q)``) return the output in q's memory
layout, so a q made contiguous head-major (``torch.cat`` of the rotated part) leaves an output that
``transpose(1, 2).contiguous()`` copies for the output projection: both are saved.

>>> from memderive.symbolic.dims import a, a_kv, b, d_h, s
>>> from memderive.symbolic.dtypes import dtype
>>> from memderive.symbolic.ops import BlockBuilder
>>> bb = BlockBuilder("layer", (b, s, a * d_h), dtype("bf16"))
>>> q, k, v = bb.split_heads("attn/qkv", bb.input, (a, a_kv, a_kv), d_h)
>>> _ = bb.attention("attn/core", q, k, v, dropout=False)
>>> [x.name for x in rewrite(bb.ops[-1], Context("sdpa", "cpu", HfCode())).saved]
['attn/qkv.q', 'attn/qkv.k', 'attn/qkv.v', 'attn/core.out', 'attn/core.logsumexp']
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.expr import Expr, ceiling
from memderive.symbolic.graph import Op
from memderive.symbolic.hf_code import HfCode
from memderive.symbolic.tensor import Tensor, merge_copies, view_or_copy

__all__ = ["Context", "rewrite", "like", "needs_inputs"]

FP32, BOOL = dtype("fp32"), dtype("bool")
SCORES = "attention-scores"


@dataclass(frozen=True, slots=True)
class Context:
    """The kernel, the device, the family's code and what the model's sizes decide: fewer K/V heads
    than query heads (``fewer_kv``), one K/V head (``single_kv``), a value head size apart from q's
    and k's (``value_differs``)."""

    attention: str
    device: str
    code: HfCode
    fewer_kv: bool = False
    value_differs: bool = False
    single_kv: bool = False
    bases: tuple[tuple[str, Tensor], ...] = ()  # role ("q", "v") -> the output the operand is a strided view of
    window_share: Expr | None = None  # the share of layers whose sliding window is shorter than the sequence


def like(x: Tensor, name: str, dt: DType | None = None, shape: tuple | None = None, role: str | None = None) -> Tensor:
    return Tensor(name, x.shape if shape is None else shape, dt or x.dtype, role=role or x.role,
                  tp_axis=x.tp_axis, seq_axis=x.seq_axis)


def needs_inputs(op: Op) -> Op:
    """Every saved tensor serves the gradients of the op's inputs (where the op declares them)."""
    if not op.saved_for:
        return op
    return replace(op, saved_for=tuple((x.name, op.inputs) for x in op.saved))


def rewrite(op: Op, ctx: Context) -> Op:
    """The attention op as transformers runs it under ``ctx``."""
    q = next(x for x in op.saved if x.role == "q")
    v = next(x for x in op.saved if x.role == "v")
    dropout = any(x.name.endswith(".dropout.mask") for x in op.saved)
    if ctx.attention == "eager":
        return _eager(op, q, v, dropout, ctx, math=False)
    if ctx.device == "cpu" and (dropout or ctx.value_differs):
        return _eager(op, q, v, dropout, ctx, math=True)
    return _sdpa(op, q, v, ctx)


def _sdpa(op: Op, q: Tensor, v: Tensor, ctx: Context) -> Op:
    k = next(x for x in op.saved if x.role == "k")
    bsz, heads, seq, _ = q.shape
    masked = ctx.code.sdpa_mask
    efficient = ctx.device == "cuda" and (ctx.value_differs or masked)  # CUDA's memory-efficient kernel
    rows = ceiling(seq / 32) * 32 if efficient else seq
    if ctx.device == "cuda" and not efficient and ctx.window_share is not None:  # windowed layers past w: a mask,
        rows = seq + (ceiling(seq / 32) * 32 - seq) * ctx.window_share  # so the memory-efficient kernel's rows
    lse = Tensor(f"{op.path}.logsumexp", (bsz, heads, rows), FP32, role="softmax-stats", tp_axis=q.tp_axis,
                 seq_axis=None if efficient else q.seq_axis)
    out = op.output
    note = "scaled_dot_product_attention" + (" (memory-efficient kernel)" if efficient else "")
    if ctx.code.q_head_major and not efficient:  # the output keeps q's layout: copied for the projection
        out = like(op.output, f"{op.path}.sdpa_out", shape=(bsz, heads, seq, v.shape[-1]), role="attention-output")
        note += "; output in q's head-major layout, copied for the output projection"
    bases = dict(ctx.bases)
    if "q" in bases:  # the kernel saves q as it gets it: a strided view holding the whole fused output
        q = like(bases["q"], f"{bases['q'].name}:held")
        note += "; q a view of the fused q/k/v output (all of it held)"
    saved: tuple[Tensor, ...] = (q, k, v, out, lse)
    share = 1 if masked else ctx.window_share  # layers that hand SDPA a mask (all, or the windowed ones past w)
    if share is not None:
        if ctx.fewer_kv and not ctx.single_kv:  # repeat_kv's copies to a heads, in place of the a_kv-head k and v
            a_kv = k.shape[1]
            k, v = (like(x, f"{op.path}.{x.role}_rep", shape=(bsz, a_kv + (heads - a_kv) * share, *x.shape[2:]))
                    for x in (k, v))
        width = ceiling(seq / 8) * 8 if efficient or ctx.device == "cuda" else seq
        mask = Tensor(f"{op.path}.mask", (bsz, 1, seq, width * share), q.dtype, role="attention-mask",
                      seq_axis=q.seq_axis)
        saved = (q, k, v, out, lse, mask)
        note += ("; the causal mask in q's dtype" if masked else
                 "; where the sliding window is shorter than the sequence, the windowed mask in q's dtype and K, V "
                 "repeated to a heads (no enable_gqa with a mask)") + (", padded to a multiple of 8 columns"
                                                                       if efficient else "")
    return needs_inputs(replace(op, kind="sdpa", saved=saved, note=note))


def _eager(op: Op, q: Tensor, v: Tensor, dropout: bool, ctx: Context, math: bool) -> Op:
    """q, K and V repeated to a heads (``repeat_kv``), probabilities (fp32 and 16-bit), dropout.

    ``saved_for`` follows autograd: ``q k^T`` saves each for the other's gradient, softmax its output
    for the scores' (q's and k's), the cast 16-bit copy only as ``P v``'s operand (v's gradient).
    """
    code, act = ctx.code, q.dtype
    bsz, heads, seq, d_qk = q.shape
    if code.sinks and not math:
        return _eager_sinks(op, q, v, dropout, ctx)
    scores = (bsz, heads, seq, seq)
    dt = FP32 if math else act  # the math backend computes in fp32
    sdt = FP32 if math or code.scores_fp32 else act  # dtype of q k^T
    qn, kn, vn = op.inputs if len(op.inputs) == 3 else ("q", "k", "v")
    bases = dict(ctx.bases) if not math else {}
    q_in = q if sdt == q.dtype else like(q, f"{op.path}.q_in", sdt, role="q")
    saved: list[tuple[Tensor, tuple[str, ...]]] = []
    if "q" in bases and sdt == q.dtype:  # matmul's reshape copies the strided q, or views it at b = 1
        q_in, held = view_or_copy(like(q, f"{op.path}.q_in"), bases["q"], bsz)
        saved.append((held, (kn,)))
    # K and V of one head expanded to a heads (repeat_kv's stride-0 view): matmul copies them unless b = 1
    kv_heads = 1 + (heads - 1) * merge_copies(bsz) if ctx.single_kv and ctx.fewer_kv and not math else heads
    saved += [(q_in, (kn,)), (like(q, f"{op.path}.k_rep", sdt, (bsz, kv_heads if sdt == act else heads, seq, d_qk),
                                   "k"), (qn,))]
    if code.attn_softcap and not math:
        saved.append((like(q, f"{op.path}.softcap_tanh", sdt, scores, SCORES), (qn, kn)))
    upcast = not math and (code.softmax_fp32 or sdt == FP32) and act != FP32  # fp32 probabilities, then a cast
    if upcast:
        saved.append((like(q, f"{op.path}.softmax_fp32", FP32, scores, SCORES), (qn, kn)))
    if not (upcast and dropout):  # the cast copy is saved only by P v; softmax's own output always
        probs = like(q, f"{op.path}.softmax", dt, scores, SCORES)
        saved.append((probs, (vn,) if upcast else (qn, kn) if dropout else (qn, kn, vn)))
    if dropout:
        mask_dt = BOOL if ctx.device == "cuda" else dt
        saved += [(like(q, f"{op.path}.dropout.mask", mask_dt, scores, SCORES), (qn, kn)),
                  (like(q, f"{op.path}.dropout.out", dt, scores, SCORES), (vn,))]
    v_rep = like(q, f"{op.path}.v_rep", dt, (bsz, kv_heads, seq, v.shape[-1]), "v")
    if "v" in bases:  # matmul's reshape copies the strided V, or views it at b = 1
        v_rep, held = view_or_copy(v_rep, bases["v"], bsz)
        saved.append((held, (qn, kn)))
    saved.append((v_rep, (qn, kn)))
    note = "SDPA math backend: fp32" if math else "eager_attention_forward"
    return replace(op, kind="attention", saved=tuple(x for x, _ in saved), note=note,
                   saved_for=tuple((x.name, grads) for x, grads in saved) if op.saved_for else ())


def _eager_sinks(op: Op, q: Tensor, v: Tensor, dropout: bool, ctx: Context) -> Op:
    """gpt-oss's ``eager_attention_forward``: ``torch.cat([attn_weights, sinks], dim=-1)`` (s + 1 columns),
    ``combined_logits - combined_logits.max(dim=-1, keepdim=True).values`` (the max saves its int64
    indices (b, a, s, 1)), ``F.softmax(combined_logits, dtype=combined_logits.dtype)`` in the activation
    dtype (its output saved, (b, a, s, s + 1)); ``probs[..., :-1]`` is a view of it, which ``P v`` saves."""
    bsz, heads, seq, d_qk = q.shape
    qn, kn, vn = op.inputs if len(op.inputs) == 3 else ("q", "k", "v")
    wide = (bsz, heads, seq, seq + 1)
    saved: list[tuple[Tensor, tuple[str, ...]]] = [
        (q, (kn,)), (like(q, f"{op.path}.k_rep", shape=(bsz, heads, seq, d_qk), role="k"), (qn,)),
        (like(q, f"{op.path}.max_indices", dtype("int64"), (bsz, heads, seq, 1), SCORES), (qn, kn)),
        (like(q, f"{op.path}.softmax", shape=wide, role=SCORES), (qn, kn) if dropout else (qn, kn, vn))]
    if dropout:
        mask_dt = BOOL if ctx.device == "cuda" else q.dtype
        saved += [(like(q, f"{op.path}.dropout.mask", mask_dt, (bsz, heads, seq, seq), SCORES), (qn, kn)),
                  (like(q, f"{op.path}.dropout.out", shape=(bsz, heads, seq, seq), role=SCORES), (vn,))]
    saved.append((like(q, f"{op.path}.v_rep", shape=(bsz, heads, seq, v.shape[-1]), role="v"), (qn, kn)))
    return replace(op, kind="attention", saved=tuple(x for x, _ in saved), note="eager_attention_forward with sinks",
                   saved_for=tuple((x.name, grads) for x, grads in saved) if op.saved_for else ())

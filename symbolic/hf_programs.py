"""transformers' modeling code as ATen calls: the ``program`` of each op of the ``hf`` graph.

``symbolic.implementations.HuggingFace`` says what transformers' layers save; these programs say how
their forward runs, call by call, so that the step timeline (``symbolic.timeline``) can follow every
tensor's lifetime. Each function mirrors a piece of transformers 5.x (``modeling_llama.py``,
``modeling_gpt2.py``, ``loss/loss_utils.py``, ``cache_utils.py``) line by line; the comments quote it.
How long Python holds a result is read off the code: a local variable lives until its function
returns (``keep="op"``, or the named op that ends the function), the model's output object until the
forward returns (the logits, the ``DynamicCache``), ``LlamaModel.forward``'s locals (``inputs_embeds``,
``position_ids``, the mask, the rotary tables) until its final norm.

Families covered: LLaMA-style (``LlamaRMSNorm``, rotary, SwiGLU, ``q/k/v_proj``) and GPT-2 (``Conv1D``,
LayerNorm, learned positions, ``gelu_new``), eager and SDPA attention; an op of another kind keeps no
program and runs as one fused call. Which view's backward copies its gradient follows from the
gradient's layout (a contiguous ``(b, a, s, d_h)`` gradient cannot be viewed as ``(b, s, a*d_h)``):
written per kernel below.

>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.dims import b, s, h
>>> from memderive.symbolic.dtypes import dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = bb.rms_norm("norm", bb.input)
>>> from memderive.symbolic.graph import Graph
>>> from memderive.symbolic.huggingface import HuggingFace
>>> op = HuggingFace("eager")(Graph("toy", (bb.build(),))).blocks[0].ops[0]
>>> [k.kind for k in op.program]
['hold', 'to', 'pow', 'mean', 'add', 'rsqrt', 'mul', 'to', 'mul']
"""

from __future__ import annotations

from dataclasses import replace

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.expr import Expr
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.kernels import Kernel
from memderive.symbolic.tensor import Tensor

__all__ = ["with_programs", "chunked_loss", "without_cache", "MODEL_LOCAL"]

FP32, INT64, BOOL = dtype("fp32"), dtype("int64"), dtype("bool")
#: ``LlamaModel.forward`` / ``GPT2Model.forward`` hold their locals until the final norm returns.
MODEL_LOCAL = "head/final_norm"


def _t(op: Op, name: str, like: Tensor, dt: DType | None = None, shape: tuple | None = None,
       role: str = "activation") -> Tensor:
    return Tensor(f"{op.path}.{name}", like.shape if shape is None else shape, dt or like.dtype, role=role,
                  tp_axis=like.tp_axis if shape is None else None, seq_axis=like.seq_axis if shape is None else None)


def _to(x: str, out: Tensor, have: DType, keep: str = "") -> Kernel:
    """``x.to(dtype)``: a copy, or ``x`` itself when it already has the dtype (no autograd node)."""
    return Kernel("view" if have == out.dtype else "to", (x,), (out,), alias=have == out.dtype, keep=keep)


# --- norms ---------------------------------------------------------------------------------------
def _rms_norm(op: Op, x_dtype: DType) -> Op:
    """``LlamaRMSNorm.forward``::

        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
    """
    x32, rstd, normed = op.saved
    x, w = op.inputs[0], op.params[0].name
    power, prod = _t(op, "pow", x32), _t(op, "normed_fp32", x32)
    var, var_eps = _t(op, "variance", rstd), _t(op, "variance_eps", rstd)
    held = replace(x32, name=f"{op.path}.argument", dtype=x_dtype, role="activation")
    program = (Kernel("hold", (x,), (held,), alias=True, keep="op"),  # the caller's `hidden_states`
               _to(x, x32, x_dtype),
               Kernel("pow", (x32.name,), (power,)),
               Kernel("mean", (power.name,), (var,), keep="op"),  # `variance` lives until return
               Kernel("add", (var.name,), (var_eps,)),
               Kernel("rsqrt", (var_eps.name,), (rstd,)),
               Kernel("mul", (x32.name, rstd.name), (prod,), keep="op"),
               _to(prod.name, normed, FP32),
               Kernel("mul", (w, normed.name), (op.output,)))
    return replace(op, program=program)


def _layer_norm(op: Op) -> Op:
    """``nn.LayerNorm``: ``native_layer_norm`` makes the output, mean and rstd (CPU: in the input's dtype)."""
    x, mean, rstd = op.saved[0], op.saved[1], op.saved[2]
    return replace(op, program=(Kernel("layer_norm", (x.name, *(w.name for w in op.params)), (op.output, mean, rstd)),))


# --- linear layers -------------------------------------------------------------------------------
def _linear(op: Op, x: str) -> tuple[Kernel, ...]:
    """``nn.Linear`` / ``Conv1D``: ``mm`` (no bias) or ``addmm(bias, x, W)``."""
    w = [p.name for p in op.params if p.role == "weight"] or _tied(op)
    bias = [p.name for p in op.params if p.role == "bias"]
    return (Kernel("addmm", (bias[0], x, w[0]), (op.output,)),) if bias else (Kernel("mm", (x, w[0]), (op.output,)),)


def _tied(op: Op) -> list[str]:
    return sorted({f.param for f in op.flops if f.phase == "weight-grad" and f.param})


def _qkv_separate(op: Op, q: Tensor, k: Tensor, v: Tensor, copies: tuple[bool, bool, bool], keep_qk: str) -> Op:
    """``LlamaAttention``: ``self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)`` and the same for
    k and v: three linears (the fused ``attn/qkv`` weight held as ``q_proj``, ``k_proj``, ``v_proj``);
    ``query_states`` and ``key_states`` are rebound only when ``apply_rotary_pos_emb`` returns."""
    x, weight = op.inputs[0], op.params[0]
    bias = next((p for p in op.params if p.role == "bias"), None)
    rows = weight.shape[1]
    parts, program = [], []
    for name, view, copy in ((n, t, c) for n, t, c in zip(("q_proj", "k_proj", "v_proj"), (q, k, v), copies)):
        width = view.shape[1] * view.shape[3]
        w = Tensor(f"{op.path}.{name}.weight", (width, rows), weight.dtype, role="weight")
        parts.append(w)
        out = Tensor(f"{op.path}.{name}", (*view.shape[:1], view.shape[2], width), view.dtype)
        if bias is not None:
            b_ = Tensor(f"{op.path}.{name}.bias", (width,), weight.dtype, role="bias")
            parts.append(b_)
            program.append(Kernel("addmm", (b_.name, x, w.name), (out,)))
        else:
            program.append(Kernel("mm", (x, w.name), (out,)))
        program.append(Kernel("view", (out.name,), (view,), alias=True, grad_copies=copy,
                              keep="" if name == "v_proj" else keep_qk))
    split = (Kernel("parameters", tuple(p.name for p in op.params), tuple(parts)),)
    return replace(op, program=split + tuple(program))


def _qkv_conv1d(op: Op, q: Tensor, k: Tensor, v: Tensor, copies: tuple[bool, bool, bool], keep_q: str) -> Op:
    """``GPT2Attention``: ``query_states, key_states, value_states = self.c_attn(hidden_states).split(...)``
    then ``.view(shape).transpose(1, 2)``; ``query_states`` lives until the attention returns."""
    program = _linear(op, op.inputs[0])
    split = Kernel("split", (op.output.name,), (q, k, v), alias=True)
    views = tuple(Kernel("view", (t.name,), (replace(t, name=f"{t.name}:heads"),), alias=True, grad_copies=c,
                         keep=keep_q if t is q else "") for t, c in zip((q, k, v), copies))
    return replace(op, program=(*program, split, *views))


# --- rotary --------------------------------------------------------------------------------------
def _rotary(op: Op, x: str, keep: str) -> Op:
    """``apply_rotary_pos_emb``: ``(q * cos) + (rotate_half(q) * sin)``, ``rotate_half`` being
    ``torch.cat((-x2, x1), dim=-1)`` of the two halves (slices)."""
    out = op.output
    half = (*out.shape[:-1], out.shape[-1] / 2)
    t = {name: _t(op, name, out) for name in ("x_cos", "rotated", "rotated_sin")}
    x1, x2, neg = (_t(op, n, out, shape=half) for n in ("x1", "x2", "neg_x2"))
    return replace(op, program=(
        Kernel("mul", (x, "@rotary.cos"), (t["x_cos"],)),
        Kernel("slice", (x,), (x1,), alias=True), Kernel("slice", (x,), (x2,), alias=True),
        Kernel("neg", (x2.name,), (neg,)),
        Kernel("cat", (neg.name, x1.name), (t["rotated"],)),
        Kernel("mul", (t["rotated"].name, "@rotary.sin"), (t["rotated_sin"],)),
        Kernel("add", (t["x_cos"].name, t["rotated_sin"].name), (out,), keep=keep)))


def _rotary_tables(op: Op, d_head: Expr, act: DType) -> Op:
    """``LlamaRotaryEmbedding.forward``: ``inv_freq[None, :, None].float()`` and ``position_ids[:, None, :]
    .float()``, their product, ``emb = torch.cat((freqs, freqs), dim=-1)``, ``emb.cos() *
    attention_scaling`` (and sin), cast to the activations' dtype; the locals live until it returns."""
    cos, sin = op.saved
    seq = cos.shape[-2]
    f = lambda name, shape, dt=FP32: Tensor(f"@rotary.{name}", shape, dt, role="rotary-tables")  # noqa: E731
    inv = Tensor("@rotary.inv_freq", (d_head / 2,), FP32, role="buffer")
    pos, inv32, freqs = f("position_ids_fp32", (1, seq, 1)), f("inv_freq_fp32", (d_head / 2,)), f("freqs", (1, seq, d_head / 2))
    emb, c32, cs, s32, ss = (f(n, (1, seq, d_head)) for n in ("emb", "cos_fp32", "cos_scaled", "sin_fp32", "sin_scaled"))
    return replace(op, program=(
        Kernel("const", (), (inv,)),
        Kernel("const", ("@position_ids",), (pos,)), Kernel("const", (inv.name,), (inv32,)),
        Kernel("const", (inv32.name, pos.name), (freqs,), keep="op"),
        Kernel("const", (freqs.name,), (emb,), keep="op"),
        Kernel("const", (emb.name,), (c32,)), Kernel("const", (c32.name,), (cs,), keep="op"),
        Kernel("const", (emb.name,), (s32,)), Kernel("const", (s32.name,), (ss,), keep="op"),
        Kernel("const", (cs.name,), (cos,), keep=MODEL_LOCAL), Kernel("const", (ss.name,), (sin,), keep=MODEL_LOCAL)))


# --- attention -----------------------------------------------------------------------------------
def _cache(op: Op, k: Tensor, v: Tensor) -> tuple[tuple[Kernel, ...], Tensor, Tensor]:
    """``DynamicLayer.update``: ``self.keys = torch.cat([self.keys, key_states], dim=-2)`` (an empty first
    ``keys``): copies of k and v that the model's output holds until the forward returns."""
    kc, vc = replace(k, name=f"{op.path}.k_cache"), replace(v, name=f"{op.path}.v_cache")
    return (Kernel("cat", (k.name,), (kc,), keep="forward"), Kernel("cat", (v.name,), (vc,), keep="forward")), kc, vc


def _eager(op: Op, q: Tensor, k: Tensor, v: Tensor, fp32_softmax: bool, mask: bool, copies: bool) -> Op:
    """``eager_attention_forward``: ``repeat_kv`` (expand + reshape: a copy, none when a_kv = a),
    ``torch.matmul(query, key_states.transpose(2, 3)) * scaling`` (matmul's reshape copies the strided
    query), ``+ attention_mask``, ``softmax(..., dtype=torch.float32).to(query.dtype)`` (LLaMA; GPT-2's stays
    16-bit), ``torch.matmul(attn_weights, value_states)``, ``.transpose(1, 2).contiguous()``."""
    caching, kc, vc = _cache(op, k, v)
    full = q.shape
    k_rep, v_rep = _t(op, "k_rep", q, k.dtype, full, "k"), _t(op, "v_rep", q, v.dtype, full, "v")
    q_in = _t(op, "q_in", q, q.dtype, full, "q")
    square = (full[0], full[1], full[2], full[2])
    sc = {n: _t(op, n, q, q.dtype, square, "attention-scores") for n in ("scores", "scaled", "masked", "softmax")}
    k_t = _t(op, "k_t", q, k.dtype, (full[0], full[1], full[3], full[2]), "k")
    ctx3, ctx = _t(op, "context_bmm", q, q.dtype, full), _t(op, "context", q, q.dtype, full)
    program = [*caching,
               Kernel("expand_clone", (kc.name,), (k_rep,)), Kernel("expand_clone", (vc.name,), (v_rep,)),
               Kernel("clone", (q.name,), (q_in,)),
               Kernel("view", (k_rep.name,), (k_t,), alias=True),
               Kernel("bmm", (q_in.name, k_t.name), (sc["scores"],)),
               Kernel("mul_scalar", (sc["scores"].name,), (sc["scaled"],))]
    last = sc["scaled"].name
    if mask:  # `attn_weights` is rebound only after the softmax and its cast
        program.append(Kernel("add", (last, "@mask"), (sc["masked"],), keep=f"={sc['softmax'].name}"))
        last = sc["masked"].name
    if fp32_softmax:  # softmax(dtype=float32) casts its input first; .to(query.dtype) after
        up = _t(op, "masked_fp32", q, FP32, square, "attention-scores")
        p32 = _t(op, "softmax_fp32", q, FP32, square, "attention-scores")
        program += [_to(last, up, q.dtype), Kernel("softmax", (up.name,), (p32,)), _to(p32.name, sc["softmax"], FP32)]
    else:
        program.append(Kernel("softmax", (last,), (sc["softmax"],)))
    program += [Kernel("bmm", (sc["softmax"].name, v_rep.name), (ctx3,)),
                Kernel("view", (ctx3.name,), (ctx,), alias=True, grad_copies=copies),
                Kernel("clone", (ctx.name,), (op.output,))]
    return replace(op, program=tuple(program))


def _sdpa(op: Op, q: Tensor, k: Tensor, v: Tensor) -> Op:
    """``sdpa_attention_forward``: ``scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=...)``
    (CPU: ``_scaled_dot_product_flash_attention_for_cpu``: the output in ``(b, s, a, d_h)`` memory and the
    fp32 logsumexp), ``.transpose(1, 2).contiguous()`` a view."""
    lse = next(x for x in op.saved if x.role == "softmax-stats")
    caching, kc, vc = _cache(op, k, v)
    o = _t(op, "sdpa_out", q, q.dtype, q.shape, "attention-output")
    return replace(op, program=(*caching, Kernel("sdpa", (q.name, kc.name, vc.name), (o, lse)),
                                Kernel("view", (o.name,), (op.output,), alias=True)))


# --- MLP, loss, embeddings -------------------------------------------------------------------------
def _gelu_new(op: Op) -> Op:
    """``NewGELUActivation``: ``0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715
    * torch.pow(input, 3.0))))``."""
    x, half, tanh, one_plus = op.saved
    t = {n: _t(op, n, x) for n in ("pow", "pow_scaled", "inner", "inner_scaled")}
    return replace(op, program=(
        Kernel("mul_scalar", (x.name,), (half,)), Kernel("pow", (x.name,), (t["pow"],)),
        Kernel("mul_scalar", (t["pow"].name,), (t["pow_scaled"],)),
        Kernel("add", (x.name, t["pow_scaled"].name), (t["inner"],)),
        Kernel("mul_scalar", (t["inner"].name,), (t["inner_scaled"],)),
        Kernel("tanh", (t["inner_scaled"].name,), (tanh,)), Kernel("add", (tanh.name,), (one_plus,)),
        Kernel("mul", (half.name, one_plus.name), (op.output,))))


def _loss(op: Op) -> Op:
    """``ForCausalLMLoss``: ``logits = logits.float()``, ``labels = nn.functional.pad(labels, (0, 1),
    value=ignore_index)``, ``shift_labels = labels[..., 1:].contiguous()``, ``cross_entropy`` (log_softmax
    and nll_loss); its locals live until it returns."""
    logits = op.inputs[0]
    log_probs, labels, total_weight = op.saved
    up = Tensor(f"{op.path}.logits_fp32", log_probs.shape, FP32, role="logits", tp_axis=log_probs.tp_axis)
    bsz, seq = log_probs.shape[:2]
    padded = Tensor(f"{op.path}.labels_padded", (bsz, seq + 1), INT64, role="token-ids")
    given = Tensor("@labels", (bsz, seq), INT64, role="batch")
    return replace(op, program=(
        Kernel("const", (), (given,)),
        Kernel("to", (logits,), (up,), keep="op"),
        Kernel("pad", ("@labels",), (padded,), keep="op"), Kernel("const", (padded.name,), (labels,), keep="op"),
        Kernel("log_softmax", (up.name,), (log_probs,)),
        Kernel("nll_loss", (log_probs.name, labels.name), (op.output, total_weight))))


def chunked_loss(graph: Graph, chunks: int) -> Graph:
    """The head with its output layer and loss run chunk by chunk, as torchtune's chunked output
    (``TransformerDecoder.chunked_output``: ``[self.output(chunk) for chunk in h.chunk(n, dim=1)]``) and
    ``CEWithChunkedOutputLoss.forward`` run them::

        total_elements = (labels != self.ignore_index).sum()
        labels = [target_chunk.reshape(-1) for target_chunk in labels.chunk(self.num_output_chunks, dim=1)]
        logits = [logit_chunk.reshape(-1, logit_chunk.size(-1)) for logit_chunk in logits]
        total_loss = 0.0
        for logits_chunk, labels_chunk in zip(logits, labels):
            total_loss += F.cross_entropy(logits_chunk.float(), labels_chunk, ignore_index=..., reduction="sum")
        return total_loss / total_elements

    Each chunk of the hidden states is copied by ``reshape`` (a slice along the sequence is strided unless
    b = 1) and the output layer saves that copy; the 16-bit logits of every chunk live until the loss
    returns, one chunk's fp32 upcast at a time; the first ``+=`` makes ``total_loss`` a tensor, the
    others add in place. The base model's output object (the ``DynamicCache``) is dropped as soon as the
    base model returns (``base_model(...).last_hidden_state``; torchtune's decoder keeps no cache). The labels come shifted with the batch (torchtune's recipes shift them). The
    hidden states are held until the loss returns (as the measured step holds them,
    ``tests/hf_step._chunked_loss``; torchtune's decoder lets go of them when its forward returns, one
    b x s x h tensor earlier). Saved bytes equal the unchunked head's (the same tensors, in pieces), so
    the op's ``saved`` stays; only the programs change. A head without programs is returned as it is
    (one fused call shows no per-chunk transients to reduce)."""
    if chunks == 1:
        return graph
    blocks = []
    for blk in graph.blocks:
        lm = next((op for op in blk.ops if op.kind == "linear" and op.program), None) if blk.name == "head" else None
        loss = next((op for op in blk.ops if op.kind == "cross_entropy" and op.program), None) if lm else None
        if lm is None or loss is None or loss.inputs[0] != lm.output.name:
            blocks.append(blk.map_ops(_model_output_dropped))
            continue
        new_lm, logits = _chunked_output(lm, chunks)
        new_loss = _chunked_cross_entropy(loss, logits, chunks)
        blocks.append(replace(blk, ops=tuple(new_lm if op is lm else new_loss if op is loss else op for op in blk.ops)))
    return replace(graph, blocks=tuple(blocks))


def without_cache(graph: Graph) -> Graph:
    """The decoder layers as transformers runs them under activation checkpointing: no cache
    (``GradientCheckpointingLayer`` sets ``use_cache=False``), so attention reads k and v themselves."""
    def cache(k: Kernel) -> bool:  # DynamicLayer.update's copies (symbolic.hf_programs._cache)
        return k.kind == "cat" and bool(k.outputs) and k.outputs[0].name.endswith(("k_cache", "v_cache"))

    def drop(op: Op) -> Op:
        if not any(cache(k) for k in op.program):
            return op
        program = [Kernel("view", k.inputs, k.outputs, alias=True) if cache(k) else k for k in op.program]
        reps = [k for k in program if k.kind == "expand_clone"]  # eager: repeat_kv of k, of v
        if len(reps) == 2:  # k and v strided views now: matmul copies them unless repeat_kv did
            k_rep, v_rep = (k.outputs[0] for k in reps)
            k_t = next(k.outputs[0] for k in program if k.kind == "view" and k.inputs == (k_rep.name,))
            copies = {k_t.name: (replace(k_t, name=f"{k_t.name}:contiguous", role="k"), reps[0]),
                      v_rep.name: (replace(v_rep, name=f"{v_rep.name}:contiguous", role="v"), reps[1])}
            out = []
            for k in program:
                if k.kind == "bmm" and k.inputs[-1] in copies:
                    t, rep = copies[k.inputs[-1]]
                    note = f"{rep.outputs[0].name}|{rep.inputs[0]}"
                    out += [Kernel("matmul_copy", (k.inputs[-1],), (t,), note=note),
                            replace(k, inputs=(*k.inputs[:-1], t.name))]
                else:
                    out.append(k)
            program = out
        return replace(op, program=tuple(program))
    return replace(graph, blocks=tuple(blk.map_ops(drop) if blk.name == "layer" else blk for blk in graph.blocks))


def _model_output_dropped(op: Op) -> Op:
    """The base model's output object (its ``DynamicCache``) is dropped when the base model returns: the
    chunked head reads only ``last_hidden_state``, so what the output held lives until the final norm."""
    if not any(k.keep == "forward" for k in op.program):
        return op
    return replace(op, program=tuple(replace(k, keep=MODEL_LOCAL) if k.keep == "forward" else k for k in op.program))


def _chunked_output(op: Op, chunks: int) -> tuple[Op, list[Tensor]]:
    x = op.saved[0]
    bsz, seq, width = x.shape
    piece, vocab = seq / chunks, op.output.shape[-1]
    held = replace(x, name=f"{op.path}.hidden_held")
    views = tuple(Tensor(f"{op.path}.chunk{i}", (bsz, piece, width), x.dtype) for i in range(chunks))
    program = [Kernel("hold", (x.name,), (held,), alias=True, keep="forward"),
               Kernel("split", (x.name,), views, alias=True)]
    logits = []
    for i, view in enumerate(views):
        rows = Tensor(f"{op.path}.chunk{i}_rows", (bsz * piece, width), x.dtype)
        out = Tensor(f"{op.path}.logits{i}", (bsz, piece, vocab), op.output.dtype, role=op.output.role)
        mm = _linear(op, rows.name)[0]
        program += [Kernel("chunk_copy", (view.name,), (rows,)), replace(mm, outputs=(out,), keep="forward")]
        logits.append(out)
    return replace(op, program=tuple(program)), logits


def _chunked_cross_entropy(op: Op, logits: list[Tensor], chunks: int) -> Op:
    log_probs, labels, total_weight = op.saved
    bsz, seq = labels.shape
    piece = seq / chunks
    given = Tensor("@labels", (bsz, seq), INT64, role="batch")
    mask = Tensor(f"{op.path}.labelled", (bsz, seq), BOOL, role="token-ids")
    total = Tensor(f"{op.path}.total_elements", (), INT64, role="token-ids")
    views = tuple(Tensor(f"{op.path}.labels{i}_view", (bsz, piece), INT64, role="token-ids") for i in range(chunks))
    program = [Kernel("const", (), (given,)), Kernel("const", (given.name,), (mask,)),
               Kernel("const", (mask.name,), (total,), keep="forward"), Kernel("split", (given.name,), views, alias=True)]
    rows = []
    for i, view in enumerate(views):
        row = Tensor(f"{op.path}.labels{i}", (bsz * piece,), INT64, role="token-ids")
        program.append(Kernel("chunk_copy", (view.name,), (row,), keep="forward"))
        rows.append(row)
    acc = None
    for i, (chunk, row) in enumerate(zip(logits, rows)):
        up = Tensor(f"{op.path}.logits{i}_fp32", chunk.shape, FP32, role="logits")
        lp = replace(log_probs, name=f"{op.path}.log_softmax{i}", shape=chunk.shape)
        ce, tw = Tensor(f"{op.path}.chunk{i}", (), FP32, role="loss"), replace(total_weight, name=f"{total_weight.name}{i}")
        program += [_to(chunk.name, up, chunk.dtype, keep=f"={ce.name}"), Kernel("log_softmax", (up.name,), (lp,)),
                    Kernel("nll_loss", (lp.name, row.name), (ce, tw))]
        summed = Tensor(f"{op.path}.total_loss{i}", (), FP32, role="loss")
        program.append(Kernel("add", (ce.name,), (summed,), keep="forward") if acc is None else
                       Kernel("add", (acc.name, ce.name), (summed,), alias=True))  # 0.0 + loss, then +=
        acc = summed
    assert acc is not None
    program.append(Kernel("div", (acc.name, total.name), (op.output,)))
    return replace(op, program=tuple(program))


def _embedding(op: Op, keep: str) -> Op:
    w = op.params[0].name
    return replace(op, program=(Kernel("embedding", (w, op.inputs[0]), (op.output,), keep=keep),))


def _positions(op: Op, seq: Expr) -> tuple[Kernel, ...]:
    """``position_ids = torch.arange(inputs_embeds.shape[1]) + past_seen_tokens``, held by the model's forward."""
    arange = Tensor("@positions.arange", (seq,), INT64, role="token-ids")
    ids = Tensor("@position_ids", (seq,), INT64, role="token-ids")
    return (Kernel("const", (), (arange,)), Kernel("const", (arange.name,), (ids,), keep=MODEL_LOCAL))


def _mask(bsz: Expr, seq: Expr, act: DType) -> tuple[Kernel, ...]:
    """``create_causal_mask`` for eager attention (``masking_utils.sdpa_mask`` then ``eager_mask``):
    ``batch_arange``, ``head_arange``, ``q_arange = torch.arange(q_length) + q_offset`` and the same for kv,
    the boolean ``(1, 1, s, s)`` pattern, then ``torch.where(mask, torch.zeros((), dtype=dtype), min_dtype)``
    into the additive ``(b, 1, s, s)`` mask the model's forward holds (SDPA gets none: ``is_causal``)."""
    t = lambda name, shape, dt=INT64: Tensor(f"@mask.{name}", shape, dt, role="attention-mask")  # noqa: E731
    batch, head, q0, q, kv0, kv = t("batch", (bsz,)), t("head", (1,)), t("q0", (seq,)), t("q", (seq,)), \
        t("kv0", (seq,)), t("kv", (seq,))
    pattern, zero, low = t("pattern", (1, 1, seq, seq), BOOL), t("zero", (), act), t("min", (), act)
    mask = Tensor("@mask", (bsz, 1, seq, seq), act, role="attention-mask")
    return (Kernel("const", (), (batch,), keep=f"={pattern.name}"), Kernel("const", (), (head,), keep=f"={pattern.name}"),
            Kernel("const", (), (q0,)), Kernel("const", (q0.name,), (q,), keep=f"={pattern.name}"),
            Kernel("const", (), (kv0,)), Kernel("const", (kv0.name,), (kv,), keep=f"={pattern.name}"),
            Kernel("const", (batch.name, head.name, q.name, kv.name), (pattern,)),
            Kernel("const", (), (zero,)), Kernel("const", (), (low,)),
            Kernel("const", (pattern.name, zero.name, low.name), (mask,), keep=MODEL_LOCAL))


# --- the whole graph -----------------------------------------------------------------------------
#: The op kinds whose programs are written out, per block; a graph with any other op (dropout, adapters,
#: experts, q/k norms, the CPU SDPA math fallback) keeps no programs: every op runs as one fused call.
KNOWN = {"embed": frozenset({"embedding", "add"}),
         "layer": frozenset({"rms_norm", "layer_norm", "linear", "rotary", "attention", "sdpa", "silu-glu", "gelu_new",
                             "add"}),
         "head": frozenset({"rms_norm", "layer_norm", "linear", "cross_entropy", "rotary-tables"})}


def covered(graph: Graph, attention: str) -> bool:
    """Whether every op of ``graph`` has a written program (see ``KNOWN``)."""
    for blk in graph.blocks:
        kinds = {op.kind for op in blk.ops}
        if blk.name not in KNOWN or not kinds <= KNOWN[blk.name]:
            return False
        if attention != "eager" and "attention" in kinds:  # SDPA fell back to the math backend
            return False
    return True


def with_programs(original: Graph, graph: Graph, attention: str, fp32_softmax: bool, fused_qkv: bool) -> Graph:
    """``graph`` (transformers' layers) with the program of every op LLaMA-style and GPT-2 code runs, or
    ``graph`` as it is when some op has no written program (``covered``).

    ``original`` is the graph before the rewrite (its attention op names the q, k, v it reads);
    ``fused_qkv``: one ``Conv1D`` makes q, k and v (GPT-2), else three linears (LLaMA)."""
    if not covered(graph, attention) or len(graph.blocks) != len(original.blocks):
        return graph
    tables = [op for blk in graph.blocks for op in blk.ops if op.kind == "rotary-tables"]
    blocks = []
    for blk, before in zip(graph.blocks, original.blocks):
        if blk.name == "embed":
            blk = _embed_block(blk, tables[0] if tables else None, attention)
        elif blk.name == "head":
            blk = blk.map_ops(lambda op, x=blk.input.dtype: _head_op(op, x))
        else:
            blk = _layer_block(blk, before, attention, fp32_softmax, fused_qkv)
        blocks.append(blk)
    return replace(graph, blocks=tuple(blocks))


def _views(before: Block) -> dict[str, Tensor]:
    """The q, k, v the attention reads (after rotary for q and k), and the projections' views before it."""
    out: dict[str, Tensor] = {}
    for op in before.ops:
        if op.kind == "attention":
            for x in op.saved:
                out.setdefault(x.name, x)
        if op.kind == "rotary":
            out[op.inputs[0]] = replace(op.output, name=op.inputs[0])
            out[op.output.name] = op.output
    return out


def _layer_block(blk: Block, before: Block, attention: str, fp32_softmax: bool, fused_qkv: bool) -> Block:
    views = _views(before)
    attn_end = [op.path for op in blk.ops if op.path.startswith("attn/")][-1:]
    keep_attn = f"{blk.name}/{attn_end[0]}" if attn_end else "op"
    gates = {op.inputs[0]: op for op in blk.ops if op.kind.endswith("-glu")}
    rotary = any(op.kind == "rotary" for op in blk.ops)
    eager = attention == "eager"
    ops = []
    for op in blk.ops:
        op = _layer_op(op, blk, views, gates, keep_attn, rotary, eager, fp32_softmax, fused_qkv)
        if fused_qkv and attn_end and op.path == attn_end[0] and op.program:  # GPT2Block's `attn_output` local
            op = replace(op, program=(*op.program[:-1], replace(op.program[-1], keep="block")))
        ops.append(op)
    return replace(blk, ops=tuple(ops))


def _layer_op(op: Op, blk: Block, views: dict[str, Tensor], gates: dict[str, Op], keep_attn: str, rotary: bool,
              eager: bool, fp32_softmax: bool, fused_qkv: bool) -> Op:
    if op.kind == "rms_norm":
        return _rms_norm(op, blk.input.dtype)
    if op.kind == "layer_norm":
        return _layer_norm(op)
    if op.kind == "linear" and op.path == "attn/qkv":
        q, k, v = (views.get(f"attn/qkv.{n}") for n in "qkv")
        if q is None or k is None or v is None:
            return op
        if fused_qkv:  # grads of q and v reach their views contiguous in (b, a, s, d_h) under eager attention
            return _qkv_conv1d(op, q, k, v, (eager or rotary, rotary, eager), keep_attn)
        rotaries = [x.path for x in blk.ops if x.kind == "rotary"]
        keep_qk = f"{blk.name}/{rotaries[-1]}" if rotaries else ""
        return _qkv_separate(op, q, k, v, (eager or rotary, rotary, eager), keep_qk)
    if op.kind == "linear":
        program = _linear(op, op.inputs[0])
        gated = gates.get(op.output.name)
        if gated is not None and gated.kind == "silu-glu":  # act_fn(gate_proj(x)) runs before up_proj(x)
            program += (Kernel("silu", (op.output.name,), (gated.saved[1],)),)
        return replace(op, program=program)
    if op.kind == "silu-glu":
        return replace(op, program=(Kernel("mul", (op.saved[1].name, op.inputs[1]), (op.output,)),))
    if op.kind == "rotary":  # query_states lives until the attention returns; key_states is rebound by cache.update
        core = next((x for x in blk.ops if x.kind in ("attention", "sdpa") and x.inputs), None)
        queries = core is not None and op.output.name == core.inputs[0]
        return _rotary(op, op.inputs[0], keep_attn if queries or core is None else f"={core.path}.v_cache")
    if op.kind in ("attention", "sdpa"):
        q, k, v = (views.get(x) for x in op.inputs)
        if q is None or k is None or v is None:
            return op
        return _eager(op, q, k, v, fp32_softmax, True, True) if eager else _sdpa(op, q, k, v)
    if op.kind == "gelu_new":
        return _gelu_new(op)
    if op.kind == "add":
        return replace(op, program=(Kernel("add", op.inputs, (op.output,)),))
    return op


def _embed_block(blk: Block, tables: Op | None, attention: str) -> Block:
    """Token (and position) embeddings, then what the model's forward makes before the layers: position ids,
    the eager mask, the rotary tables."""
    ops, learned = [], any(op.path == "positions" for op in blk.ops)
    seq = blk.input.shape[1]
    for op in blk.ops:
        if op.path == "positions":
            ops.append(replace(op, program=(*_positions(op, seq), Kernel(
                "embedding", (op.params[0].name, "@position_ids"), (op.output,), keep=MODEL_LOCAL))))
        elif op.kind == "embedding":
            ops.append(_embedding(op, MODEL_LOCAL))
        elif op.kind == "add":
            ops.append(replace(op, program=(Kernel("add", op.inputs, (op.output,)),)))
        else:
            ops.append(op)
    act = next((op.output.dtype for op in blk.ops if op.kind == "embedding"), FP32)
    prelude = (() if learned else _positions(blk.ops[0], seq)) + (
        _mask(blk.input.shape[0], seq, act) if attention == "eager" else ())
    if prelude:
        ops.append(Op("prelude", "prelude", (), (), Tensor("@prelude", (), act), "position ids and mask",
                      program=prelude))
    if tables is not None:  # a new op of its own: the head's keeps the saved bytes (see _head_op)
        made = replace(tables, path="rotary_tables", saved=tuple(replace(x, name=f"@{x.name}") for x in tables.saved),
                       output=replace(tables.output, name=f"@{tables.output.name}"))
        ops.append(replace(_rotary_tables(made, tables.saved[0].shape[-1], act), saved=()))
    return replace(blk, ops=tuple(ops))


def _head_op(op: Op, x_dtype: DType) -> Op:
    if op.kind == "rms_norm":
        return _rms_norm(op, x_dtype)
    if op.kind == "layer_norm":
        return _layer_norm(op)
    if op.kind == "linear":  # the model's output object holds the logits until the forward returns
        kernel = _linear(op, op.inputs[0])[0]
        return replace(op, program=(replace(kernel, keep="forward"),))
    if op.kind == "cross_entropy":
        return _loss(op)
    if op.kind == "rotary-tables":  # counted here for the saved bytes; made before the layers (_embed_block)
        return replace(op, program=(Kernel("hold", (f"@{op.saved[0].name}",), (replace(op.output, name="@rotary.held"),),
                                           alias=True),))
    return op

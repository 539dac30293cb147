"""What transformers' own layers save, as a ``Graph -> Graph`` transform of the Megatron-style graph.

The graph of ``derivations.models.architectures`` describes fused kernels as Megatron-LM runs them
(``symbolic/ops.py``). transformers' modeling files save more, and in other dtypes; measured with
``saved_tensors_hooks`` on whole ``*ForCausalLM`` forwards (``tests/test_hf_saved.py``):

* ``LlamaRMSNorm`` is Python: ``x.to(float32)`` is saved (by ``pow`` and ``mul``), with the fp32
  ``rsqrt`` and the bf16 normalized value (saved by ``weight *``): 4 + 2 bytes per element instead of
  the fused kernel's 2.
* Eager attention (LLaMA-style families) runs ``softmax(dtype=float32)``: the fp32 probabilities are
  saved beside the 16-bit copy the second matmul saves; ``repeat_kv`` copies K and V to all ``a``
  heads before the matmuls save them. GPT-2's eager softmax stays 16-bit.
* Rotary ``cos``/``sin`` (s, d_h) are computed once per forward and saved by every layer's muls (counted
  once, in the ``head`` block, which is live whenever anything trains).
* ``gelu_new`` (NewGELUActivation, Python) saves its input, ``0.5*x``, ``tanh(.)`` and ``1 + tanh(.)``.
* SDPA saves q, k, v (a_kv heads: ``enable_gqa``), the output and the fp32 logsumexp (b, a, s)
  (``symbolic.hf_attention``: the math fallback, head-major outputs).

Where a family's code differs from LLaMA's, ``HfCode`` (``symbolic.hf_code``) names the rule it follows:
fp32-keeping RMSNorms (OLMo 2, gpt-oss) and Gemma's fp32 ``(1 + w)``, Cohere's Python LayerNorm, a
16-bit eager softmax (GPT-2) or fp32 scores (GPT-J), GPT-J's per-call rotary tables, Gemma 2's
softcapping, Falcon's causal mask always handed to SDPA, DeepSeek's router on fp32 copies,
gpt-oss's sinks (a 16-bit softmax over s + 1 columns), top-k-first router, clamped SwiGLU experts and
half-width cos/sin. Partial rotary reads narrower cos/sin tables (``d_r`` wide: the rotary op's ``reads``).

CPU and CUDA differ (``device``): on CPU ``F.dropout`` saves a mask in the input's dtype (CUDA's
``native_dropout``: 1-byte bool); ``F.layer_norm`` with bf16 weights returns bf16 mean/rstd on CPU
(fp32 on CUDA); SDPA with dropout has no CPU fused kernel and falls back to the math backend, which
upcasts to fp32 and saves what eager attention saves, in fp32, with K and V repeated. The default is
CUDA (what users train on); ``--device cpu`` gives CPU's kernels, which the tests compare with CPU
measurements (``tests/test_hf_families.py``: the command line itself, every family). CUDA's flash kernel also
saves two 8-byte RNG tensors (seed, offset) per layer: neglected.

>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.graph import Graph
>>> from memderive.symbolic.dims import b, s, h
>>> from memderive.symbolic.dtypes import DType, dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = bb.rms_norm("norm", bb.input)
>>> g = HuggingFace("eager")(Graph("toy", (bb.build(),)))
>>> [(x.name, x.dtype.name) for x in g.block("layer").ops[0].saved]
[('norm.x_fp32', 'fp32'), ('norm.rstd', 'fp32'), ('norm.normed', 'bf16')]
>>> g = HuggingFace("eager", code=HfCode(rms_norm="offset"))(Graph("toy", (bb.build(),)))
>>> [(x.name, x.dtype.name) for x in g.block("layer").ops[0].saved][2:]
[('norm.normed', 'fp32'), ('norm.one_plus_w', 'fp32')]
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.expr import Expr, Max, Min, const
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.hf_attention import Context, like, needs_inputs, rewrite
from memderive.symbolic.hf_code import ATTENTION_KERNELS, DEVICES, HfCode
from memderive.symbolic.hf_experts import EXPERTS_KERNELS, clamped_glu, grouped_mm, routing_dtype
from memderive.symbolic.hf_programs import chunked_loss, with_programs
from memderive.symbolic.strategies import Strategy
from memderive.symbolic.tensor import Tensor, merge_copies

__all__ = ["HuggingFace", "HfCode", "ATTENTION_KERNELS", "DEVICES", "EXPERTS_KERNELS"]

FP32, INT64 = dtype("fp32"), dtype("int64")


@dataclass(frozen=True, slots=True)
class HuggingFace(Strategy):
    """transformers' modeling code: ``attention`` kernel, ``device`` (cuda | cpu), the family's ``code``.

    ``fewer_kv`` (a_kv < a), ``single_kv`` (a_kv = 1) and ``value_differs`` (a value head size apart
    from q's) are the model's
    sizes where they decide the kernel (``symbolic.hf_attention``); ``fused_qkv``: GPT-2's ``c_attn``.
    Ops of LLaMA's and GPT-2's code get the program of ATen calls they run (``symbolic.hf_programs``).
    """

    attention: str = "sdpa"
    device: str = "cuda"
    code: HfCode = field(default_factory=HfCode)
    fewer_kv: bool = False
    value_differs: bool = False
    single_kv: bool = False
    fused_qkv: bool = False  # one Conv1D makes q, k and v (GPT-2's c_attn); else q_proj, k_proj, v_proj
    experts: str = "grouped_mm"  # transformers' experts_implementation (symbolic.hf_experts)
    loss_chunks: int = 1  # the output layer and the loss per chunk of the sequence (hf_programs.chunked_loss)
    window: tuple[int, int, int] | None = None  # sliding window w, windowed layers l_w of l (None: none)

    def __post_init__(self) -> None:
        if self.experts not in EXPERTS_KERNELS:
            raise ValueError(f"experts must be one of {', '.join(EXPERTS_KERNELS)}, not {self.experts!r}")
        if self.attention not in ATTENTION_KERNELS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_KERNELS)}, not {self.attention!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {self.device!r}")

    @property
    def name(self) -> str:
        where = "" if self.device == "cuda" else ", as on CPU"
        return f"transformers layers (hf-{self.attention}{where})"

    def __call__(self, graph: Graph) -> Graph:
        blocks = tuple(replace(blk, ops=tuple(self._ops(blk))) for blk in graph.blocks)
        if self.code.rotary_tables != "per-call" and any(blk.name == "head" for blk in blocks):
            dt = FP32 if self.code.rotary_tables == "shared-fp32" else None
            half = (lambda x: (*x.shape[:-1], x.shape[-1] / 2)) if self.code.rotary_half else (lambda x: x.shape)
            tables = {x.name + suffix: like(x, x.name + suffix, dt, half(x)) for blk in graph.blocks for op in blk.ops
                      for x in op.reads for suffix in ("", "_local")[:self.code.rotary_sets]}
            blocks = tuple(_with_once(blk, tuple(tables.values())) if blk.name == "head" else blk for blk in blocks)
        if self.code.bool_mask and self.attention == "eager":
            blocks = tuple(_with_once(blk, (_bool_mask(graph),)) if blk.name == "head" else blk for blk in blocks)
        note = (f"implementation: transformers' modeling code, {self.attention} attention"
                f"{' (CPU kernels)' if self.device == 'cpu' else ' (CUDA kernels)'}")
        rules = tuple(f"transformers' code: {rule}" for rule in self.code.rules())
        if any(op.kind == "experts" for _, op in graph.ops()):
            rules += (f"routed experts: experts_implementation={self.experts}"
                      + (" (sorted by expert: int64 permutations and int32 offsets saved, the scaled outputs not)"
                         if self.experts == "grouped_mm" else " (a loop over the experts, index_add_ back)"),)
        done = replace(graph, blocks=blocks, strategies=graph.strategies + (self.name,),
                       assumptions=graph.assumptions + (note, *rules))
        if replace(self.code, softmax_fp32=True, python_gelu=False, strided_views=()) != HfCode():  # programs: LLaMA's, GPT-2's code
            return done
        programs = with_programs(graph, done, self.attention, self.code.softmax_fp32, self.fused_qkv)
        return chunked_loss(programs, self.loss_chunks)

    # --- per op ----------------------------------------------------------------------------------
    def _ops(self, blk: Block) -> list[Op]:
        out: list[Op] = []
        for op in blk.ops:
            out.append(self._attention(op, blk) if op.kind == "attention" else self._op(op))
            if op.path == "lm_head" and self.code.logit_softcap:
                tanh = like(op.output, "lm_head.softcap_tanh", role="logits")
                out.append(Op("lm_head/softcap", "softcap", (), (tanh,), op.output, "final logits: c tanh(x / c)",
                              inputs=(op.output.name,), saved_for=((tanh.name, (op.output.name,)),)))
        return out

    def _op(self, op: Op) -> Op:
        if op.kind == "rms_norm":
            return _rms_norm(op, self.code.rms_norm)
        if op.kind == "layer_norm":
            return self._layer_norm(op)
        if op.kind == "dropout" and self.device == "cpu":
            return replace(op, saved=tuple(like(x, x.name, op.output.dtype) for x in op.saved))
        if op.kind == "gelu" and self.code.python_gelu:
            x = op.saved[0]
            parts = tuple(like(x, f"{op.path}.{k}", role="activation") for k in ("half_x", "tanh", "one_plus_tanh"))
            return needs_inputs(replace(op, kind="gelu_new", saved=(x, *parts), note="NewGELUActivation (Python)"))
        if op.kind == "cross_entropy" and self.loss_chunks == 1:
            return _shifted_labels(op)
        if op.kind == "router" and (self.code.router_fp32 or self.code.router_group_mask):
            return _router(op, self.code)
        if op.kind == "router" and self.code.router_topk_first:
            return _router_topk_first(op, FP32 if self.code.router_logits_fp32 else op.output.dtype)
        if op.kind == "router" and self.code.sparsemixer:
            return _sparsemixer(op, self.code.input_jitter)
        if op.kind == "experts":
            op = routing_dtype(op, FP32) if self.code.routing_fp32 else op
            op = clamped_glu(op) if self.code.clamped_glu else op
            return grouped_mm(op) if self.experts == "grouped_mm" else op
        if op.kind == "embedding" and op.path == "positions" and self.code.position_buffer:
            return replace(op, saved=(), saved_for=(), note="position ids: a slice of a registered buffer")
        if op.kind == "rotary" and self.code.rotary_tables == "per-call":
            return replace(op, saved=tuple(replace(x, name=f"{op.path}.{x.name.rsplit('.', 1)[-1]}") for x in op.reads),
                           note="sin/cos repeat_interleave'd per call (GPT-J's apply_rotary_pos_emb)")
        return op

    def _attention(self, op: Op, blk: Block) -> Op:
        """The attention op under the kernel; the outputs its strided operands are views of (``strided_views``:
        the op whose output the operand was split from, ``attn/qkv`` for ``attn/qkv.q``)."""
        made = {x.path: x.output for x in blk.ops}
        names = dict(zip(("q", "k", "v"), op.inputs))
        bases = tuple((role, made[names[role].rsplit(".", 1)[0]]) for role in self.code.strided_views
                      if role in names and names[role].rsplit(".", 1)[0] in made)
        ctx = Context(self.attention, self.device, self.code, self.fewer_kv, self.value_differs, self.single_kv, bases,
                      self._window_share(op))
        return rewrite(op, ctx)

    def _window_share(self, op: Op) -> Expr | None:
        """The share of the layers whose window is shorter than the sequence: ``sdpa_mask`` skips the mask
        (``allow_is_causal_skip``: causal SDPA, K and V as they are) only while the whole sequence fits the
        window (masking_utils: ``_ignore_causal_mask_sdpa`` with ``local_attention_size``); past it every
        sliding layer gets the windowed bool mask (b, 1, s, s). ``Min(Max(s - w, 0), 1)`` of integers is 1
        where s > w, else 0; ``l_w / l`` of the layers slide."""
        if self.window is None or self.attention != "sdpa":
            return None
        w, l_w, l = self.window
        seq = next(x for x in op.saved if x.role == "q").shape[2]
        return Min(Max(seq - w, 0), 1) * const(l_w) / l

    def _layer_norm(self, op: Op) -> Op:
        if self.code.layer_norm == "python-fp32":
            return _python_layer_norm(op)
        if self.code.layer_norm == "one-plus":
            op = _one_plus_layer_norm(op)
        if self.device == "cpu":  # F.layer_norm with 16-bit weights returns 16-bit mean and rstd on CPU
            return replace(op, saved=tuple(like(x, x.name, op.output.dtype) if x.role == "norm-stats" else x
                                           for x in op.saved))
        return op


def _rms_norm(op: Op, variant: str) -> Op:
    """An RMSNorm in Python: fp32 copy of the input and fp32 rsqrt (saved by ``pow`` and ``mul``), then
    the weight product: ``llama`` saves the 16-bit normed value, ``fp32-product`` the fp32 one,
    ``offset`` the fp32 normed value and the fp32 ``1 + w`` (Gemma)."""
    x, rstd = op.saved[0], op.saved[1]
    upcast = like(x, f"{op.path}.x_fp32", FP32, role="activation")
    normed = like(x, f"{op.path}.normed", op.output.dtype if variant == "llama" else FP32, role="activation")
    weights = tuple(w.name for w in op.params)
    saved = [(upcast, (x.name,)), (rstd, (x.name,)), (normed, weights)]  # weight * normed
    if variant == "offset" and op.params:
        saved.append((Tensor(f"{op.path}.one_plus_w", op.params[0].shape, FP32, role="norm-weight"), (x.name,)))
    names = {"llama": "LlamaRMSNorm", "fp32-product": "RMSNorm, weight product in fp32",
             "offset": "GemmaRMSNorm, x * (1 + w) in fp32"}
    return replace(op, saved=tuple(t for t, _ in saved), note=f"{names[variant]} (Python, fp32 copy)",
                   saved_for=tuple((t.name, g) for t, g in saved) if op.saved_for else ())


def _router(op: Op, code: HfCode) -> Op:
    """DeepSeek's ``TopkRouter``: ``F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))``
    saves the fp32 copies of its input (in place of the 16-bit input) and of its weight (E, h), the cast a
    new tensor once the model is in 16 bits; ``group_limited_greedy`` (DeepSeek-V2) then
    ``scores.masked_fill(~score_mask.bool(), 0.0)``, which saves the bool mask (b, s, E) of the experts
    outside the chosen groups. DeepSeek-V3's group choice reads the scores only for their top-k indices:
    that branch needs no gradient and what it saves is freed during the forward."""
    x, rest = op.saved[0], op.saved[1:]
    saved = [x]
    if code.router_fp32:
        weight = op.params[0]
        saved = [like(x, f"{op.path}.x_fp32", FP32, role="activation"),
                 Tensor(f"{op.path}.weight_fp32", weight.shape, FP32, role="weight-copy")]
    if code.router_group_mask:
        scores = rest[0]
        rest = (rest[0], like(scores, f"{op.path}.group_mask", dtype("bool"), role="router"), *rest[1:])
    return replace(op, saved=(*saved, *rest), note=(op.note + "; " if op.note else "") +
                   ("router on fp32 copies of its input and weight" if code.router_fp32 else "")
                   + ("; group-limited scores masked" if code.router_group_mask else ""))


def _router_topk_first(op: Op, dt: DType) -> Op:
    """gpt-oss's ``GptOssTopKRouter`` and GraniteMoE's: ``torch.topk(router_logits, k)`` saves its int64
    indices (b, s, k), the softmax of the k values its output (b, s, k) in ``dt`` (gpt-oss: the logits'
    16 bits; GraniteMoE: fp32, ``F.linear(hidden_states, self.weight).float()``), the linear its input:
    no E-wide scores, no renormalisation."""
    x, indices = op.saved[0], next(t for t in op.saved if t.name == f"{op.path}.indices")
    weights = like(indices, f"{op.path}.top_softmax", dt, role="router")
    return replace(op, saved=(x, indices, weights), note=(op.note + "; " if op.note else "") +
                   "top-k of the logits, then a softmax over the k")


def _sparsemixer(op: Op, jitter: bool) -> Op:
    """Phi-MoE's ``PhimoeTopKRouter``: the linear saves its input; ``sparsemixer`` picks two experts, each
    ``scores.masked_fill(mask_logits_threshold, -inf)`` (its bool mask (b, s, E) saved), ``torch.softmax``
    (its 16-bit output saved, and by ``PhimoeMultiplier``), ``gather(index=selected_experts)`` (the int64
    index (b, s, 1), also saved by the second pick's ``torch.scatter`` and by ``PhimoeMultiplier``) and the
    gathered multiplier (b, s, 1) that ``PhimoeMultiplier`` saves. The Gumbel sampling's ``max`` and the
    midpoint mask's ``max`` are read only for indices: their nodes are freed during the forward. With
    ``input_jitter_noise`` > 0 the block and the router each run ``hidden_states *= noise``: the noise saved."""
    x = op.saved[0]
    lead, act, experts = x.shape[:-1], op.output.dtype, op.params[0].shape[0]
    saved = [x]
    if jitter:
        saved += [like(x, f"{op.path}.{name}_noise", act, role="activation") for name in ("block", "router")]
    for i in (1, 2):
        saved += [like(x, f"{op.path}.mask{i}", dtype("bool"), (*lead, experts), "router"),
                  like(x, f"{op.path}.softmax{i}", act, (*lead, experts), "router"),
                  like(x, f"{op.path}.index{i}", INT64, (*lead, 1), "router"),
                  like(x, f"{op.path}.multiplier{i}", act, (*lead, 1), "router")]
    return replace(op, saved=tuple(saved), note=(op.note + "; " if op.note else "") + "sparsemixer")


def _shifted_labels(op: Op) -> Op:
    """``ForCausalLMLoss``: ``labels = nn.functional.pad(labels, (0, 1), value=ignore_index)`` then
    ``shift_labels = labels[..., 1:].contiguous()``, which ``nll_loss`` saves: a copy of b s ids where b > 1, the
    padded (1, s + 1) labels themselves at b = 1 (the slice is contiguous already: ``contiguous`` returns it)."""
    labels = next(x for x in op.saved if x.role == "token-ids")
    bsz, seq = labels.shape
    shifted = replace(labels, shape=(bsz, seq + 1 - merge_copies(bsz)))
    return replace(op, saved=tuple(shifted if x is labels else x for x in op.saved))


def _python_layer_norm(op: Op) -> Op:
    """Cohere's LayerNorm written out in fp32: ``x - mean`` twice (for ``pow`` and for the product with
    rstd), the fp32 rsqrt, the fp32 copy of the weight and the fp32 normed value."""
    x = op.saved[0]
    centred = [like(x, f"{op.path}.centred{i}", FP32, role="activation") for i in (1, 2)]
    rstd = Tensor(f"{op.path}.rstd", x.shape[:-1], FP32, role="norm-stats", seq_axis=x.seq_axis)
    normed = like(x, f"{op.path}.normed", FP32, role="activation")
    weights = tuple(w.name for w in op.params)
    saved = [(centred[0], (x.name,)), (rstd, (x.name,)), (centred[1], (x.name,)), (normed, weights)]
    if op.params:
        saved.append((Tensor(f"{op.path}.weight_fp32", op.params[0].shape, FP32, role="norm-weight"), (x.name,)))
    return replace(op, saved=tuple(t for t, _ in saved), note="Python LayerNorm in fp32 (CohereLayerNorm)",
                   saved_for=tuple((t.name, g) for t, g in saved) if op.saved_for else ())


def _one_plus_layer_norm(op: Op) -> Op:
    """Nemotron's LayerNorm1P: ``F.layer_norm(x, shape, self.weight + 1.0, self.bias)``; ``native_layer_norm``
    saves its weight argument, the (h,) sum, a tensor made in the forward (in the activation dtype: the module's
    own under a 16-bit model, autocast's cast of it otherwise), needed for the input's gradient."""
    if not op.params:
        return op
    weight = op.params[0]
    one_plus = Tensor(f"{op.path}.weight_plus_one", weight.shape, op.output.dtype, role="norm-weight")
    x = op.saved[0]
    saved_for = (*op.saved_for, (one_plus.name, (x.name,))) if op.saved_for else ()
    return replace(op, saved=(*op.saved, one_plus), saved_for=saved_for, note="LayerNorm1P (weight + 1)")


def _bool_mask(graph: Graph) -> Tensor:
    bsz, seq = graph.blocks[0].input.shape[:2]
    return Tensor("attention_mask", (bsz, 1, seq, seq), dtype("bool"), role="attention-mask", seq_axis=2)


def _with_once(blk: Block, tensors: tuple[Tensor, ...]) -> Block:
    """Tensors the model makes once per forward, before the layers, and every layer saves (cos and sin
    (s, d_r), MPT's bool mask), held in the ``head`` block, which is live whenever anything trains."""
    if not tensors:
        return blk
    path = "rotary_tables" if tensors[0].role == "rotary-tables" else "attention_mask"
    op = Op(path, path.replace("_", "-"), (), tensors, tensors[-1],
            "computed once per forward (by the model, before the layers), saved by every layer")
    return replace(blk, ops=(*blk.ops, op))

"""Op constructors: each returns an ``Op`` declaring parameters, saved tensors and output.

What each op saves is what PyTorch autograd saves for the implementation named in the
docstring (the reference implementations in ``tests/reference_layers.py`` are measured with
``torch.autograd.graph.saved_tensors_hooks``). ``BlockBuilder`` chains them into a ``Block``.

Each op also declares its FLOPs (``symbolic.graph.Flop``): matrix multiplies as
``torch.utils.flop_counter.FlopCounterMode`` counts them (2mnk; backward = input gradient +
weight gradient; eager attention's full s x s products), and elementwise work apart (see
``ELEMENTWISE``).

Shapes use the letters of ``symbolic.dims``: activations are ``(b, s, h)``, attention
tensors ``(b, a, s, d_h)``, weights ``(out, in)`` as in ``torch.nn.Linear``.

>>> from memderive.symbolic.dims import b, s, h
>>> from memderive.symbolic.dtypes import dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> y = bb.linear("fc", bb.input, 4 * h, bias=True, parallel="column")
>>> sum(t.numel for t in bb.ops[-1].params)
4*h**2 + 4*h
>>> sum(x.count for x in bb.ops[-1].flops if x.kind == "matmul")
24*b*h**2*s
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.expr import Size, const
from memderive.symbolic.graph import Block, Flop, Op
from memderive.symbolic.tensor import Tensor

__all__ = ["BlockBuilder", "PARAM_DTYPE", "ELEMENTWISE", "matmul_rows", "linear_flops", "pointwise_flops"]

#: Parameters are counted in elements; their bytes depend on the training/serving recipe.
PARAM_DTYPE = dtype("fp32")
FP32, BOOL, INT64 = dtype("fp32"), dtype("bool"), dtype("int64")

Parallel = Literal["column", "row", "vocab", None]

#: Elementwise FLOPs per output element of the forward pass, one per arithmetic operation as
#: written (softmax 3: Hoffmann et al. 2022, App. F). NOTE(memderive): a convention, not a
#: measurement (FlopCounterMode counts matmuls only); backward is counted as twice the forward,
#: except a residual add's (its gradient passes through). relu2 (squared ReLU): the relu, then its square.
ELEMENTWISE = {"add": 1, "bias": 1, "layer_norm": 7, "rms_norm": 4, "relu": 1, "relu2": 2, "tanh": 1, "gelu": 8, "silu": 4,
               "glu": 1, "dropout": 1, "rotary": 3, "softmax": 3, "cross_entropy": 4, "embedding": 1,
               "clamp": 3, "rotary-yarn": 3, "skip": 2}  # clamp: per element of a gate, its clamp from above (1) and its up's both ways (2)
# skip: a state space scan's D skip, y + D x (a product and an add)


def matmul_rows(path: str, x: Tensor, rows: tuple[Size, ...] | None = None, cached: bool = False) -> Tensor:
    """The rows a matmul reads: every position of ``x`` (whole under sequence parallelism, which
    gathers a linear layer's input before the product); ``cached``: every cached position, also in
    a decode step (role ``cached-rows``)."""
    return Tensor(f"{path}.rows", tuple(x.shape[:-1] if rows is None else rows), x.dtype,
                  role="cached-rows" if cached else "rows")


def linear_flops(path: str, rows: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Flop, ...]:
    """``x W^T``: forward, input gradient and the weight gradient tied to ``weight``; a bias adds
    one elementwise add forward and a row sum for its gradient."""
    name = f"{path} x@W"
    terms = [Flop(name, (rows, weight)), Flop(name, (rows, weight), phase="input-grad"),
             Flop(name, (rows, weight), phase="weight-grad", param=weight.name)]
    if bias is not None:
        terms += [Flop(f"{path} +bias", (rows, bias), 1, "elementwise"),
                  Flop(f"{path} +bias", (rows, bias), 1, "elementwise", "weight-grad", bias.name)]
    return tuple(terms)


def pointwise_flops(path: str, kind: str, x: Tensor, params: tuple[Tensor, ...] = ()) -> tuple[Flop, ...]:
    """Elementwise work over ``x``; a norm's weight (and bias) gradient is a row sum per parameter."""
    per = ELEMENTWISE[kind]
    terms = [Flop(f"{path} {kind}", (x,), per, "elementwise")]
    if kind != "add":
        terms.append(Flop(f"{path} {kind}", (x,), 2 * per, "elementwise", "input-grad"))
    terms += [Flop(f"{path} d{w.name}", (x,), 1, "elementwise", "weight-grad", w.name) for w in params]
    return tuple(terms)


def _all_for(saved: tuple[Tensor, ...], grads: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every saved tensor serves every gradient (a norm's backward needs input and statistics for both)."""
    return tuple((x.name, grads) for x in saved)


def _param(name: str, shape: tuple[Size, ...], role: str, tp_axis: int | None) -> Tensor:
    return Tensor(name, shape, PARAM_DTYPE, role=role, tp_axis=tp_axis)


class BlockBuilder:
    """Accumulates ops of one block; ``build()`` freezes them into a ``Block``.

    ``act`` is the activation dtype (16-bit under mixed precision).
    """

    def __init__(self, name: str, input_shape: tuple[Size, ...], act: DType,
                 input_dtype: DType | None = None, input_role: str = "input") -> None:
        self.name, self.act = name, act
        self.ops: list[Op] = []
        self.share: object = 1  # fraction of the block's repeats holding the ops added now (see ``Op.share``)
        # Token ids are held whole by every rank (sequence parallelism splits after the embedding).
        self.input = Tensor("in", tuple(input_shape), input_dtype or act, role=input_role,
                            seq_axis=1 if len(input_shape) > 1 and input_role != "token-ids" else None)

    def _add(self, op: Op) -> Tensor:
        self.ops.append(op if self.share == 1 else replace(op, share=self.share))
        return op.output

    def add_op(self, op: Op) -> Tensor:
        """An op built outside this class (``symbolic.mamba``), under the builder's current ``share``."""
        return self._add(op)

    def _act(self, name: str, shape: tuple[Size, ...], role: str = "activation",
             tp_axis: int | None = None, dt: DType | None = None, seq_axis: int | None = 1) -> Tensor:
        return Tensor(name, shape, dt or self.act, role=role, tp_axis=tp_axis, seq_axis=seq_axis)

    def build(self, repeat: Size | int = 1) -> Block:
        return Block(self.name, tuple(self.ops), self.input, repeat=const(repeat))

    # --- embeddings -------------------------------------------------------------------------
    def embedding(self, path: str, ids: Tensor, rows: Size, width: Size, *,
                  parallel: Parallel = None) -> Tensor:
        """``nn.Embedding``: weight (rows, width); backward saves the int64 indices."""
        tp_axis = 0 if parallel == "vocab" else None
        weight = _param(f"{path}.weight", (rows, width), "weight", tp_axis)
        out = self._act(f"{path}.out", (*ids.shape, width))
        grad = Flop(f"{path} scatter-add", (out,), ELEMENTWISE["embedding"], "elementwise", "weight-grad", weight.name)
        return self._add(Op(path, "embedding", (weight,), (ids,), out, flops=(grad,), inputs=(ids.name,),
                            saved_for=((ids.name, (weight.name,)),)))

    # --- linear layers ----------------------------------------------------------------------
    def linear(self, path: str, x: Tensor, out_features: Size, *, bias: bool,
               parallel: Parallel = None, weight: Tensor | None = None, note: str = "",
               rows: tuple[Size, ...] | None = None, over_cache: bool = False) -> Tensor:
        """``nn.Linear``: weight (out, in), bias (out); saves its input.

        ``parallel`` follows Megatron: ``column`` splits the output features over t ranks,
        ``row`` splits the input features (its bias stays whole), ``vocab`` is a column split of
        the output layer. ``weight`` given means the weight is owned elsewhere (tied). ``rows``:
        the shape of the rows the product reads when not every position of ``x`` (BERT's pooler
        reads the first token); ``over_cache``: a decode step runs it over every cached position
        (transformers' MLA expands its cached latent each step).
        """
        in_features = x.shape[-1]
        w_axis = {"column": 0, "vocab": 0, "row": 1, None: None}[parallel]
        params: list[Tensor] = []
        if weight is None:
            weight = _param(f"{path}.weight", (out_features, in_features), "weight", w_axis)
            params.append(weight)
        if bias:
            params.append(_param(f"{path}.bias", (out_features,), "bias",
                                 0 if parallel in ("column", "vocab") else None))
        out_axis = len(x.shape if rows is None else (*rows, 1)) - 1 if parallel in ("column", "vocab") else None
        out = self._act(f"{path}.out", (*(x.shape[:-1] if rows is None else rows), out_features), tp_axis=out_axis,
                        seq_axis=1 if rows is None else None)
        product_rows = matmul_rows(path, x, rows, over_cache)
        if parallel is None and rows is None and not over_cache and x.tp_axis is None:
            # replicated on every tensor-parallel rank: under sequence parallelism each rank multiplies its own
            # s/t tokens (Megatron-Core's 'duplicated' MLA down-projections read the sequence-parallel input)
            product_rows = replace(product_rows, seq_axis=x.seq_axis)
        flops = linear_flops(path, product_rows, weight, params[-1] if bias else None)
        w_name = (weight if weight is not None else params[0]).name
        return self._add(Op(path, "linear", tuple(params), (x,), out, note, flops=flops, inputs=(x.name,),
                            saved_for=((x.name, (w_name,)),)))

    # --- norms ------------------------------------------------------------------------------
    def layer_norm(self, path: str, x: Tensor, *, bias: bool = True) -> Tensor:
        """``F.layer_norm``: weight (and bias) of width h; saves input, fp32 mean and rstd."""
        width = x.shape[-1]
        params = [_param(f"{path}.weight", (width,), "weight", None)]
        if bias:
            params.append(_param(f"{path}.bias", (width,), "bias", None))
        stats = tuple(self._act(f"{path}.{k}", x.shape[:-1], "norm-stats", dt=FP32) for k in ("mean", "rstd"))
        out = self._act(f"{path}.out", x.shape, tp_axis=x.tp_axis)
        flops = pointwise_flops(path, "layer_norm", out, tuple(params))
        return self._add(Op(path, "layer_norm", tuple(params), (x, *stats), out, flops=flops, inputs=(x.name,),
                            saved_for=_all_for((x, *stats), (x.name, *(w.name for w in params)))))

    def rms_norm(self, path: str, x: Tensor, *, weight: bool = True) -> Tensor:
        """``F.rms_norm``: weight of width h; saves input and fp32 rstd."""
        width = x.shape[-1]
        params = (_param(f"{path}.weight", (width,), "weight", None),) if weight else ()
        rstd = self._act(f"{path}.rstd", x.shape[:-1], "norm-stats", dt=FP32,
                         seq_axis=x.seq_axis if x.seq_axis is not None and x.seq_axis < len(x.shape) - 1 else None)
        out = self._act(f"{path}.out", x.shape, tp_axis=x.tp_axis, seq_axis=x.seq_axis)
        return self._add(Op(path, "rms_norm", params, (x, rstd), out, flops=pointwise_flops(path, "rms_norm", out, params), inputs=(x.name,),
                            saved_for=_all_for((x, rstd), (x.name, *(w.name for w in params)))))

    # --- pointwise --------------------------------------------------------------------------
    def activation(self, path: str, x: Tensor, kind: str) -> Tensor:
        """GeLU / ReLU / SiLU / tanh: saves its input (ReLU and tanh save their output: same size).
        Squared ReLU (``relu2``) saves one tensor of the input's size: Megatron-Core's ``squared_relu``
        (``torch.pow(F.relu(x), 2)`` under ``jit_fuser``) its input, transformers' ReLUSquaredActivation the
        ReLU's output, which both ``relu`` (its result) and ``square`` (its input) save."""
        out = self._act(f"{path}.out", x.shape, tp_axis=x.tp_axis)
        saved = out if kind in ("relu", "tanh") else x
        return self._add(Op(path, kind, (), (saved,), out, flops=pointwise_flops(path, kind, out), inputs=(x.name,)))

    def gated(self, path: str, gate: Tensor, up: Tensor, kind: str) -> Tensor:
        """``act(gate) * up`` (SwiGLU, GeGLU), unfused: saves gate, act(gate) and up."""
        activated = self._act(f"{path}.act", gate.shape, tp_axis=gate.tp_axis)
        out = self._act(f"{path}.out", gate.shape, tp_axis=gate.tp_axis)
        flops = pointwise_flops(path, kind, activated) + pointwise_flops(path, "glu", out)
        # act(gate) saves gate for gate's gradient; the product saves each factor for the other's.
        needs = ((gate.name, (gate.name,)), (activated.name, (up.name,)), (up.name, (gate.name,)))
        return self._add(Op(path, f"{kind}-glu", (), (gate, activated, up), out, flops=flops, inputs=(gate.name, up.name),
                            saved_for=needs))

    def dropout(self, path: str, x: Tensor) -> Tensor:
        """``torch.native_dropout``: saves a 1-byte mask of the input's shape."""
        mask = Tensor(f"{path}.mask", x.shape, BOOL, role="dropout-mask", tp_axis=x.tp_axis, seq_axis=x.seq_axis)
        out = self._act(f"{path}.out", x.shape, tp_axis=x.tp_axis, seq_axis=x.seq_axis)
        return self._add(Op(path, "dropout", (), (mask,), out, flops=pointwise_flops(path, "dropout", out), inputs=(x.name,)))

    def add(self, path: str, x: Tensor, y: Tensor) -> Tensor:
        """Residual add: saves nothing."""
        out = self._act(f"{path}.out", x.shape)
        return self._add(Op(path, "add", (), (), out, flops=pointwise_flops(path, "add", out), inputs=(x.name, y.name)))

    def concat(self, path: str, *xs: Tensor) -> Tensor:
        """``torch.cat`` along the last axis: saves nothing (its backward slices the gradient)."""
        width = sum((x.shape[-1] for x in xs[1:]), xs[0].shape[-1])
        out = self._act(f"{path}.out", (*xs[0].shape[:-1], width))
        return self._add(Op(path, "concat", (), (), out, inputs=tuple(x.name for x in xs)))

    # --- attention --------------------------------------------------------------------------
    def split_heads(self, path: str, qkv: Tensor, heads: tuple[Size, ...], d_head: Size,
                    names: tuple[str, ...] = ("q", "k", "v")) -> tuple[Tensor, ...]:
        """View a fused projection (b, s, sum(heads)*d_h) as per-head tensors (b, heads, s, d_h)."""
        bsz, seq = qkv.shape[0], qkv.shape[1]
        return tuple(self._act(f"{path}.{name}", (bsz, n_heads, seq, d_head), role=name, tp_axis=1, seq_axis=2)
                     for name, n_heads in zip(names, heads))

    def rotary(self, path: str, x: Tensor, width: Size | None = None, yarn: bool = False) -> Tensor:
        """RoPE: ``x*cos + rotate_half(x)*sin`` saves no activation; it reads the cos/sin tables
        ``(s, width)`` made once per forward (``width``: the rotated part of each head, all of it
        unless partial rotary, e.g. GPT-NeoX's ``rotary_pct``). ``yarn``: YaRN-scaled tables (its
        mscale on the tables, the same work per element), the term named ``rotary-yarn``: frameworks
        that fuse plain RoPE only run it unfused (``memory_bound.UNFUSED_MOVES``)."""
        out = Tensor(f"{path}.out", x.shape, x.dtype, role=x.role, tp_axis=x.tp_axis, seq_axis=x.seq_axis)
        seq, cols = x.shape[-2], x.shape[-1] if width is None else width
        tables = tuple(Tensor(f"rotary.{k}", (seq, cols), self.act, role="rotary-tables", seq_axis=0)
                       for k in ("cos", "sin"))
        return self._add(Op(path, "rotary", (), (), out, "cos/sin tables are buffers shared by all layers",
                            flops=pointwise_flops(path, "rotary-yarn" if yarn else "rotary", out), inputs=(x.name,),
                            reads=tables))

    def head_norm(self, path: str, x: Tensor, kind: str) -> Tensor:
        """Per-head q/k norm (Qwen3, OLMo2-style) over d_h: weight (d_h,), saves input and rstd."""
        d_head = x.shape[-1]
        weight = _param(f"{path}.weight", (d_head,), "weight", None)
        rstd = self._act(f"{path}.rstd", x.shape[:-1], "norm-stats", tp_axis=x.tp_axis, dt=FP32, seq_axis=2)
        out = Tensor(f"{path}.out", x.shape, x.dtype, role=x.role, tp_axis=x.tp_axis, seq_axis=x.seq_axis)
        return self._add(Op(path, kind, (weight,), (x, rstd), out, flops=pointwise_flops(path, kind, out, (weight,)), inputs=(x.name,),
                            saved_for=_all_for((x, rstd), (x.name, weight.name))))

    def attention(self, path: str, q: Tensor, k: Tensor, v: Tensor, *, dropout: bool) -> Tensor:
        """Eager scaled-dot-product attention as in Megatron-LM (fused scale-mask-softmax).

        ``scores = q k^T / sqrt(d_h)`` (saves q, k), ``P = softmax(scores + mask)`` (saves P),
        ``P' = dropout(P)`` (saves a 1-byte mask), ``ctx = P' v`` (saves P' and v). Grouped
        queries share k, v without copying them (a_kv heads). The output is the context
        ``(b, s, a*d_h)`` made contiguous for the output projection.

        FLOPs: ``q k^T`` and ``P v`` are 2 b a s s d_h each, over the full s x s (eager attention
        masks, it does not skip; grouped keys are expanded to a heads first); backward takes two
        products per product (the gradients of both operands).
        """
        bsz, heads, seq, d_head = q.shape
        s2 = (bsz, heads, seq, seq)
        probs = self._act(f"{path}.softmax", s2, "attention-scores", tp_axis=1, seq_axis=2)
        saved = [q, k, probs]
        if dropout:
            mask = Tensor(f"{path}.dropout.mask", s2, BOOL, role="attention-scores", tp_axis=1, seq_axis=2)
            dropped = self._act(f"{path}.dropout.out", s2, "attention-scores", tp_axis=1, seq_axis=2)
            saved += [mask, dropped]
        saved.append(v)
        out = self._act(f"{path}.out", (bsz, seq, heads * v.shape[-1]), "attention-output", tp_axis=2)
        flops = _attention_flops(path, s2, d_head, v.shape[-1], dropout)
        # q k^T saves each for the other's gradient; P' v likewise; the scores' tensors serve q and k.
        qk = (q.name, k.name)
        needs = [(q.name, (k.name,)), (k.name, (q.name,)), (v.name, qk)]
        needs += [(x.name, qk) for x in saved[2:-2]]  # P and the dropout mask (with dropout)
        needs.append((saved[-2].name, (v.name,) if dropout else (*qk, v.name)))  # P' (or P): also softmax's
        return self._add(Op(path, "attention", (), tuple(saved), out, flops=flops, inputs=(q.name, k.name, v.name),
                            saved_for=tuple(needs)))

    def cross_entropy(self, path: str, logits: Tensor) -> Tensor:
        """``F.cross_entropy(logits.float(), labels)``: log-softmax saves fp32 logits-sized output,
        ``nll_loss`` saves it again (same tensor) and the int64 labels.

        NOTE(memderive): measured with ``tests/test_saved_tensors.py``; nll_loss also saves its
        0-dim fp32 ``total_weight`` (4 bytes), role ``loss-scalars``.
        """
        saved = self._act(f"{path}.log_softmax", logits.shape, "logits", tp_axis=logits.tp_axis, dt=FP32)
        labels = Tensor(f"{path}.labels", logits.shape[:-1], INT64, role="token-ids")
        total_weight = Tensor(f"{path}.total_weight", (), FP32, role="loss-scalars")
        out = self._act(f"{path}.out", (), "loss", dt=FP32, seq_axis=None)
        flops = pointwise_flops(path, "cross_entropy", saved)
        return self._add(Op(path, "cross_entropy", (), (saved, labels, total_weight), out, flops=flops, inputs=(logits.name,)))

    # --- mixture of experts -------------------------------------------------------------------
    def router(self, path: str, x: Tensor, experts: Size, top_k: Size, *, bias: bool,
               renormalize: bool = True) -> Tensor:
        """Router (gate): linear ``h -> E`` (weight (E, h)), fp32 softmax scores, top-k choice.

        Saves the linear's input, the fp32 scores ``(b, s, E)``, the int64 indices of the k chosen
        experts and, when the k weights are renormalised to sum to 1, the fp32 weights ``(b, s, k)``
        and their sum ``(b, s, 1)`` (``tests/reference_layers.py`` ``MoeLayer``). The output is the
        routing weights.
        """
        params = [_param(f"{path}.weight", (experts, x.shape[-1]), "weight", None)]
        if bias:
            params.append(_param(f"{path}.bias", (experts,), "bias", None))
        lead = x.shape[:-1]
        saved: tuple[Tensor, ...] = (x, self._act(f"{path}.scores", (*lead, experts), "router", dt=FP32),
                                     self._act(f"{path}.indices", (*lead, top_k), "router", dt=INT64))
        if renormalize:
            saved += (self._act(f"{path}.top_weights", (*lead, top_k), "router", dt=FP32),
                      self._act(f"{path}.top_sum", (*lead, 1), "router", dt=FP32))
        out = self._act(f"{path}.out", (*lead, top_k), "router")
        rows = replace(matmul_rows(path, x), seq_axis=1)  # sequence parallelism routes each rank's s/t tokens (Megatron-Core)
        flops = linear_flops(path, rows, params[0], params[1] if bias else None) + \
            pointwise_flops(path, "softmax", saved[1])
        return self._add(Op(path, "router", tuple(params), saved, out, flops=flops))

    def experts(self, path: str, x: Tensor, experts: Size, top_k: Size, width: Size, *, kind: str,
                bias: bool, note: str = "", clamp: bool = False) -> Tensor:
        """E routed expert MLPs, weights ``(E, out, in)`` as transformers stores them; each token
        goes through k of them (``kind``: ``swiglu``/``geglu`` gated, else ``gelu``/``relu``).

        Parameters: ``gate_up`` (E, 2 f_e, h) (gated) or ``up`` (E, f_e, h), ``down`` (E, h, f_e),
        biases (E, 2 f_e) and (E, h). Saved, for the b s k token-expert pairs (each expert a loop
        of linears over the tokens routed to it, as transformers' eager experts): the int64 token
        and top-k slot indices that gather each pair's input and routing weight, the gathered inputs
        (b, s, k, h), the MLP's own tensors at width f_e, the expert outputs (b, s, k, h) and the
        routing weights (b, s, k, 1) that scale them, and the scaled outputs (b, s, k, h) that
        ``index_add`` scatters back to their tokens (its backward keeps the source tensor)
        (``tests/reference_layers.py`` ``MoeLayer``). Under ``--implementation megatron`` the router and this op save
        what Megatron-Core's saves (``symbolic.mcore_experts``); under ``hf``, transformers' kernels'.
        """
        lead, h = (*x.shape[:-1], top_k), x.shape[-1]
        gated = kind in ("swiglu", "geglu")
        params = [_param(f"{path}.{'gate_up' if gated else 'up'}", (experts, (2 if gated else 1) * width, h),
                         "weight", 1),
                  _param(f"{path}.down", (experts, h, width), "weight", 2)]
        if bias:
            params += [_param(f"{path}.{'gate_up' if gated else 'up'}_bias", (experts, (2 if gated else 1) * width),
                              "bias", 1),
                       _param(f"{path}.down_bias", (experts, h), "bias", None)]
        buffer = "expert-buffer"  # what each expert computes on its tokens (padded under a capacity factor)
        hidden = [self._act(f"{path}.{name}", (*lead, width), buffer, tp_axis=len(lead)) for name in
                  (("gate", "act", "up") if gated else ("act_in",))]
        saved = (self._act(f"{path}.tokens", lead, "token-ids", dt=INT64),
                 self._act(f"{path}.slots", lead, "token-ids", dt=INT64),
                 self._act(f"{path}.gathered", (*lead, h), buffer), *hidden,
                 self._act(f"{path}.hidden", (*lead, width), buffer, tp_axis=len(lead)),
                 self._act(f"{path}.expert_out", (*lead, h), buffer),
                 self._act(f"{path}.weights", (*lead, 1), "router"),
                 self._act(f"{path}.weighted", (*lead, h)))
        out = self._act(f"{path}.out", x.shape, tp_axis=None)
        rows = self._act(f"{path}.rows", lead, buffer, seq_axis=None)  # every token reaches the experts (SP gathers)
        flops = _expert_flops(path, rows, params, hidden[0], kind, saved[-1], clamp and gated)
        return self._add(Op(path, "experts", tuple(params), saved, out, note, flops=flops))

    def scale(self, path: str, x: Tensor, gate_width: Size = 1, *, kind: str = "sigmoid-gate") -> Tensor:
        """``sigmoid(g) * x`` with ``g`` of width ``gate_width`` (Qwen2-MoE's shared-expert gate):
        saves the sigmoid's output and ``x``."""
        gate = self._act(f"{path}.sigmoid", (*x.shape[:-1], gate_width))
        out = self._act(f"{path}.out", x.shape, tp_axis=x.tp_axis)
        return self._add(Op(path, kind, (), (gate, x), out, flops=pointwise_flops(path, "glu", out)))

    # --- multi-head latent attention ----------------------------------------------------------
    def kv_latent(self, path: str, kv: Tensor, rank: Size, rope_dim: Size) -> tuple[Tensor, Tensor]:
        """Split MLA's compressed projection (b, s, d_c + d_h^R) into the key/value latent
        (b, s, d_c) and the one rotary key shared by all heads; both are what the KV cache keeps
        per token (DeepSeek-V2 §2.1.2; transformers' DeepseekV3Attention caches them as one-head
        tensors (b, 1, s, d_c) and (b, 1, s, d_h^R)). A view: saves nothing."""
        bsz, seq = kv.shape[0], kv.shape[1]
        latent = self._act(f"{path}.latent", (bsz, seq, rank))
        cached = (Tensor(f"{path}.cache_latent", (bsz, 1, seq, rank), self.act, role="kv-latent", seq_axis=2),
                  Tensor(f"{path}.cache_rope_key", (bsz, 1, seq, rope_dim), self.act, role="k-rope", seq_axis=2))
        self._add(Op(path, "kv-latent", (), (), latent, "cached: the latent and the rotary key", cached=cached))
        return latent, cached[1]

    def mla_keys(self, path: str, k_nope: Tensor, rope_key: Tensor) -> Tensor:
        """Keys of every head: the per-head part (b, a, s, d_h) and the shared rotary key broadcast,
        concatenated to (b, a, s, d_h + d_h^R) (a copy: saves nothing)."""
        bsz, heads, seq, d_nope = k_nope.shape
        out = Tensor(f"{path}.out", (bsz, heads, seq, d_nope + rope_key.shape[-1]), self.act, role="k", tp_axis=1,
                     seq_axis=2)
        return self._add(Op(path, "concat", (), (), out))

    def mla_absorbed(self, path: str, q: Tensor, latent: Tensor, rope_key: Tensor, d_nope: Size, d_value: Size,
                     *, dropout: bool) -> Tensor:
        """MLA's decode form as serving engines run it, its key and value up-projection absorbed (vLLM's
        ``_forward_decode``, vllm/v1/attention/backends/mla/common.py): ``kv_b`` (``a (d_h + d_v)`` by ``d_c``,
        one parameter) is read as ``W_UK`` (per head ``d_h -> d_c``) and ``W_UV`` (per head ``d_c -> d_v``); the
        query's no-rope part goes through ``W_UK`` into the latent space (``ql_nope``, 2 b s a d_h d_c FLOPs),
        attention is multi-query over the cached rows themselves (keys: latent and rotary key, ``d_c + d_h^R``
        wide; values: the latent, ``d_c``), and each head's ``d_c``-wide output goes through ``W_UV``
        (2 b s a d_c d_v, op ``{path}_uv``) before the output projection. No cached position is expanded. ``q`` is
        ``(b, a, s, d_h + d_h^R)`` with the rotary part applied; ``latent`` ``(b, s, d_c)`` normed; ``rope_key``
        ``(b, 1, s, d_h^R)``. Forward FLOPs only: a decode-step graph (``derivations.quantities.compute``),
        never trained. Returns the context ``(b, s, a d_v)``."""
        bsz, heads, seq, _ = q.shape
        rank = latent.shape[-1]
        weight = _param(f"{path}.weight", (heads * (d_nope + d_value), rank), "weight", 0)
        w_uk = Tensor(f"{path}.W_UK", (heads, rank, d_nope), PARAM_DTYPE, role="weight", tp_axis=0)
        w_uv = Tensor(f"{path}.W_UV", (heads, d_value, rank), PARAM_DTYPE, role="weight", tp_axis=0)
        rows = Tensor(f"{path}.rows", (bsz, seq), self.act, role="rows")
        q_latent = self._act(f"{path}.q_latent", (bsz, heads, seq, rank + rope_key.shape[-1]), "q", tp_axis=1,
                             seq_axis=2)
        self._add(Op(path, "mla-absorb-q", (weight,), (), q_latent, "q_nope @ W_UK: the query in the latent space",
                     flops=(Flop(f"{path} q@W_UK", (rows, w_uk)),), inputs=(q.name,)))
        keys = Tensor(f"{path}.latent_keys", (bsz, 1, seq, rank + rope_key.shape[-1]), self.act, role="k",
                      seq_axis=2)
        values = Tensor(f"{path}.latent_values", (bsz, 1, seq, rank), self.act, role="v", seq_axis=2)
        self._add(Op(f"{path}_keys", "concat", (), (), keys, inputs=(latent.name, rope_key.name)))
        ctx = self.attention("attn/core", q_latent, keys, values, dropout=dropout)
        out = self._act(f"{path}.o", (bsz, seq, heads * d_value), "attention-output", tp_axis=2)
        return self._add(Op(f"{path}_uv", "mla-absorb-o", (), (), out, f"each head's latent output @ W_UV ({path}'s weight)",
                            flops=(Flop(f"{path} o@W_UV", (rows, w_uv)),), inputs=(ctx.name,)))

    def attention_sinks(self, path: str, heads: Size) -> None:
        """gpt-oss attention sinks: one learned logit per head joins each softmax (weight (a,))."""
        weight = _param(f"{path}.weight", (heads,), "weight", 0)
        out = self._act(f"{path}.out", (heads,), seq_axis=None, tp_axis=0)
        self._add(Op(path, "attention-sinks", (weight,), (), out))


def _expert_flops(path: str, rows: Tensor, params: list[Tensor], hidden: Tensor, kind: str,
                  weighted: Tensor, clamp: bool = False) -> tuple[Flop, ...]:
    """Each of the b s k token-expert ``rows`` goes through one expert's matrices: the FLOPs of one
    expert's weights per row (an ``(out, in)`` operand per matrix, split by tensor parallelism as the
    experts' are; expert parallelism moves rows between ranks, not work), its activation, and the
    routing weight's scaling of each output."""
    terms: list[Flop] = []
    for weight in params:
        one = Tensor(f"{weight.name}.one_expert", weight.shape[1:], weight.dtype, role=weight.role,
                     tp_axis=None if weight.tp_axis is None else weight.tp_axis - 1)
        if weight.role == "weight":
            name = f"{path} x@{weight.name.rsplit('.', 1)[-1]}"
            terms += [Flop(name, (rows, one)), Flop(name, (rows, one), phase="input-grad"),
                      Flop(name, (rows, one), phase="weight-grad", param=weight.name)]
        else:
            terms += [Flop(f"{path} +bias", (rows, one), 1, "elementwise"),
                      Flop(f"{path} +bias", (rows, one), 1, "elementwise", "weight-grad", weight.name)]
    if clamp:  # before the activation: the gate and up projections clamped (gpt-oss)
        terms += pointwise_flops(path, "clamp", hidden)
    if kind in ("swiglu", "geglu"):
        terms += [*pointwise_flops(path, "silu" if kind == "swiglu" else "gelu", hidden), *pointwise_flops(path, "glu", hidden)]
    else:
        terms += pointwise_flops(path, kind, hidden)
    return (*terms, *pointwise_flops(path, "glu", weighted))


def _attention_flops(path: str, scores_shape: tuple[Size, ...], d_qk: Size, d_v: Size,
                     dropout: bool) -> tuple[Flop, ...]:
    """``q k^T`` (2 b a s_q s_k d_qk) and ``P v`` (2 b a s_q s_k d_v), read off the scores tensor so
    a decode step's one query over s_k cached keys follows; softmax (and dropout) elementwise."""
    scores = Tensor(f"{path}.scores", scores_shape, FP32, role="scores", tp_axis=1)
    terms = [Flop(f"{path} {name}", (scores,), coef * width, phase=phase)
             for name, width in (("q@k^T", d_qk), ("P@v", d_v)) for coef, phase in ((2, "forward"), (4, "input-grad"))]
    terms += pointwise_flops(path, "softmax", scores) + (pointwise_flops(path, "dropout", scores) if dropout else ())
    return tuple(terms)

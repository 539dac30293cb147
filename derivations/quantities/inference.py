"""Inference memory per GPU: KV cache, weights in the serving dtype, the largest transient buffer.

Everything is read off the model's graph (``derivations.models.architectures``) after the loss op is
dropped and tensor parallelism is applied:

* **KV cache.** The cached keys and values are the ``k`` and ``v`` tensors (roles ``k``/``v``,
  after rotary and q/k norms) that each attention op of the ``layer`` block saves, with the
  sequence axis replaced by the cached length ``s + n`` (prompt plus generated tokens), capped
  at the sliding window, ``min(s + n, w)``, in the layers that have one; in the KV dtype; summed
  over the groups of layers (``layer_groups``): all ``l``, or ``l - l_w`` full-attention and
  ``l_w`` sliding-window layers. Closed form ``2 b (s+n) l a_kv d_h beta_kv`` (kipply 2022);
  MHA, MQA (Shazeer 2019) and GQA (Ainslie et al. 2023) differ only in ``a_kv``; ``d_h`` need
  not be ``h/a``.
* **Weights.** Every parameter tensor one GPU holds, in the serving dtype (see ``serving_dtypes``).
* **Transient activations.** The largest single buffer a forward pass materialises: every op
  output, plus the ``b a s s`` attention scores under ``--attention eager`` only (the default,
  ``sdpa``, and ``flash`` hold none), for a prefill of ``s`` tokens and for one decode step (one
  query over the cached length). Logits are computed for the last position only, in the compute
  dtype ``b V`` and again as ``generate``'s fp32 copy ``4 b V`` (transformers 5.x,
  ``generation/utils.py``: ``logits_to_keep = 1``; ``outputs.logits[:, -1].to(dtype=torch.float32)``).
* **Phases.** A prefill holds the weights, the keys and values of the ``s`` prompt tokens in every
  layer (a sliding-window layer too: transformers' ``DynamicSlidingWindowLayer.update`` keeps
  ``full_key_states[:, :, -w + 1:, :]``, a view whose storage is all ``s`` tokens, until the first
  decode step) and the prefill's largest buffer; decoding holds the cache at its end, ``s + n``
  (``min(s + n, w)`` under a window), and a decode step's largest buffer. ``total_bytes`` is the
  larger phase, ``weights + max(prefill, decode)`` (+ ``--overhead``); ``peak_phase`` says which.
* **Paged cache** (``--kv-block B``): each sequence holds whole blocks of B tokens, as vLLM's
  block manager allocates them: ``ceil(length / B) B`` tokens per group of layers.

>>> from memderive.derivations.models.presets import preset
>>> from memderive.derivations.options import Options
>>> m = preset("llama-2-7b")
>>> _, qs = infer_quantities(m, Options(mode="infer", batch=1, seq=1), m.graph(dropout=False), keep_symbols=True)
>>> {q.key: q for q in qs}["kv_cache_bytes"].closed_form()
4*b*h*l*n + 4*b*h*l*s
>>> [peak_phase(estimate_infer(m, Options(mode="infer", batch=1, seq=4096, new_tokens=n))) for n in (16, 1024)]
['prefill', 'decode']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from memderive.derivations.models.model import Model
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.stored import (STORED_CITATION, checkpoint_graph, checkpoint_scheme,
                                                     dequantized_weight, stored_weight_bytes)
from memderive.derivations.quantity import Quantity
from memderive.symbolic import dims
from memderive.symbolic.derive import Breakdown, Term, parameters
from memderive.symbolic.dims import a_kv, b, g, l, l_w, n, s, t, w
from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.errors import InvalidLayoutError
from memderive.symbolic.expr import Expr, Max, Min, ceiling, const, prod, shifted_nonnegative
from memderive.symbolic.formula import Citation, Formula
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.strategies import SCORE_ROLE, FlashAttention, Strategy, TensorParallel
from memderive.symbolic.tensor import Tensor
from memderive.symbolic.simplify import closed_form
from memderive.derivations.quantities.finetune import quantized_bytes
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

__all__ = ["infer_quantities", "check_inference", "peak_phase", "estimate_infer", "phase_buffers", "prefill_groups", "paged", "PHASES",
           "GENERATE_CITATION", "inference_graph", "inference_values", "cached_length", "LayerGroup", "layer_groups",
           "kv_cache", "weight_bytes", "transient_bytes", "ReplicatedKVHeads", "serving_dtypes", "rule_of_thumb_tokens",
           "FORMULAS", "WEIGHT_DTYPES", "KV_DTYPES", "KV_CITATION", "QUANT_CITATION", "RULE_CITATION",
           "linear_weight_bytes"]

WEIGHT_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "nf4", "mxfp4")
KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8")
#: Group-wise formats: one fp16 scale per group of g consecutive input weights of a row.
GROUPWISE = frozenset({"int8", "int4"})
#: Microscaling formats: values per block sharing one 8-bit (E8M0) scale. MXFP4 stores the routed experts only
#: (gpt-oss's checkpoint: the experts' ``*_blocks`` and ``*_scales``; attention, router, embeddings in bf16).
MICROSCALED = {"mxfp4": 32}
MX_CITATION = Citation("ocp-2023-mx", "MXFP4: 32 FP4 (E2M1) elements share one E8M0 scale", also=(
    Citation("transformers-mxfp4", "gate_up_proj/down_proj _blocks (two FP4 values a byte) and _scales"),
    Citation("openai-2025-gpt-oss", "MoE weights quantized to MXFP4, 4.25 bits per parameter")))
SCALE = dtype("fp16")
#: Tensors that stay in 16 bit when the linear layers are quantized.
HIGH = dtype("bf16")

KV_CITATION = Citation("kipply-2022", "KV bytes per token 2*2*n_layers*n_heads*d_head",
                       also=(Citation("shazeer-2019", "one K/V head"), Citation("ainslie-2023", "G K/V heads")))
QUANT_CITATION = Citation("frantar-2022", "group-wise weight quantization, one scale per group of g weights",
                          also=(Citation("lin-2023", "group-wise weight quantization"),))
RULE_CITATION = Citation("accelerate-estimator-docs", "inference: add up to 20% to the weights (as found by EleutherAI)")
GENERATE_CITATION = Citation("transformers-generate", "generate sets logits_to_keep=1 (last-position logits, copied to "
                             "fp32)", also=(Citation("transformers-cache-utils", "DynamicSlidingWindowLayer keeps a "
                                                     "view of the prefill's keys and values"),))
#: The phases of generation whose memory the total is the larger of.
PHASES = ("prefill", "decode")
ZHIHU = Citation("zhihu-624740065", "KV cache peak 4blh(s+n)")

_h, _l, _a, _d_h = dims.h, dims.l, dims.a, dims.d_h
#: Published closed forms the graph derivation reproduces (tests/test_kv_cache.py checks each).
FORMULAS = (
    Formula("kv bytes per token, 16-bit MHA", 2 * 2 * _l * _a * _d_h, KV_CITATION,
            ("a_kv = a", "16-bit keys and values")),
    Formula("kv bytes per token, GQA/MQA", 2 * 2 * _l * a_kv * _d_h, KV_CITATION, ("16-bit keys and values",)),
    Formula("kv cache peak, 16-bit MHA", 4 * b * _l * _h * (s + n), ZHIHU, ("a_kv = a", "d_h = h/a")),
    Formula("inference memory, rule of thumb", Fraction(6, 5) * 2 * dims.Psi, RULE_CITATION,
            ("16-bit weights", "KV cache + transient = weights / 5: see rule_of_thumb_tokens")),
)


def serving_dtypes(options: Options) -> tuple[DType, DType, DType]:
    """``(linear-layer weights, everything else, KV cache)`` dtypes of an inference run.

    NOTE(inference): defaults are bf16 weights; fp8/int8/int4 apply to the weight matrices of the
    linear layers inside the transformer layers only; embeddings, the LM head, norms and biases
    stay bf16 (as GPTQ/AWQ checkpoints ship them). The KV cache defaults to the compute dtype,
    which is the weight dtype for fp32/fp16/bf16 and bf16 for quantized weights (transformers
    caches k and v in the model dtype).

    >>> [str(x) for x in serving_dtypes(Options(mode="infer", batch=1, seq=1, weight_dtype="int4"))]
    ['int4', 'bf16', 'bf16']
    """
    name = dtype(options.weight_dtype or "bf16").name
    if name not in WEIGHT_DTYPES:
        raise OptionsError(f"--weight-dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {options.weight_dtype!r}")
    other = dtype(name) if name in ("fp32", "fp16", "bf16") else HIGH
    kv = dtype(options.kv_dtype) if options.kv_dtype is not None else other
    if kv.name not in KV_DTYPES:
        raise OptionsError(f"--kv-dtype must be one of {', '.join(KV_DTYPES)}, got {options.kv_dtype!r}")
    return dtype(name), other, kv


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """Layers that cache the same number of tokens: ``share`` of the layer block (``1``, or
    ``(l - l_w)/l`` and ``l_w/l``), each holding ``length`` tokens per sequence; ``name`` is the
    group's path component in the breakdown (empty when the group is every layer)."""

    name: str
    share: Expr
    length: Expr


def layer_groups(model: Model) -> tuple[LayerGroup, ...]:
    """The layers by cached length: every layer holds ``s + n`` tokens, or ``min(s + n, w)`` under a
    sliding window; when only ``l_w`` of the ``l`` layers slide, ``l - l_w`` full-attention layers
    hold ``s + n`` and ``l_w`` sliding-window layers ``min(s + n, w)``.

    NOTE(inference): transformers' ``DynamicSlidingWindowLayer`` keeps a view of the last w - 1
    tokens whose storage is the w-token concatenation of the last step, so from the first decode
    step on it holds ``min(s + n, w)`` tokens; right after a prefill longer than the window it
    still holds the whole prompt: that is the prefill phase's cache (``prefill_groups``).

    >>> from memderive.derivations.models.presets import preset
    >>> [(g.name, g.share, g.length) for g in layer_groups(preset("gemma-2-9b"))]
    [('full', 1 - l_w/l, n + s), ('sliding', l_w/l, Min(w, n + s))]
    """
    if model.window is None:
        return (LayerGroup("", const(1), s + n),)
    if model.window_layers is None:
        return (LayerGroup("", const(1), Min(s + n, w)),)
    return LayerGroup("full", (l - l_w) / l, s + n), LayerGroup("sliding", l_w / l, Min(s + n, w))


def prefill_groups(model: Model) -> tuple[LayerGroup, ...]:
    """The layer groups right after a prefill: every layer holds the ``s`` prompt tokens (a
    sliding-window layer's view still pins the whole prompt's storage, see ``layer_groups``)."""
    return tuple(replace(group, length=const(s)) for group in layer_groups(model))


def paged(groups: Sequence[LayerGroup], block: int | None) -> tuple[LayerGroup, ...]:
    """Groups holding whole blocks of ``block`` tokens per sequence (vLLM's paged cache)."""
    if block is None:
        return tuple(groups)
    return tuple(replace(x, length=ceiling(x.length / block) * block) for x in groups)


def cached_length(model: Model) -> Expr:
    """Tokens held per sequence by the layers that hold the most: ``s + n``, or ``min(s + n, w)``
    when every layer slides (see ``layer_groups``); a decode step's attention scores span them."""
    return layer_groups(model)[0].length


def inference_values(model: Model, options: Options) -> dict[Expr, int]:
    """Values of the inference-only sizes: ``n`` (new tokens), ``g`` (group), ``w`` (window),
    ``l_w`` (sliding-window layers, when only some layers slide)."""
    values = {n: options.new_tokens, g: options.quant_group}
    if model.window is not None:
        values[w] = model.window
    if model.window_layers is not None:
        values[l_w] = model.window_layers
    return values


@dataclass(frozen=True, slots=True)
class ReplicatedKVHeads(Strategy):
    """With fewer KV heads than tensor-parallel ranks (a_kv < t), each rank keeps one KV head:
    ``a_kv/t`` heads per rank become ``max(a_kv/t, 1)`` (llm-analysis' rule, ``llm-analysis`` analysis.py), in
    the cache and in the K/V projection weights (replicated t/a_kv times). Needs a_kv | t."""

    t: int | Expr
    name: str = "KV heads replicated over tensor-parallel ranks"

    def __call__(self, graph: Graph) -> Graph:
        per_rank = {a_kv: self.t * Max(a_kv / self.t, 1)}

        def rep(x: Tensor) -> Tensor:
            return replace(x, shape=tuple(const(axis).subs(per_rank) for axis in x.shape))

        return graph.map_blocks(lambda blk: blk.map_tensors(rep) if blk.name == "layer" else blk, self.name,
                                "a_kv < t: each GPU keeps max(a_kv/t, 1) key/value heads")


def check_inference(model: Model, options: Options) -> None:
    """Options inference does not model (training-only flags) and K/V heads t cannot spread; each one error."""
    training_only = [("--pp", options.pp > 1), ("--sp", options.sp), ("--zero", options.zero > 0),
                     ("--recompute", options.recompute != "none"), ("--offload", options.offload)]
    for flag, used in training_only:
        if used:
            raise OptionsError(f"{flag} is a training option; inference is modelled with --tp only")
    if options.weight_dtype in MICROSCALED and model.arch.moe is None:
        raise OptionsError(f"--weight-dtype {options.weight_dtype} applies to routed experts (the format gpt-oss's "
                           f"checkpoint stores them in); {model.name} has none: use int4, nf4 or fp8")
    if options.mla_decode is not None and model.arch.attention != "mla":
        raise OptionsError(f"--mla-decode is the decode form of multi-head latent attention; {model.name} has none "
                           "(DeepSeek-V2/V3 have it)")
    kv_heads, tp = model.sizes["a_kv"], options.tp
    if (tp % kv_heads) if tp > kv_heads else (kv_heads % tp):
        raise InvalidLayoutError(f"{model.name}: {kv_heads} key/value heads cannot be spread over tensor-parallel "
                                 f"degree {options.tp}; a_kv must divide t or t divide a_kv")


def inference_graph(model: Model, options: Options, base: Graph | None = None) -> Graph:
    """The graph one GPU runs: no loss op, compute dtype, FlashAttention and TP as asked."""
    _, other, _ = serving_dtypes(options)
    if base is None or base.block("layer").input.dtype != other or any(op.kind == "dropout" for _, op in base.ops()):
        base = model.graph(activation_dtype=other.name, dropout=False)

    def no_loss(blk: Block) -> Block:
        return replace(blk, ops=tuple(op for op in blk.ops if op.kind != "cross_entropy"))

    graph = base.map_blocks(no_loss, "inference forward (no loss)")
    if options.attention_kernel != "eager":
        graph = FlashAttention(options.attention_kernel)(graph)
    if options.tp > 1:
        graph = TensorParallel(t)(graph)
        if options.tp > model.sizes["a_kv"]:
            graph = ReplicatedKVHeads(t)(graph)
    return graph


def _kv_tensors(blk: Block) -> list[tuple[Op, Tensor]]:
    """What the cache keeps per layer: the tensors ops declare ``cached`` (MLA's latent and rotary key),
    else the k and v each attention op saves."""
    declared = [(op, x) for op in blk.ops for x in op.cached]
    return declared or [(op, x) for op in blk.ops if op.kind in ("attention", "flash-attention")
                        for x in op.saved if x.role in ("k", "v")]


def kv_cache(graph: Graph, groups: Sequence[LayerGroup] | Expr | int, kv: DType) -> Breakdown:
    """Bytes of the cached keys and values: each attention op's k, v in each group of layers,
    with the group's length (``groups`` may be one length for every layer).

    Paths: ``kv_cache/keys/attn``, or per group ``kv_cache/full/keys/attn``, ``kv_cache/sliding/...``.
    """
    if isinstance(groups, Expr | int):
        groups = (LayerGroup("", const(1), const(groups)),)
    terms = []
    blk = graph.block("layer")
    for group in groups:
        prefix = f"kv_cache/{group.name}/" if group.name else "kv_cache/"
        for op, x in _kv_tensors(blk):
            shape = list(x.shape)
            shape[x.seq_axis] = group.length
            cached = replace(x, shape=tuple(shape), dtype=kv)
            kind = {"k": "keys", "v": "values"}.get(x.role, x.role)
            terms.append(Term(f"{prefix}{kind}/{op.path}", blk.repeat * group.share * cached.nbytes))
    return Breakdown(tuple(terms), "bytes")


def _by_group(graph: Graph, groups: Sequence[LayerGroup], kv: DType) -> Callable[[Any], Any] | None:
    """With layer groups of different lengths, the KV closed form as the bytes of one token in one
    layer times the layer-tokens, ``4 b a_kv d_h ((l - l_w)(s + n) + l_w min(s + n, w))`` (a SymPy
    rewrite, run only when the closed form is printed)."""
    if len(groups) < 2:
        return None
    repeat = graph.block("layer").repeat
    one_token = kv_cache(graph, const(1), kv).total / repeat

    def form(expr: Any) -> Any:

        per_layer_token = sp.factor(closed_form(one_token, graph.relations))
        layer_tokens = sp.Add(*(sp.factor(sp.sympify(repeat * group.share)) * sp.sympify(group.length)
                                for group in groups))
        grouped = sp.Mul(per_layer_token, layer_tokens, evaluate=False)
        return grouped if sp.expand(grouped - expr) == 0 else expr

    return form


def _param_bytes(blk: Block, op: Op, x: Tensor, dtypes: tuple[DType, DType, DType], group: Expr | int) -> list[Term]:
    linear, other, _ = dtypes
    path, repeat = f"{blk.name}/{op.path}", blk.repeat * op.share
    if not (blk.name == "layer" and op.kind in ("linear", "experts") and x.role == "weight"):
        return [Term(f"weights/{path}", repeat * x.numel * other.nbytes)]
    if linear.name in MICROSCALED:
        return _microscaled(path, repeat, op, x, linear, other)
    if linear.name == "nf4":  # bitsandbytes' 4-bit base as QLoRA loads it: codes and double-quantized absmax
        codes, constants = quantized_bytes("nf4", x.numel, x.shape[0])
        return [Term(f"weights/{path}", repeat * codes[1]), Term(f"weights/scales/{path}", repeat * constants[1])]
    terms = [Term(f"weights/{path}", repeat * x.numel * linear.nbytes)]
    if linear.name in GROUPWISE:
        *rows, cols = x.shape  # experts: (E, out, in), E * out rows
        terms.append(Term(f"weights/scales/{path}", repeat * prod(rows) * ceiling(cols / group) * SCALE.nbytes))
    return terms


def _microscaled(path: str, repeat: Expr, op: Op, x: Tensor, linear: DType, other: DType) -> list[Term]:
    """A routed expert's weight matrix in a microscaling format: its values, and one byte of scale per block
    along the input features; other linears stay in ``other`` (as gpt-oss's checkpoint stores them)."""
    if op.kind != "experts":
        return [Term(f"weights/{path}", repeat * x.numel * other.nbytes)]
    *rows, cols = x.shape  # (E, out, in)
    return [Term(f"weights/{path}", repeat * x.numel * linear.nbytes),
            Term(f"weights/scales/{path}", repeat * prod(rows) * ceiling(cols / MICROSCALED[linear.name]))]


def linear_weight_bytes(graph: Graph, dtypes: tuple[DType, DType, DType], group: Expr | int = g) -> tuple[Expr, Expr]:
    """``(bytes, count)`` of the weight matrices of the layers' linears (and experts), the ones a
    quantized dtype stores, with their scales or constants: 8 bytes / count is their bits per weight.

    >>> from memderive.derivations.models.presets import preset
    >>> graph = preset("llama-2-7b").graph(dropout=False)
    >>> size, count = linear_weight_bytes(graph, serving_dtypes(Options(mode="infer", batch=1, seq=1, weight_dtype="nf4")))
    >>> values = {dims.h: 4096, dims.a: 32, dims.a_kv: 32, dims.d_h: 128, dims.f: 11008, dims.l: 32}
    >>> float(8 * size.evaluate(values) / count.evaluate(values))  # 4 + 8/64 + 32/(64 x 256)
    4.126953125
    """
    size, count = const(0), const(0)
    for blk, op in graph.ops():
        for x in op.params:
            if blk.name == "layer" and op.kind in ("linear", "experts") and x.role == "weight":
                size = size + sum((term.expr for term in _param_bytes(blk, op, x, dtypes, group)), const(0))
                count = count + blk.repeat * op.share * x.numel
    return size, count


def weight_bytes(graph: Graph, dtypes: tuple[DType, DType, DType], group: Expr | int = g) -> Breakdown:
    """Bytes of the parameters one GPU holds, with group-wise quantization scales.

    NOTE(inference): symmetric group-wise quantization: one fp16 scale per group of g consecutive
    input weights of each row, ``out * ceil(in/g)`` scales per matrix, no zero points (an
    asymmetric scheme such as AWQ adds one zero point per group). fp8 uses a per-tensor scale,
    neglected (4 bytes per matrix).
    """
    terms = [term for blk, op in graph.ops() for x in op.params for term in _param_bytes(blk, op, x, dtypes, group)]
    return Breakdown(tuple(terms), "bytes")


def _buffers(graph: Graph) -> list[Tensor]:
    """Tensors a forward pass materialises: op outputs and (eager only) attention scores."""
    outputs = [op.output for _, op in graph.ops()]
    return outputs + [x for _, op in graph.ops() for x in op.saved if x.role == SCORE_ROLE]


def _logits(graph: Graph) -> Tensor | None:
    return next((op.output for _, op in graph.ops() if op.path == "lm_head"), None)


def _decode(x: Tensor, length: Expr) -> Tensor:
    """The same buffer in a decode step: one query token; scores span the cached keys."""
    shape = [const(axis).subs({s: 1}) for axis in x.shape]
    if x.role == SCORE_ROLE:
        shape[-1] = length
    return replace(x, shape=tuple(shape))


def phase_buffers(graph: Graph, phase: str, length: Expr) -> list[Tensor]:
    """The buffers of a prefill (``s`` tokens) or a decode step (one token over ``length`` cached
    ones). The logits are the last position's (``logits_to_keep = 1``), once in the compute dtype
    and once as ``generate``'s fp32 copy."""
    logits = _logits(graph)
    buffers = [x for x in _buffers(graph) if x is not logits]
    if logits is not None:
        last = _decode(logits, length)
        buffers += [last, replace(last, name=f"{last.name}.fp32", dtype=dtype("fp32"))]
    return [_decode(x, length) for x in buffers] if phase == "decode" else buffers


def transient_bytes(graph: Graph, length: Expr, phase: str | None = None, prefill_extra: Sequence[Expr] = ()
                    ) -> Breakdown:
    """The largest transient buffer of a prefill, of a decode step, or (``phase=None``) of either.

    NOTE(inference): one buffer, not the sum of what is live at once (transformers' MLP holds
    gate, up and their product at once); buffers are counted in the compute dtype but for the
    fp32 copy of the last-position logits (transformers' eager softmax runs in fp32: not modelled).
    """
    phases = PHASES if phase is None else (phase,)
    sizes = {x.nbytes for p in phases for x in phase_buffers(graph, p, length)}
    if "prefill" in phases:
        sizes |= set(prefill_extra)
    # In the graph's letters (d_h = h/a, ... hold for the model's sizes), so that closed_form's
    # rewrite leaves the Max alone instead of re-evaluating it.
    rel = dict(graph.relations)
    return Breakdown((Term("transient/largest-buffer", _max({const(x).subs(rel) for x in sizes})),), "bytes")


def _surely_at_most(x: Expr, y: Expr) -> bool:
    """``x <= y`` for all sizes >= 1: with every size written ``1 + size``, ``y - x`` expands to terms
    with nonnegative coefficients only (every other factor is a size, a ``min`` or a ``ceiling``)."""
    return shifted_nonnegative(y - x)


def _max(sizes: set[Expr]) -> Expr:
    """``Max`` of the candidates no other candidate surely reaches (SymPy's own pairwise
    comparison of symbolic arguments is slow, so the survivors are left unevaluated: ``evaluate=False``)."""
    ordered = sorted(sizes, key=lambda x: x.sort_key())
    symbols = set().union(*(x.free_symbols for x in ordered))
    # x <= y everywhere needs x <= y at these points: a cheap filter before the symbolic test.
    probes = [[x.evaluate({z: point for z in symbols}) for point in (1, 7, 64)] for x in ordered]

    def dominated(i: int) -> bool:
        return any(j != i and all(p <= q for p, q in zip(probes[i], probes[j]))
                   and _surely_at_most(ordered[i], ordered[j]) for j in range(len(ordered)))

    kept = [x for i, x in enumerate(ordered) if not dominated(i)]
    return kept[0] if len(kept) == 1 else Max(*kept, evaluate=False)


def infer_quantities(model: Model, options: Options, base_graph: Graph | None = None, *,
                     keep_symbols: bool = False) -> tuple[Graph, list[Quantity]]:
    """Inference quantities per GPU: ``weight_bytes``, ``kv_cache_bytes``,
    ``kv_cache_bytes_per_token``, ``activation_bytes`` (transient) and ``total_bytes``.

    Args:
        model: the model.
        options: ``mode="infer"`` options (batch, seq, new_tokens, dtypes, tp, flash, quant_group).
        base_graph: the training-free graph ``derivations.estimate`` built, if any.
        keep_symbols: keep ``n``, ``g``, ``w`` as letters (bind them with ``inference_values``);
            when False they are replaced by their values, because ``Estimate.values`` binds only
            the model sizes and ``t, p, d, b, s``.

    Raises:
        OptionsError: training-only options, or a dtype memderive does not serve in.
        InvalidLayoutError: a_kv and t where neither divides the other.
    """
    check_inference(model, options)
    dtypes = serving_dtypes(options)
    graph = inference_graph(model, options, base_graph)
    bound = {} if keep_symbols else inference_values(model, options)

    def bind(groups: Sequence[LayerGroup]) -> tuple[LayerGroup, ...]:
        return tuple(replace(x, share=x.share.subs(bound), length=x.length.subs(bound))
                     for x in paged(groups, options.kv_block))

    groups, first = bind(layer_groups(model)), bind(prefill_groups(model))
    length = cached_length(model).subs(bound)
    scheme = checkpoint_scheme(model, options.weight_dtype)
    if scheme is None:
        weights = weight_bytes(graph, dtypes, g.subs(bound))
    else:  # the checkpoint's modules as stored: q, k, v apart where it keeps them apart
        weights = stored_weight_bytes(inference_graph(model, options, checkpoint_graph(model)), model, scheme)
    kv = kv_cache(graph, groups, dtypes[2])
    fixed = weights.terms + ((Term("overhead", const(options.overhead_bytes)),) if options.overhead_bytes else ())
    dequantized = dequantized_weight(graph, model, scheme, dtypes[1]) if scheme is not None else ()
    phases = {"prefill": kv_cache(graph, first, dtypes[2]) + transient_bytes(graph, length, "prefill", dequantized),
              "decode": kv + transient_bytes(graph, length, "decode")}
    peak = _max({const(p.total).subs(dict(graph.relations)) for p in phases.values()})
    total = Breakdown(fixed + (Term("kv_cache+transient/larger-phase", peak),), "bytes")
    # One cached token (of one sequence) in every layer: the KV cache's slope while s + n <= w.
    per_token = kv_cache(graph, const(1), dtypes[2]).scaled(1 / b)
    rel, notes = graph.relations, graph.assumptions + _assumptions(model, options, dtypes, scheme)
    phase_quantities = [Quantity(f"{name}_bytes", f"{name.capitalize()} memory per GPU", Breakdown(fixed, "bytes")
                                 + phases[name], rel, GENERATE_CITATION, notes) for name in PHASES]
    return graph, [
        Quantity("parameters_per_gpu", "Parameters held by one GPU", parameters(graph), rel),
        Quantity("weight_bytes", f"Weights per GPU ({scheme.label if scheme else dtypes[0]})", weights, rel,
                 STORED_CITATION if scheme else QUANT_CITATION if dtypes[0].name in GROUPWISE else MX_CITATION
                 if dtypes[0].name in MICROSCALED else None, notes),
        Quantity("kv_cache_bytes", f"KV cache per GPU ({dtypes[2]})", kv, rel, KV_CITATION, notes,
                 form=_by_group(graph, groups, dtypes[2])),
        Quantity("kv_cache_bytes_per_token", "KV cache per cached token per GPU", per_token, rel, KV_CITATION),
        Quantity("activation_bytes", "Largest transient buffer per GPU", transient_bytes(graph, length, None,
                                                                                          dequantized), rel, None,
                 notes),
        *phase_quantities,
        Quantity("total_bytes", "Inference memory per GPU (the larger phase)", total, rel, GENERATE_CITATION, notes),
    ]


def estimate_infer(model: Model, options: Options) -> dict[str, int]:
    """The phases' bytes and the total of an inference run, with every size bound (for doctests)."""
    _, qs = infer_quantities(model, options)
    values = {**model.values(), b: options.batch, s: options.seq, t: options.tp}
    return {q.key: q.value(values) for q in qs if q.key in ("prefill_bytes", "decode_bytes", "total_bytes")}


def peak_phase(numbers: dict[str, int]) -> str:
    """``prefill`` or ``decode``: the phase whose memory is the total (``decode`` on a tie)."""
    return "prefill" if numbers["prefill_bytes"] > numbers["decode_bytes"] else "decode"


_KERNELS = {"eager": "eager attention (the b a s s scores materialised)",
            "sdpa": "memory-efficient attention, sdpa (no s x s scores held; no padding, so no s x s mask)",
            "sdpa-window": "memory-efficient attention, sdpa (no s x s scores held; transformers still builds a "
                           "b x s x s boolean sliding-window mask once s >= w, not counted: --attention flash "
                           "avoids it)",
            "flash": "FlashAttention (no s x s scores held)"}


def _assumptions(model: Model, options: Options, dtypes: tuple[DType, DType, DType],
                 scheme: Any = None) -> tuple[str, ...]:
    linear, other, kv = dtypes
    if model.window_layers is not None:
        held = "s + n tokens in the l - l_w full-attention layers, min(s + n, w) in the l_w sliding-window layers"
    else:
        held = "min(s + n, w) tokens (sliding window)" if model.window else "s + n tokens"
    weights = (f"weights: the routed experts' weight matrices in MXFP4 (4-bit E2M1 values, one 8-bit E8M0 scale per "
               f"{MICROSCALED[linear.name]} along the input: 4.25 bits each), everything else in {other}, as gpt-oss's "
               "checkpoint stores them" if linear.name in MICROSCALED else
               f"weights: linear layers of the transformer layers in {linear}, everything else in {other}")
    if scheme is not None:
        weights = (f"weights as the checkpoint stores them (its quantization_config; --weight-dtype overrides): "
                   f"{scheme.label}; embeddings, norms, biases, the LM head, routers and the modules it leaves "
                   f"unquantized in {other}")
    elif model.quantization is not None:
        weights += f" (--weight-dtype overrides the checkpoint's quantization_config: {model.quantization.label})"
    notes = [weights,
             f"KV cache in {kv}, {held}",
             "peak: the larger of the prefill (KV cache of the s prompt tokens in every layer, sliding-window "
             "layers included) and the last decode step (the KV cache above)",
             "transient: the largest single buffer of the phase, logits of the last position only (as generate), "
             + _KERNELS["sdpa-window" if options.attention_kernel == "sdpa" and model.window else
                        options.attention_kernel]]
    if options.kv_block is not None:
        notes.append(f"paged KV cache: whole blocks of {options.kv_block} tokens per sequence (as vLLM allocates)")
    if linear.name in GROUPWISE:
        notes.append(f"group-wise {linear}: one fp16 scale per {options.quant_group} weights, symmetric (no zero points)")
    if linear.name == "nf4":
        notes.append("NF4 linears (bitsandbytes, double quantization, as QLoRA loads them): 4-bit codes, an 8-bit "
                     "absmax per 64 weights and one fp32 per 256 blocks (4.127 bits per weight)")
    return tuple(notes)


def rule_of_thumb_tokens(model: Model, options: Options | None = None) -> Fraction | int:
    """Cached tokens ``b*(s+n)`` at which the "inference needs about 1.2x the weights" rule holds.

    The rule (accelerate's docs, after EleutherAI) is the special case KV cache = 0.2 x weights
    with the transient buffer neglected: ``b (s+n) 2 l a_kv d_h beta_kv = W / 5``, so
    ``b (s+n) = W / (10 l a_kv d_h beta_kv)``. Below that many cached tokens inference needs less
    than 1.2x the weights, above it more. No sliding window is assumed (one GPU, t = 1).

    >>> from memderive.derivations.models.presets import preset
    >>> rule_of_thumb_tokens(preset("llama-2-7b"))  # 2*6,738,415,616 / (5 * 524,288)
    Fraction(1645121, 320)
    """
    options = options or Options(mode="infer", batch=1, seq=1)
    dtypes = serving_dtypes(options)
    graph = inference_graph(replace(model, window=None), replace(options, tp=1))
    values = {**model.values(), **inference_values(model, options)}
    weights = weight_bytes(graph, dtypes).total.evaluate(values)
    per_token = kv_cache(graph, const(1), dtypes[2]).total.evaluate({**values, b: 1})
    return Fraction(weights) / (5 * per_token)


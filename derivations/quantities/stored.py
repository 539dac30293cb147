"""Weight bytes of a quantized checkpoint as its method stores them (``quantization_config``, read by
``derivations.models.quantization``): per linear module of the layers, the packed weight and its
scales, zero points and indices, each as the library's module allocates it; everything else (embeddings,
norms, biases, the LM head, routers, the modules the config leaves alone) in 16 bit.

Per module of ``out`` x ``in`` weights (``G = ceil(in/g)`` groups per row):

* FP8, transformers' ``FP8Linear`` (integrations/finegrained_fp8.py, v5.25): ``weight`` fp8, ``out x in``
  bytes; ``weight_scale_inv`` fp32, ``ceil(out/b0) x ceil(in/b1)`` for ``weight_block_size [b0, b1]``, one
  for per-tensor; ``activation_scale`` fp32 (one) under ``activation_scheme: static``.
* fbgemm FP8, ``FbgemmFp8Linear`` (integrations/fbgemm_fp8.py): fp8 ``weight`` and an fp32 ``weight_scale``
  ``(out, 1)``; its ``input_scale_ub`` buffer is not persistent (not stored).
* compressed-tensors (``compressed_tensors`` lifecycle/initialize.py and compressors): ``weight`` fp8/int8 one
  byte each, or for ``pack-quantized`` ``weight_packed`` int32 ``(out, ceil(in / (32/bits)))`` and
  ``weight_shape`` int64 ``(2,)``; ``weight_scale`` in the checkpoint's 16-bit dtype, one per tensor, per
  channel ``(out, 1)``, per group ``(out, G)`` or per block; asymmetric: ``weight_zero_point`` (int8, or packed
  in int32 along the output for pack-quantized); ``actorder: group``: ``weight_g_idx`` int32 ``(in,)``;
  static input activations: ``input_scale`` (one).
* GPTQ (AutoGPTQ / GPTQModel ``QuantLinear``): ``qweight`` int32 ``(in x bits / 32, out)``, ``qzeros`` int32
  ``(G, out x bits / 32)``, ``scales`` fp16 ``(G, out)``, ``g_idx`` int32 ``(in,)`` (stored with or without
  ``desc_act``).
* AWQ GEMM (AutoAWQ ``WQLinear_GEMM``): ``qweight`` int32 ``(in, out x bits / 32)``, ``qzeros`` int32
  ``(G, out x bits / 32)``, ``scales`` fp16 ``(G, out)``.
* bitsandbytes 4-bit (``Params4bit`` and its ``QuantState.as_dict(packed=True)``): ``weight`` uint8
  ``ceil(n/2)``; ``absmax`` per 64 weights, fp32, or under double quantization uint8 plus ``nested_absmax``
  fp32 per 256 blocks and ``nested_quant_map`` (256 fp32); ``quant_map`` (16 fp32); and a JSON blob
  ``quant_state.bitsandbytes__nf4`` of a few hundred bytes (not counted). LLM.int8(): ``weight`` int8, ``SCB``
  fp32 per row.
* MXFP4 (gpt-oss): the routed experts' ``_blocks`` (two values a byte) and ``_scales`` (one e8m0 byte per 32).
* ModelOpt (``quant_algo``; vLLM modelopt.py reads these names): FP8, ``weight`` fp8 and fp32 ``weight_scale``
  and ``input_scale`` (one each); NVFP4, ``weight`` uint8 ``(out, in/2)``, ``weight_scale`` fp8 ``(out, G)`` for
  ``group_size`` 16, fp32 ``weight_scale_2`` and ``input_scale``.

A fused op of the graph that the checkpoint stores as several modules (``attn/qkv`` as ``q_proj``,
``k_proj``, ``v_proj``; experts' ``gate_up`` as ``gate_proj`` and ``up_proj`` per expert) is counted per
module: per-module tensors (``g_idx``, per-tensor scales) come once per module.

>>> from memderive.derivations.models.quantization import read_quantization
>>> gptq = read_quantization({"quant_method": "gptq", "bits": 4, "group_size": 128})
>>> [(k, int(v)) for k, v in module_bytes(gptq, 4096, 4096)]  # 4096*4096/2; 32*512*4; 32*4096*2; 4*4096
[('', 8388608), ('zeros', 65536), ('scales', 262144), ('g_idx', 16384)]
"""

from __future__ import annotations

from typing import Any

from memderive.derivations.models.model import Model
from memderive.derivations.models.quantization import Quantization, skips_module
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.peft_names import PEFT_NAMES
from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.dims import a, a_kv, d_h
from memderive.symbolic.expr import Expr, ceiling, const
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.split_fused import SplitFused
from memderive.symbolic.strategies import Strategy
from memderive.symbolic.tensor import Tensor

__all__ = ["module_bytes", "stored_weight_bytes", "checkpoint_scheme", "module_name", "checkpoint_splits",
           "dequantized_weight", "STORED_CITATION"]

STORED_CITATION = Citation("transformers-quantizers", "each method's linear module: packed weight, scales, zero "
                           "points, indices (transformers integrations/*.py, AutoGPTQ, AutoAWQ, bitsandbytes, "
                           "compressed-tensors)")
#: 16-bit tensors beside the quantized ones (embeddings, norms, biases, head, skipped modules).
OTHER_BYTES = 2
_PREFIX = {"attn": "self_attn", "mlp": "mlp", "moe": "mlp"}
_DEFAULT_NAMES = {**PEFT_NAMES["llama"], "experts": ("layer/moe/experts",), "gate": ("layer/moe/router",)}


def checkpoint_scheme(model: Model, weight_dtype: str | None) -> Quantization | None:
    """The checkpoint's scheme when no ``--weight-dtype`` overrides it; its reason as an error when memderive
    cannot store it exactly."""
    q = model.quantization
    if q is None or weight_dtype is not None:
        return None
    if q.reason:
        raise OptionsError(f"{model.name}: quantization_config: {q.reason}")
    if q.scheme == "mxfp4" and model.arch.moe is None:
        raise OptionsError(f"{model.name}: quantization_config mxfp4 stores routed experts; the model has none")
    names = [module_name(model, path, i) for i in range(model.sizes["l"]) for path in _layer_paths(model)]
    per_layer = {}
    for name in names:
        key = name.split(".", 3)[3]
        per_layer.setdefault(key, set()).add(skips_module(q, name))
    mixed = sorted(k for k, v in per_layer.items() if len(v) > 1)
    if mixed:
        raise OptionsError(f"{model.name}: quantization_config leaves {mixed[0]} unquantized in some layers only; "
                           "memderive stores every layer alike: give --weight-dtype")
    return q


def _table(model: Model) -> dict[str, tuple[str, ...]]:
    return PEFT_NAMES.get(model.arch.family, _DEFAULT_NAMES)


def _layer_paths(model: Model) -> list[str]:
    return [f"layer/{op.path}" for blk, op in checkpoint_graph(model).ops() if blk.name == "layer" and op.params]


def module_name(model: Model, path: str, layer: int = 0) -> str:
    """The transformers module name of a layer op (``layer/attn/q`` -> ``model.layers.0.self_attn.q_proj``),
    by the family's PEFT module names (LLaMA's where the family has none listed)."""
    table = _table(model)
    leaf = next((name for name, groups in table.items() for g in groups if path in g.split("+")), None)
    op = path.split("/", 1)[1]
    if leaf is None:
        leaf = {"moe/experts": "experts", "moe/router": "gate"}.get(op, op.rsplit("/", 1)[-1])
    return f"model.layers.{layer}.{_PREFIX.get(op.split('/')[0], op.split('/')[0])}.{leaf}"


def checkpoint_splits(model: Model) -> list[Strategy]:
    """``attn/qkv`` as q, k, v where the checkpoint stores them apart (the family's modules are
    ``q_proj``, ``k_proj``, ``v_proj``)."""
    table = _table(model)
    separate = any("layer/attn/q" in g for gs in table.values() for g in gs)
    if not separate:
        return []
    return [SplitFused("attn/qkv", (("attn/q", a * d_h), ("attn/k", a_kv * d_h), ("attn/v", a_kv * d_h)))]


def checkpoint_graph(model: Model) -> Graph:
    graph = model.graph(dropout=False)
    for step in checkpoint_splits(model):
        graph = step(graph)
    return graph


def module_bytes(q: Quantization, rows: Any, cols: Any, count: Any = 1) -> list[tuple[str, Expr]]:
    """``(part, bytes)`` of ``count`` quantized modules of ``rows`` (out) x ``cols`` (in) weights."""
    rows, cols, c = const(rows), const(cols), const(count)
    n, g = rows * cols, q.group
    groups = ceiling(cols / g) if g else const(1)
    if q.scheme == "fp8":
        scales = const(1) if q.block is None else ceiling(rows / q.block[0]) * ceiling(cols / q.block[1])
        return [("", c * n), ("scales", c * 4 * scales)] + ([("input_scales", c * 4)] if q.static_input else [])
    if q.scheme == "fbgemm_fp8":
        return [("", c * n), ("scales", c * 4 * rows)]
    if q.scheme in ("ct-float", "ct-int", "ct-pack"):
        return _compressed(q, rows, cols, c)
    if q.scheme in ("gptq", "awq"):
        packed = ceiling(cols * q.bits / 32) * rows if q.scheme == "gptq" else cols * ceiling(rows * q.bits / 32)
        parts = [("", c * 4 * packed), ("zeros", c * 4 * groups * ceiling(rows * q.bits / 32)),
                 ("scales", c * 2 * groups * rows)]
        return parts + ([("g_idx", c * 4 * cols)] if q.scheme == "gptq" else [])
    if q.scheme in ("nf4", "fp4"):
        blocks = ceiling(n / 64)
        absmax = (c * (blocks + 4 * ceiling(blocks / 256) + 1024) if q.double_quant else c * 4 * blocks)
        return [("", c * ceiling(n / 2)), ("scales", absmax + c * 64)]
    if q.scheme == "int8":
        return [("", c * n), ("scales", c * 4 * rows)]
    if q.scheme == "mxfp4":
        return [("", c * n / 2), ("scales", c * rows * ceiling(cols / 32))]
    if q.scheme == "modelopt-fp8":
        return [("", c * n), ("scales", c * 4), ("input_scales", c * 4)]
    if q.scheme == "modelopt-nvfp4":  # weight_scale fp8 per group, weight_scale_2 fp32
        return [("", c * ceiling(n / 2)), ("scales", c * (rows * groups + 4)), ("input_scales", c * 4)]
    raise ValueError(q.scheme)


def _compressed(q: Quantization, rows: Expr, cols: Expr, c: Expr) -> list[tuple[str, Expr]]:
    if q.per_tensor:
        scales, per_row = const(1), None
    elif q.block:
        scales, per_row = ceiling(rows / q.block[0]) * ceiling(cols / q.block[1]), None
    else:
        per_row = ceiling(cols / q.group) if q.group else const(1)
        scales = rows * per_row
    parts: list[tuple[str, Expr]] = []
    if q.scheme == "ct-pack":
        factor = 32 // q.bits
        parts += [("", c * 4 * rows * ceiling(cols / factor)), ("shape", c * 16)]
    else:
        parts.append(("", c * rows * cols))
    parts.append(("scales", c * q.scale_bytes * scales))
    if q.zero_points:
        packed = q.scheme == "ct-pack" and per_row is not None
        parts.append(("zeros", c * (4 * ceiling(rows / (32 // q.bits)) * per_row if packed else scales)))
    if q.act_order:
        parts.append(("g_idx", c * 4 * cols))
    if q.static_input:
        parts.append(("input_scales", c * q.scale_bytes))
    return parts


def _quantized(q: Quantization, model: Model, blk: Block, op: Op, x: Tensor) -> bool:
    if x.role != "weight":
        return False
    if blk.name == "head":
        return q.lm_head and op.path == "lm_head"
    if blk.name not in ("layer", "first_layer") or op.kind not in ("linear", "experts"):
        return False
    if q.scheme == "mxfp4" and op.kind != "experts":
        return False
    return not skips_module(q, module_name(model, f"layer/{op.path}"))


def stored_weight_bytes(graph: Graph, model: Model, q: Quantization) -> Breakdown:
    """Bytes of the parameters one GPU holds as the checkpoint stores them (see the module docstring)."""
    terms: list[Term] = []
    for blk, op in graph.ops():
        for x in op.params:
            path, repeat = f"{blk.name}/{op.path}", blk.repeat * op.share
            if not _quantized(q, model, blk, op, x):
                terms.append(Term(f"weights/{path}", repeat * x.numel * OTHER_BYTES))
                continue
            if op.kind == "experts":
                experts, rows, cols = x.shape
                fused = x.name.endswith("gate_up") and q.scheme != "mxfp4"  # stored as gate_proj and up_proj
                count, rows = (2 * experts, const(rows) / 2) if fused else (experts, rows)
            else:
                (rows, cols), count = x.shape, 1
            for part, size in module_bytes(q, rows, cols, count):
                terms.append(Term(f"weights/{part + '/' if part else ''}{path}", repeat * size))
    return Breakdown(tuple(terms), "bytes")


def dequantized_weight(graph: Graph, model: Model, q: Quantization, other: Any) -> tuple[Expr, ...]:
    """The 16-bit copy of a 4-bit weight bitsandbytes makes for a prompt of several tokens (``Linear4bit.forward``:
    one token goes through ``gemv_4bit`` with no copy; more through ``MatMul4Bit``, ``dequantize_4bit(B)`` in
    the activations' dtype): the largest quantized linear's weight, a transient of the prefill."""
    if q.scheme not in ("nf4", "fp4"):
        return ()
    sizes = {x.numel for blk, op in graph.ops() for x in op.params if op.kind == "linear" and _quantized(q, model, blk, op, x)}
    return tuple(const(n) * other.nbytes for n in sizes)

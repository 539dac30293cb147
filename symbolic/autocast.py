"""``torch.autocast`` over an fp32 model: which dtype each saved tensor has, and the casts autograd saves.

Under autocast the weights stay fp32 and each op runs in the dtype its autocast list gives it
(``aten/src/ATen/autocast_mode.cpp``, ``AUTOCAST_CITATION``): the *lower-precision* ops (``linear``/``addmm``/``mm``,
``matmul``/``bmm``, ``scaled_dot_product_attention``) cast their floating inputs to the 16-bit dtype
and save those casts; the *fp32* ops cast theirs up, and the lists differ by device:
``softmax``, ``log_softmax`` and ``layer_norm`` are fp32 ops on CUDA, and run in their input's dtype on
CPU (``AT_FORALL_FP32``/``KERNEL_CUDA`` vs the CPU list, which has neither; ``tests/test_autocast.py``
pins it by running them). Every other op runs in the dtype its inputs promote to (a 16-bit tensor
plus an fp32 one is fp32: the residual stream of a post-norm encoder stays fp32).

What that saves, op by op:

* a linear: the 16-bit cast of its input when the input is fp32 (a new tensor, beside whatever keeps
  the fp32 one), else the input itself; and the 16-bit cast of its weight (autocast caches one cast
  per fp32 weight per forward, ``cached_cast``; the linear saves it). Three linears reading one
  input (BERT's query, key, value) cast it three times (the cache keeps only leaves' casts);
* attention (eager, composite): q, k, v as the linears made them; the softmax's output in fp32 on
  CUDA (16-bit on CPU), the dropout's mask (bool on CUDA, a float mask in the softmax's dtype on CPU)
  and the 16-bit input of the probabilities' matmul (its cast of the fp32 probabilities on CUDA);
* layer norm: its input in fp32 on CUDA (cast when 16-bit), in its own dtype on CPU, and the stats;
* other ops (GELU, tanh, dropout, adds): their tensors in the promoted dtype.

Graphs with ops of other kinds (RMSNorm, rotary, SDPA's GQA layouts, experts...) are left to the
caller (``Autocast.covers``): there the 16-bit activations stand in, and the estimate says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.kernels import promote
from memderive.symbolic.strategies import Strategy
from memderive.symbolic.tensor import Tensor

__all__ = ["Autocast", "AUTOCAST_KINDS", "FP32_OPS", "AUTOCAST_CITATION"]

AUTOCAST_CITATION = Citation("pytorch-autocast", "lower_precision_fp ops (linear, addmm, mm, matmul, bmm, "
                             "scaled_dot_product_attention), CUDA's fp32 ops (softmax, log_softmax, layer_norm), "
                             "cached_cast of fp32 weights")

FP32 = dtype("fp32")
#: The op kinds whose autocast dtypes are written out below.
AUTOCAST_KINDS = frozenset({"embedding", "add", "layer_norm", "dropout", "linear", "attention", "gelu", "tanh"})
#: Ops of the graph on autocast's fp32 list, by device (``autocast_mode.cpp``: CUDA's
#: ``KERNEL_CUDA(softmax, fp32)``, ``log_softmax``, ``layer_norm``; the CPU list has none of them).
FP32_OPS = {"cuda": frozenset({"softmax", "log_softmax", "layer_norm"}), "cpu": frozenset()}


@dataclass(frozen=True, slots=True)
class Autocast(Strategy):
    """``torch.autocast(device, dtype=low)`` over a graph built in fp32 (see the module docstring).

    ``separate_qkv``: the attention's q, k, v come from three linears reading one input (transformers'
    BERT, LLaMA), so an fp32 input is cast three times; GPT-2's one ``c_attn`` casts it once."""

    device: str = "cuda"
    low: DType = dtype("fp16")
    separate_qkv: bool = True
    attention: str = "eager"

    @property
    def name(self) -> str:
        return f"torch.autocast({self.device!r}, {self.low}) over fp32 weights"

    def covers(self, graph: Graph) -> bool:
        """Every op of a kind written out here; attention only as eager code (SDPA's math fallback upcasts
        16-bit inputs to fp32 on CPU, its fused kernels are other ops)."""
        kinds = {op.kind for _, op in graph.ops()}
        return kinds <= AUTOCAST_KINDS and (self.attention == "eager" or "attention" not in kinds)

    def __call__(self, graph: Graph) -> Graph:
        if not self.covers(graph):
            kinds = sorted({op.kind for _, op in graph.ops()} - AUTOCAST_KINDS) or [f"{self.attention} attention"]
            raise ValueError(f"autocast dtypes are not written out for {', '.join(kinds)}")
        carried: DType | None = None
        blocks = []
        for blk in graph.blocks:
            blk, carried = self._block(blk, carried)
            blocks.append(blk)
        note = (f"{self.name}: linears, matmuls and attention run in {self.low} and save their {self.low} "
                f"casts (weights cast once per forward); "
                + ("softmax and layer norm in fp32 (CUDA's fp32 list)" if self.device == "cuda"
                   else "softmax and layer norm in their inputs' dtype (CPU's list)"))
        return replace(graph, blocks=tuple(blocks), strategies=graph.strategies + (self.name,),
                       assumptions=graph.assumptions + (note,))

    # --- per block --------------------------------------------------------------------------------
    def _block(self, blk: Block, carried: DType | None) -> tuple[Block, DType | None]:
        have: dict[str, DType] = {blk.input.name: carried or blk.input.dtype}
        ops = []
        for op in blk.ops:
            op = self._op(op, have)
            ops.append(op)
            have[op.output.name] = op.output.dtype
        last = [op.output.name for op in ops if not op.output.name.startswith("@")]
        out = replace(blk, ops=tuple(ops), input=replace(blk.input, dtype=have[blk.input.name]))
        return out, (have[last[-1]] if last else carried)

    def _dtype_of(self, name: str, have: dict[str, DType], fallback: DType) -> DType:
        if name in have:
            return have[name]
        owner = max((n for n in have if name.startswith(n.removesuffix(".out") + ".")), key=len, default=None)
        return have[owner] if owner is not None else fallback  # attn/qkv.q: a view of what attn/qkv made

    def _op(self, op: Op, have: dict[str, DType]) -> Op:
        ins = [self._dtype_of(x, have, FP32) for x in op.inputs]
        floats = [d for d in ins if d.name in ("fp32", "bf16", "fp16")]
        kind = op.kind
        if kind == "embedding":
            return self._retype(op, FP32, keep_saved=True)
        if kind == "add":
            return self._retype(op, promote(*floats) if floats else FP32)
        if kind in ("dropout", "gelu", "tanh"):
            return self._retype(op, floats[0] if floats else FP32)
        if kind == "layer_norm":
            c = FP32 if "layer_norm" in FP32_OPS[self.device] else (floats[0] if floats else FP32)
            saved = tuple(self._cast(x, c, have, x.shape) if x.name in op.inputs else replace(x, dtype=c)
                          for x in op.saved)
            return replace(op, saved=saved, output=replace(op.output, dtype=c), program=())
        if kind == "linear":
            return self._linear(op, have)
        if kind == "attention":
            return self._attention(op, have)
        raise AssertionError(kind)

    def _retype(self, op: Op, c: DType, keep_saved: bool = False) -> Op:
        """The op's output, and its floating saved tensors, in ``c`` (a bool mask stays bool)."""
        saved = op.saved if keep_saved else tuple(
            replace(x, dtype=c) if x.dtype.name in ("fp32", "bf16", "fp16") else x for x in op.saved)
        return replace(op, saved=saved, output=replace(op.output, dtype=c), program=())

    def _cast(self, x: Tensor, c: DType, have: dict[str, DType], shape: tuple) -> Tensor:
        """``x`` as an op running in ``c`` saves it: itself when it has that dtype, else its cast (a new
        tensor, named apart from ``x``)."""
        if self._dtype_of(x.name, have, FP32) == c:
            return replace(x, dtype=c)
        return replace(x, name=f"{x.name}:{c}", dtype=c, shape=shape, role=x.role)

    def _linear(self, op: Op, have: dict[str, DType]) -> Op:
        low, out = self.low, op.output
        saved: list[Tensor] = []
        for x in op.saved:
            rows = (*out.shape[:-1], x.shape[-1])  # what the linear reads (the pooler: the first token)
            cast = self._cast(x, low, have, rows)
            if cast.name != x.name and op.path == "attn/qkv" and self.separate_qkv:  # q, k and v each cast it
                saved += [replace(cast, name=f"{cast.name}:{p}") for p in ("q_proj", "k_proj", "v_proj")]
            else:
                saved.append(cast)
        saved += [Tensor(f"{w.name}:{low}", w.shape, low, role="weight-cast") for w in op.params if w.role == "weight"]
        return replace(op, saved=tuple(saved), output=replace(out, dtype=low), program=())

    def _attention(self, op: Op, have: dict[str, DType]) -> Op:
        low = self.low
        soft = FP32 if "softmax" in FP32_OPS[self.device] else low
        dropped = any(x.name.endswith(".dropout.out") for x in op.saved)
        saved: list[Tensor] = []
        for x in op.saved:
            if x.role in ("q", "k", "v"):
                saved.append(replace(x, dtype=low))
            elif x.name.endswith(".softmax"):
                saved.append(replace(x, dtype=soft))
                if not dropped and soft != low:  # the probabilities' matmul saves its 16-bit cast
                    saved.append(replace(x, name=f"{x.name}:{low}", dtype=low))
            elif x.name.endswith(".dropout.mask"):
                saved.append(x if x.dtype.name == "bool" else replace(x, dtype=soft))
            elif x.name.endswith(".dropout.out"):
                saved.append(replace(x, dtype=low))  # the matmul's operand: 16-bit (a cast of fp32 on CUDA)
            else:
                raise ValueError(f"{op.path}: no autocast rule for saved tensor {x.name!r} ({x.role})")
        return replace(op, saved=tuple(saved), output=replace(op.output, dtype=low), program=())
